//! Request smuggling, refused: a request whose head carries both `Content-Length` and
//! `Transfer-Encoding` is answered 400 by every door, before any handler sees it.
//!
//! Threat model: a client, or a front proxy that frames requests differently from this
//! server, sends a request whose body length two parsers could read two ways, hoping that
//! what one takes for body the other takes for a next request. hyper resolves the conflict as
//! RFC 9112 says (the chunked coding wins, the length is dropped, the connection closes after
//! the answer), but hands the request on without saying it had both — so the bytes are
//! watched here, on their way to hyper: [`Framing`] follows the request stream (heads, bodies by
//! length or chunks) and raises the connection's flag at the first head with both, which
//! [`guard`] reads before the request is served. Anything it cannot follow (an upgrade, a
//! malformed chunk, a head over 1 MiB) ends its watch, and hyper refuses the malformed itself.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// Larger heads are past hyper's own limit, which refuses them.
const MAX_HEAD: usize = 1 << 20;

/// The flag of one connection: a request head with both framings was seen on it.
#[derive(Clone, Default)]
pub struct Ambiguous(pub Arc<AtomicBool>);

impl Ambiguous {
    pub fn seen(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

enum State {
    /// Reading a head (leading empty lines allowed, as hyper allows them).
    Head(Vec<u8>),
    /// So many body bytes left.
    Body(u64),
    /// Reading a chunk-size line.
    ChunkSize(Vec<u8>),
    /// So many chunk bytes, then its CRLF (2 more).
    ChunkData(u64),
    /// Reading trailer lines, up to the empty one.
    Trailers(Vec<u8>),
    /// Not HTTP/1 requests any more (an upgrade) or not followable: no more watching.
    Opaque,
}

/// Follows one connection's request bytes.
pub struct Framing {
    state: State,
    flag: Ambiguous,
}

impl Framing {
    pub fn new(flag: Ambiguous) -> Framing {
        Framing {
            state: State::Head(Vec::new()),
            flag,
        }
    }

    /// Takes the next bytes of the stream.
    pub fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            match &mut self.state {
                State::Opaque => return,
                State::Head(buf) => {
                    if buf.is_empty() {
                        // Empty lines before a request line.
                        let skip = data
                            .iter()
                            .take_while(|b| **b == b'\r' || **b == b'\n')
                            .count();
                        data = &data[skip..];
                        if data.is_empty() {
                            return;
                        }
                    }
                    let start = buf.len().saturating_sub(3);
                    buf.extend_from_slice(data);
                    let Some(end) = find(&buf[start..], b"\r\n\r\n").map(|i| start + i + 4) else {
                        if buf.len() > MAX_HEAD {
                            self.state = State::Opaque;
                        }
                        return;
                    };
                    let used = data.len() - (buf.len() - end);
                    let head = std::mem::take(buf);
                    self.state = self.after_head(&head[..end]);
                    data = &data[used..];
                }
                State::Body(n) => {
                    let take = (*n).min(data.len() as u64);
                    *n -= take;
                    data = &data[take as usize..];
                    if *n == 0 {
                        self.state = State::Head(Vec::new());
                    }
                }
                State::ChunkSize(line) => {
                    let Some(nl) = data.iter().position(|b| *b == b'\n') else {
                        line.extend_from_slice(data);
                        if line.len() > 4096 {
                            self.state = State::Opaque;
                        }
                        return;
                    };
                    line.extend_from_slice(&data[..nl]);
                    data = &data[nl + 1..];
                    let text = String::from_utf8_lossy(line);
                    let size = text.split(';').next().unwrap_or("").trim();
                    self.state = match u64::from_str_radix(size, 16) {
                        Ok(0) => State::Trailers(Vec::new()),
                        Ok(n) => match n.checked_add(2) {
                            Some(n) => State::ChunkData(n),
                            None => State::Opaque,
                        },
                        Err(_) => State::Opaque,
                    };
                }
                State::ChunkData(n) => {
                    let take = (*n).min(data.len() as u64);
                    *n -= take;
                    data = &data[take as usize..];
                    if *n == 0 {
                        self.state = State::ChunkSize(Vec::new());
                    }
                }
                State::Trailers(line) => {
                    let Some(nl) = data.iter().position(|b| *b == b'\n') else {
                        line.extend_from_slice(data);
                        if line.len() > MAX_HEAD {
                            self.state = State::Opaque;
                        }
                        return;
                    };
                    let empty = line.iter().chain(&data[..nl]).all(|b| *b == b'\r');
                    data = &data[nl + 1..];
                    self.state = if empty {
                        State::Head(Vec::new())
                    } else {
                        State::Trailers(Vec::new())
                    };
                }
            }
        }
    }

