//! `cordon serve`'s doors: E2B's Connect envelopes and `/files` uploads (gzip, multipart),
//! MCP's stdio framing — bytes from any API client.

use std::io::Write;

use cordon_server::e2b::fuzzing as e2b;
use cordon_server::mcp::{classify, peek_id, Verdict};
use serde_json::Value;

/// A Connect request body, fed to the envelope splitter in chunks whose size the first byte
/// picks (as the network delivers them). No envelope over the cap is ever taken or waited
/// for (a caller reads at most the cap plus a header before refusing), compressed ones are
/// refused, the split loses and invents nothing, and the chunking does not change it.
pub fn connect_envelope(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(pick % 64) + 1;
    let whole = split(body, body.len().max(1));
    let chunked = split(body, chunk);
    assert_eq!(whole, chunked, "chunks of {chunk} bytes split differently");
    if let Ok((frames, left)) = &whole {
        let mut again = Vec::new();
        for (flags, msg) in frames {
            assert!(
                msg.len() <= e2b::MAX_MESSAGE,
                "a frame of {} bytes",
                msg.len()
            );
            assert_eq!(flags & 0x01, 0, "a compressed frame was taken");
            again.push(*flags);
            again.extend_from_slice(&(msg.len() as u32).to_be_bytes());
            again.extend_from_slice(msg);
        }
        again.extend_from_slice(left);
        assert_eq!(again, body, "the split lost or invented bytes");
    }
}

type Split = Result<(Vec<(u8, Vec<u8>)>, Vec<u8>), &'static str>;

fn split(body: &[u8], chunk: usize) -> Split {
    let mut buf = Vec::new();
    let mut frames = Vec::new();
    for piece in body.chunks(chunk) {
        buf.extend_from_slice(piece);
        frames.extend(e2b::take_frames(&mut buf)?);
        if buf.len() >= 5 {
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            assert!(
                len <= e2b::MAX_MESSAGE,
                "waiting for an envelope of {len} bytes, over the cap"
            );
            assert!(
                buf.len() < 5 + len,
                "a whole envelope was left in the buffer"
            );
        }
    }
    Ok((frames, buf))
}

/// One line of MCP's stdio transport (or an HTTP body). Each unusable message is answered
/// with a JSON-RPC error object whose id is null or one MCP allows; a message that passes is
/// one rmcp writes back in a form that passes again; and the id read from any cut of the
/// line (how an over-long line is answered) is the one read from a longer cut, if any.
pub fn mcp_framing(data: &[u8]) {
    match classify(data) {
        Verdict::Blank => assert!(String::from_utf8_lossy(data).trim().is_empty()),
        Verdict::Reject { error, .. } => {
            assert_eq!(error["jsonrpc"], "2.0");
            assert!(error["error"]["code"].is_i64(), "{error}");
            assert!(error["error"]["message"].is_string(), "{error}");
            let id = &error["id"];
            assert!(
                id.is_null() || id.is_string() || id.is_i64() || id.is_u64(),
                "{error}"
            );
        }
        Verdict::Pass(msg) => {
            let mut v = serde_json::to_value(&msg).expect("a message serialises");
            // rmcp writes a custom notification without params as `"params": null`, which
            // JSON-RPC (and so `classify`) refuses; cordon never writes a client's message
            // back, so only the rest of the round trip is held to.
            if let Some(o) = v.as_object_mut() {
                if o.get("params").is_some_and(Value::is_null) {
                    o.remove("params");
                }
            }
            let text = serde_json::to_vec(&v).expect("a message serialises");
            assert!(
                matches!(classify(&text), Verdict::Pass(_)),
                "{} passed, but written back as {} it does not",
                String::from_utf8_lossy(data),
                String::from_utf8_lossy(&text)
            );
        }
    }
    let full = peek_id(data);
    if let Some(id) = &full {
        assert!(id.is_string() || id.is_i64() || id.is_u64(), "{id}");
    }
    let mut later: Option<Value> = full;
    for cut in [data.len() * 3 / 4, data.len() / 2, data.len() / 4] {
        let v = peek_id(&data[..cut]);
        if let (Some(a), Some(b)) = (&v, &later) {
            assert_eq!(a, b, "a cut at {cut} reads another id");
        }
        if v.is_some() {
            later = v;
        }
    }
}

thread_local! {
    static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
}

const MAX_UPLOAD: usize = 64 << 10;

/// An envd `/files` upload body: the first byte says whether it is gzip and whether it is
/// multipart. gzip never unpacks past the cap (a bomb is a 413, garbage a 400) and what it
/// unpacks is what was packed; a multipart body is read to its end or refused, and every file
/// name in it lands on an absolute path in the sandbox.
pub fn upload_body(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let mut body = body.to_vec();
    if mode & 1 == 1 {
        match e2b::gunzip(&body, MAX_UPLOAD) {
            Ok(out) => {
                assert!(out.len() <= MAX_UPLOAD, "{} bytes unpacked", out.len());
                let mut enc =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                enc.write_all(&out).expect("gzip");
                let packed = enc.finish().expect("gzip");
                assert_eq!(e2b::gunzip(&packed, MAX_UPLOAD), Ok(out.clone()));
                body = out;
            }
            Err(status) => {
                assert!(status == 400 || status == 413, "gunzip answered {status}");
                return;
            }
        }
    }
    if mode & 2 == 2 {
        RT.with(|rt| rt.block_on(multipart(body)));
    }
}

async fn multipart(body: Vec<u8>) {
    use axum::extract::{FromRequest, Multipart, Request};
    let len = body.len();
    let req = Request::builder()
        .method("POST")
        .uri("/files")
        .header("content-type", "multipart/form-data; boundary=fuzzboundary")
        .body(axum::body::Body::from(body))
        .expect("request");
    let Ok(mut mp) = Multipart::from_request(req, &()).await else {
        return;
    };
    let mut total = 0;
    while let Ok(Some(field)) = mp.next_field().await {
        let name = field.file_name().map(str::to_string);
        let Ok(data) = field.bytes().await else {
            break;
        };
        total += data.len();
        if let Some(n) = name {
            if let Some(p) = e2b::sandbox_path(&n) {
                assert!(p.starts_with('/'), "{n:?} lands on {p:?}");
                assert!(!p.contains('\0'));
            }
        }
    }
    assert!(
        total <= len,
        "{total} bytes of fields from a {len}-byte body"
    );
}
