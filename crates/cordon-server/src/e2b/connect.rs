//! envd's Connect framing (JSON codec, as the SDKs send it): the five-byte envelope (a flag
//! byte and a big-endian length) before each message, unary and server-stream answers, and
//! [`RpcError`], the Connect error, with its mapping from the service's error kinds.
//!
//! The framing is written here: the Rust Connect crates bring their own server stack and code
//! generation for what is a handful of JSON messages over the axum router we already run.
//!
//! Threat model: every envelope is client input: a length over [`MAX_MESSAGE`] or a compressed
//! frame is refused before any of it is kept, and a body is read up to a bound only.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::error::{ApiError, ErrorKind};

/// The largest Connect message taken (a request is a command, a path or a chunk of stdin).
pub(super) const MAX_MESSAGE: usize = 8 << 20;
pub(super) const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
pub(super) const FLAG_COMPRESSED: u8 = 0x01;
pub(super) const FLAG_END: u8 = 0x02;

/// A Connect error: its code names the status (`not_found`, …).
pub(super) struct RpcError {
    pub(super) code: &'static str,
    pub(super) message: String,
}

impl RpcError {
    pub(super) fn new(code: &'static str, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }

    pub(super) fn http_status(&self) -> StatusCode {
        match self.code {
            "invalid_argument" | "failed_precondition" | "out_of_range" => StatusCode::BAD_REQUEST,
            "unauthenticated" => StatusCode::UNAUTHORIZED,
            "permission_denied" => StatusCode::FORBIDDEN,
            "not_found" => StatusCode::NOT_FOUND,
            "already_exists" | "aborted" => StatusCode::CONFLICT,
            "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
            "unimplemented" => StatusCode::NOT_IMPLEMENTED,
            "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            "deadline_exceeded" => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub(super) fn body(&self) -> Value {
        json!({"code": self.code, "message": self.message})
    }

    /// A unary call's error answer.
    pub(super) fn unary(self) -> Response {
        (
            self.http_status(),
            [(header::CONTENT_TYPE, "application/json")],
            self.body().to_string(),
        )
            .into_response()
    }
}

impl From<cordon_service::error::ServiceError> for RpcError {
    fn from(e: cordon_service::error::ServiceError) -> Self {
        ApiError(e).into()
    }
}

impl From<ApiError> for RpcError {
    fn from(e: ApiError) -> Self {
        let code = match (e.kind, e.code) {
            (_, "already_exists") => "already_exists",
            (ErrorKind::Invalid | ErrorKind::Unprocessable | ErrorKind::UnsupportedMedia, _) => {
                "invalid_argument"
            }
            (ErrorKind::Unauthenticated, _) => "unauthenticated",
            (ErrorKind::Forbidden, _) => "permission_denied",
            (ErrorKind::NotFound, _) => "not_found",
            (ErrorKind::Conflict, _) => "failed_precondition",
            (
                ErrorKind::TooLarge
                | ErrorKind::RateLimited
                | ErrorKind::Quota
                | ErrorKind::NoSpace,
                _,
            ) => "resource_exhausted",
            (ErrorKind::Unsupported, _) => "unimplemented",
            (ErrorKind::Upstream | ErrorKind::Unavailable, _) => "unavailable",
            (ErrorKind::Internal, _) => "internal",
        };
        RpcError::new(code, e.0.message)
    }
}

/// One Connect envelope.
pub(super) fn frame(flags: u8, msg: &Value) -> Bytes {
    let body = msg.to_string().into_bytes();
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(flags);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Bytes::from(out)
}

/// Splits whole envelopes off the front of `buf`; what is left is an incomplete one.
pub(super) fn take_frames(buf: &mut Vec<u8>) -> Result<Vec<(u8, Vec<u8>)>, RpcError> {
    let mut out = Vec::new();
    loop {
        if buf.len() < 5 {
            return Ok(out);
        }
        let flags = buf[0];
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if len > MAX_MESSAGE {
            return Err(RpcError::new(
                "resource_exhausted",
                format!("message of {len} bytes is over the limit of {MAX_MESSAGE}"),
            ));
        }
        if flags & FLAG_COMPRESSED != 0 {
            return Err(RpcError::new(
                "internal",
                "compressed messages are not accepted (send them uncompressed)",
            ));
        }
        if buf.len() < 5 + len {
            return Ok(out);
        }
        let msg = buf[5..5 + len].to_vec();
        buf.drain(..5 + len);
        out.push((flags, msg));
    }
}

/// How a request is encoded, from its content type.
#[derive(PartialEq)]
pub(super) enum Kind {
    Unary,
    Stream,
}

pub(super) fn kind(h: &HeaderMap) -> Result<Kind, RpcError> {
    let ct = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match ct.as_str() {
        "application/json" => Ok(Kind::Unary),
        "application/connect+json" => Ok(Kind::Stream),
        other => Err(RpcError::new(
            "unimplemented",
            format!(
                "content type '{other}' is not served: use the JSON codec (application/json, application/connect+json)"
            ),
        )),
    }
}

pub(super) fn decode<T: for<'de> Deserialize<'de>>(data: &[u8]) -> Result<T, RpcError> {
    let data = if data.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        data
    };
    serde_json::from_slice(data)
        .map_err(|e| RpcError::new("invalid_argument", format!("request message: {e}")))
}

/// A body of at most `max` bytes, or `None`. Past the limit the rest is read and dropped (up
/// to a bound), so the client reads the error instead of meeting a closed connection.
pub(super) async fn read_limited(body: Body, max: usize) -> Option<Vec<u8>> {
    const DRAIN_LIMIT: usize = 64 << 20;
    let mut stream = body.into_data_stream();
    let mut data = Vec::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.ok()?;
        seen += chunk.len();
        if seen > max {
            data = Vec::new();
            if seen > max + DRAIN_LIMIT {
                return None;
            }
            continue;
        }
        data.extend_from_slice(&chunk);
    }
    (seen <= max).then_some(data)
}