    /// What follows a complete head; raises the flag for both framings.
    fn after_head(&self, head: &[u8]) -> State {
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut headers);
        if !matches!(req.parse(head), Ok(httparse::Status::Complete(_))) {
            return State::Opaque;
        }
        let named = |n: &'static str| -> Vec<&[u8]> {
            req.headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case(n))
                .map(|h| h.value)
                .collect()
        };
        let lengths = named("content-length");
        let codings = named("transfer-encoding");
        if !lengths.is_empty() && !codings.is_empty() {
            self.flag.0.store(true, Ordering::SeqCst);
            // hyper closes the connection after this request: nothing more to follow.
            return State::Opaque;
        }
        if req.method == Some("CONNECT") || !named("upgrade").is_empty() {
            return State::Opaque;
        }
        if let Some(last) = codings.last() {
            let chunked = String::from_utf8_lossy(last)
                .rsplit(',')
                .next()
                .is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
            return if chunked {
                State::ChunkSize(Vec::new())
            } else {
                State::Opaque
            };
        }
        match lengths.first() {
            None => State::Head(Vec::new()),
            Some(v) => match std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
            {
                Some(0) => State::Head(Vec::new()),
                Some(n) => State::Body(n),
                None => State::Opaque,
            },
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A connection's stream, its reads followed by a [`Framing`].
pub struct Watched<I> {
    io: I,
    framing: Framing,
}

impl<I> Watched<I> {
    pub fn new(io: I, flag: Ambiguous) -> Self {
        Watched {
            io,
            framing: Framing::new(flag),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            let new = buf.filled()[before..].to_vec();
            self.framing.feed(&new);
        }
        polled
    }
}

crate::http_serve::forward_async_write!(Watched);

/// The answer to a request read from a connection whose flag is up.
pub fn refusal() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::BAD_REQUEST,
        [
            (axum::http::header::CONTENT_TYPE, "application/json"),
            (axum::http::header::CONNECTION, "close"),
        ],
        r#"{"code":400,"message":"a request with both Content-Length and Transfer-Encoding is refused (request smuggling)"}"#,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flagged(parts: &[&[u8]]) -> bool {
        let flag = Ambiguous::default();
        let mut f = Framing::new(flag.clone());
        for p in parts {
            f.feed(p);
        }
        flag.seen()
    }

    #[test]
    fn both_framings_in_one_head_raise_the_flag() {
        assert!(flagged(&[
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        ]));
        // Split anywhere, even inside the final CRLF CRLF.
        assert!(flagged(&[
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nconte",
            b"nt-length: 4\r\n\r",
            b"\n",
        ]));
    }

    #[test]
    fn a_smuggled_head_after_honest_requests_is_found() {
        assert!(flagged(&[
            b"POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
            b"POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: v\r\n\r\n",
            b"\r\nGET /c HTTP/1.1\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
        ]));
    }

    #[test]
    fn bodies_that_look_like_heads_are_bodies() {
        let inner: &[u8] =
            b"GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let head = format!("POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n", inner.len());
        assert!(!flagged(&[
            head.as_bytes(),
            inner,
            b"GET / HTTP/1.1\r\n\r\n"
        ]));
        let chunk = format!("{:x}\r\n", inner.len());
        assert!(!flagged(&[
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            chunk.as_bytes(),
            inner,
            b"\r\n0\r\n\r\n",
        ]));
    }

    #[test]
    fn after_an_upgrade_nothing_is_watched() {
        assert!(!flagged(&[
            b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
        ]));
    }
}
