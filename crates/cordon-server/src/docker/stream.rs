//! Docker's stream framing and connection hijacking: the 8-byte header of the multiplexed
//! stream (`[stream, 0, 0, 0, len BE u32]`, stream 1 stdout, 2 stderr) and the `101 UPGRADED`
//! answer by which `attach` and `exec start` hand the raw connection to the output (and,
//! with stdin attached, take the client's input from it).
//!
//! Threat model: the bytes framed are the sandbox's output, hostile: only framed (their
//! length counted), never interpreted. The client's input is passed on as bytes, through a
//! bounded channel.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

/// Frames larger than this are split (Docker's own readers allocate per frame).
const MAX_FRAME: usize = 1 << 20;

/// One chunk of output in the multiplexed format (`stream` 1: stdout, 2: stderr); with a
/// terminal (`tty`), the bytes as they are.
pub(crate) fn frame(stream: u8, data: &[u8], tty: bool) -> Vec<u8> {
    if tty {
        return data.to_vec();
    }
    let mut out = Vec::with_capacity(data.len() + 8 * (data.len() / MAX_FRAME + 1));
    for chunk in data.chunks(MAX_FRAME) {
        out.extend_from_slice(&[stream, 0, 0, 0]);
        out.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

fn content_type(tty: bool) -> HeaderValue {
    HeaderValue::from_static(if tty {
        "application/vnd.docker.raw-stream"
    } else {
        "application/vnd.docker.multiplexed-stream"
    })
}

/// The upgrade handle of a request that asked for one (`Upgrade: tcp`), taken before its
/// body is read.
pub(crate) fn take_upgrade(req: &mut Request) -> Option<hyper::upgrade::OnUpgrade> {
    let asked = req
        .headers()
        .get(header::UPGRADE)
        .is_some_and(|v| !v.is_empty());
    if asked {
        req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>()
    } else {
        None
    }
}

/// Answers with the chunks `rx` yields: on the hijacked connection (`101 UPGRADED`) when the
/// client asked to upgrade, else as a streamed `200` body. The connection ends with the stream.
pub(crate) fn respond(
    upgrade: Option<hyper::upgrade::OnUpgrade>,
    rx: mpsc::Receiver<Vec<u8>>,
    tty: bool,
) -> Response {
    respond_duplex(upgrade, rx, tty, None, Vec::new())
}

/// Docker's detach keys (`ctrl-p,ctrl-q` unless `spec` names others: `ctrl-<a-z@[\\]^_>` or
/// one character each, comma-separated): typed on an attached stdin, they end the attachment
/// and leave the process running.
pub(crate) fn detach_keys(spec: Option<&str>) -> Result<Vec<u8>, String> {
    let spec = spec.filter(|s| !s.is_empty()).unwrap_or("ctrl-p,ctrl-q");
    spec.split(',')
        .map(|k| {
            let bad = || format!("detachKeys: '{k}' is not ctrl-<key> or one character");
            match k.strip_prefix("ctrl-") {
                Some(c) => match c.as_bytes() {
                    [b @ b'a'..=b'z'] => Ok(b - b'a' + 1),
                    [b @ (b'@' | b'[' | b'\\' | b']' | b'^' | b'_')] => Ok(b & 0x1f),
                    _ => Err(bad()),
                },
                None => match k.as_bytes() {
                    [b] if b.is_ascii() => Ok(*b),
                    _ => Err(bad()),
                },
            }
        })
        .collect()
}

/// Passes a client's input on, holding back what may be the start of the detach sequence:
/// `Some(pass)` with the bytes to pass on now, `None` once the whole sequence was typed.
struct Detacher {
    keys: Vec<u8>,
    held: usize,
}

impl Detacher {
    fn feed(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        let mut pass = Vec::with_capacity(data.len());
        for &b in data {
            if self.keys.is_empty() {
                pass.push(b);
                continue;
            }
            if b == self.keys[self.held] {
                self.held += 1;
                if self.held == self.keys.len() {
                    return None;
                }
                continue;
            }
            // Not the sequence after all: what was held goes on, then this byte, which may
            // start the sequence again.
            pass.extend_from_slice(&self.keys[..self.held]);
            self.held = 0;
            if b == self.keys[0] {
                self.held = 1;
                if self.keys.len() == 1 {
                    return None;
                }
            } else {
                pass.push(b);
            }
        }
        Some(pass)
    }
}

/// What a client sends on a hijacked connection: a chunk of its stdin, or `None` at its end
/// (it closed its writing half, or the connection).
pub(crate) type Input = mpsc::Sender<Option<Vec<u8>>>;

/// [`respond`], and with `input` what the client writes on the hijacked connection goes
/// there, chunk by chunk, then `None` at its end (`attach` and `exec start` with stdin). The
/// bytes are the client's, only passed on; reading pauses while `input` is full, so a client
/// cannot queue more than its 16 chunks in the server.
/// With `detach` (see [`detach_keys`]; empty: none), the client typing that sequence ends the
/// connection, the process left running.
pub(crate) fn respond_duplex(
    upgrade: Option<hyper::upgrade::OnUpgrade>,
    mut rx: mpsc::Receiver<Vec<u8>>,
    tty: bool,
    input: Option<Input>,
    detach: Vec<u8>,
) -> Response {
    match upgrade {
        Some(on) => {
            tokio::spawn(async move {
                let Ok(upgraded) = on.await else { return };
                let (mut rd, mut io) = tokio::io::split(hyper_util::rt::TokioIo::new(upgraded));
                let detached = std::sync::Arc::new(tokio::sync::Notify::new());
                let detach_seen = detached.clone();
                if let Some(input) = input {
                    tokio::spawn(async move {
                        use tokio::io::AsyncReadExt;
                        let mut buf = vec![0u8; 64 * 1024];
                        let mut keys = Detacher {
                            keys: detach,
                            held: 0,
                        };
                        loop {
                            match rd.read(&mut buf).await {
                                Ok(0) | Err(_) => {
                                    let _ = input.send(None).await;
                                    return;
                                }
                                Ok(n) => match keys.feed(&buf[..n]) {
                                    Some(pass) if pass.is_empty() => {}
                                    Some(pass) => {
                                        if input.send(Some(pass)).await.is_err() {
                                            return;
                                        }
                                    }
                                    None => {
                                        // A permit is kept if the writer is not waiting yet.
                                        detach_seen.notify_one();
                                        return;
                                    }
                                },
                            }
                        }
                    });
                }
                // docker-py reads the answer's head through a buffered reader, then the
                // stream from the raw socket underneath: bytes that arrive with the head are
                // lost in that buffer. Docker's daemon starts the process after the head is
                // out; this pause gives the client the same time to read it.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                loop {
                    let chunk = tokio::select! {
                        c = rx.recv() => c,
                        () = detached.notified() => None,
                    };
                    let Some(chunk) = chunk else { break };
                    if io.write_all(&chunk).await.is_err() {
                        return;
                    }
                    let _ = io.flush().await;
                }
                let _ = io.shutdown().await;
            });
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
            let h = r.headers_mut();
            h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
            h.insert(header::UPGRADE, HeaderValue::from_static("tcp"));
            h.insert(header::CONTENT_TYPE, content_type(tty));
            r
        }
        None => {
            let stream = futures::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|c| (Ok::<_, std::io::Error>(c), rx))
            });
            let mut r = Response::new(Body::from_stream(stream));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, content_type(tty));
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detach_keys_parse_as_docker_writes_them() {
        assert_eq!(detach_keys(None), Ok(vec![0x10, 0x11]));
        assert_eq!(detach_keys(Some("ctrl-x")), Ok(vec![0x18]));
        assert_eq!(
            detach_keys(Some("ctrl-@,a,ctrl-_")),
            Ok(vec![0, b'a', 0x1f])
        );
        assert!(detach_keys(Some("ctrl-")).is_err());
        assert!(detach_keys(Some("meta-x")).is_err());
    }

    #[test]
    fn the_detach_sequence_is_held_back_and_a_partial_one_passes_on() {
        let mut d = Detacher {
            keys: vec![0x10, 0x11],
            held: 0,
        };
        assert_eq!(d.feed(b"ab\x10"), Some(b"ab".to_vec()));
        assert_eq!(d.feed(b"c"), Some(b"\x10c".to_vec()));
        assert_eq!(d.feed(b"\x10\x10"), Some(b"\x10".to_vec()));
        assert_eq!(d.feed(b"\x11rest"), None);
        let mut none = Detacher {
            keys: Vec::new(),
            held: 0,
        };
        assert_eq!(none.feed(b"\x10\x11"), Some(b"\x10\x11".to_vec()));
    }

    #[test]
    fn a_frame_is_the_stream_three_zeros_and_the_length_big_endian() {
        assert_eq!(
            frame(2, b"hi", false),
            vec![2, 0, 0, 0, 0, 0, 0, 2, b'h', b'i']
        );
        assert_eq!(frame(1, b"hi", true), b"hi".to_vec());
    }
}