/// Reads a whole request body up front (all but a client stream's), so that an answer given
/// before the body is looked at — an unknown method, a wrong token — still leaves the
/// connection clean for the client's next request.
pub(super) async fn pre_read(body: Body, whole: bool) -> Result<Body, RpcError> {
    if !whole {
        return Ok(body);
    }
    read_limited(body, MAX_MESSAGE + 5)
        .await
        .map(Body::from)
        .ok_or_else(|| {
            RpcError::new(
                "resource_exhausted",
                format!("request over the limit of {MAX_MESSAGE} bytes"),
            )
        })
}

/// The single message of a unary or server-stream request.
pub(super) async fn one_message(body: Body, k: &Kind) -> Result<Vec<u8>, RpcError> {
    let data = read_limited(body, MAX_MESSAGE + 5).await.ok_or_else(|| {
        RpcError::new(
            "resource_exhausted",
            format!("request over the limit of {MAX_MESSAGE} bytes"),
        )
    })?;
    if *k == Kind::Unary {
        return Ok(data);
    }
    let mut buf = data;
    let mut frames = take_frames(&mut buf)?;
    if !buf.is_empty() || frames.len() != 1 {
        return Err(RpcError::new(
            "invalid_argument",
            "a server-streaming request is exactly one whole envelope",
        ));
    }
    let (flags, msg) = frames.remove(0);
    if flags & FLAG_END != 0 {
        return Err(RpcError::new(
            "invalid_argument",
            "the request envelope is marked end-of-stream",
        ));
    }
    Ok(msg)
}

/// A server-stream answer: the messages `rx` yields, then the end envelope.
pub(super) fn stream_response(rx: mpsc::Receiver<Bytes>) -> Response {
    let body = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/connect+json")],
        Body::from_stream(body),
    )
        .into_response()
}

/// A streaming call that fails before it starts: a 200 with only the end envelope.
pub(super) fn stream_error(e: RpcError) -> Response {
    let (tx, rx) = mpsc::channel(1);
    let _ = tx.try_send(frame(FLAG_END, &json!({"error": e.body()})));
    stream_response(rx)
}

pub(super) fn answer(k: &Kind, r: Result<Response, RpcError>) -> Response {
    match (r, k) {
        (Ok(resp), _) => resp,
        (Err(e), Kind::Stream) => stream_error(e),
        (Err(e), Kind::Unary) => e.unary(),
    }
}

pub(super) fn unary_ok(v: Value) -> Result<Response, RpcError> {
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response())
}

pub(super) fn timeout_of(h: &HeaderMap) -> Option<Duration> {
    h.get("connect-timeout-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

pub(super) fn keepalive_of(h: &HeaderMap) -> Duration {
    h.get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| (1..=3600).contains(s))
        .map_or(Duration::from_secs(50), Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_and_refuse() {
        let mut buf = frame(0, &json!({"a": 1})).to_vec();
        buf.extend_from_slice(&frame(FLAG_END, &json!({}))[..3]);
        let got = take_frames(&mut buf).ok().unwrap_or_default();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, br#"{"a":1}"#);
        assert_eq!(buf.len(), 3, "the partial envelope stays");
        let mut big = vec![0u8, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(take_frames(&mut big), Err(e) if e.code == "resource_exhausted"));
        let mut gz = vec![FLAG_COMPRESSED, 0, 0, 0, 0];
        assert!(take_frames(&mut gz).is_err());
    }
}
