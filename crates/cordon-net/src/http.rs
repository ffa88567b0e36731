//! HTTP/1.x heads: reading, checking and rewriting. Parsing is httparse's; this module decides
//! what the proxy accepts and what it forwards.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Largest request or response head accepted.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
pub(crate) const MAX_HEADERS: usize = 128;

/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1), plus the proxy's own.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// Headers that frame the message: never dropped on a client's say-so (a `Connection:
/// content-length` must not make the proxy and the server disagree on where a body ends).
const FRAMING: &[&str] = &["content-length", "transfer-encoding"];

#[derive(Debug)]
pub enum HeadError {
    /// The peer closed before sending a complete head.
    Closed,
    TooLarge,
    Malformed(String),
    Io(io::Error),
}

#[derive(Debug, Clone)]
pub struct RequestHead {
    pub method: String,
    pub target: String,
    pub minor_version: u8,
    pub headers: Vec<(String, Vec<u8>)>,
}

#[derive(Debug, Clone)]
pub(crate) struct ResponseHead {
    pub minor_version: u8,
    pub code: u16,
    pub reason: String,
    pub headers: Vec<(String, Vec<u8>)>,
}

/// Where a head ends (index after the blank line), looking at bytes from `from` on. httparse
/// accepts bare LF line ends, so the blank line is `\n\n` or `\n\r\n`.
pub(crate) fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let start = from.saturating_sub(2);
    (start..buf.len()).find_map(|i| match buf.get(i..) {
        Some([b'\n', b'\n', ..]) => Some(i + 2),
        Some([b'\n', b'\r', b'\n', ..]) => Some(i + 3),
        _ => None,
    })
}

/// Read from `r` until a whole head is in `buf`; returns its length. Bytes past the head stay
/// in `buf`. The parser runs only once the blank line is there, so a client dripping bytes
/// costs linear time.
async fn read_head<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>) -> Result<usize, HeadError> {
    let mut scanned = 0;
    loop {
        if let Some(end) = head_end(buf, scanned) {
            return Ok(end);
        }
        scanned = buf.len();
        if buf.len() >= MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
        let mut chunk = [0u8; 8192];
        let room = (MAX_HEAD - buf.len()).min(chunk.len());
        let n = r.read(&mut chunk[..room]).await.map_err(HeadError::Io)?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn owned_headers(headers: &[httparse::Header<'_>]) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .map(|h| (h.name.to_string(), h.value.to_vec()))
        .collect()
}

fn parse_error(e: httparse::Error) -> HeadError {
    match e {
        httparse::Error::TooManyHeaders => HeadError::TooLarge,
        other => HeadError::Malformed(other.to_string()),
    }
}

/// `read_head` stopped at the blank line, so a head httparse still calls partial is malformed.
fn complete(parsed: httparse::Result<usize>, what: &str) -> Result<(), HeadError> {
    match parsed.map_err(parse_error)? {
        httparse::Status::Complete(_) => Ok(()),
        httparse::Status::Partial => Err(HeadError::Malformed(format!("incomplete {what} head"))),
    }
}

/// Reads one head and parses it with `parse`; returns it and the bytes that followed it.
async fn read_parsed<R, T, P>(r: &mut R, parse: P) -> Result<(T, Vec<u8>), HeadError>
where
    R: AsyncRead + Unpin,
    P: for<'b> FnOnce(&'b [u8], &mut [httparse::Header<'b>]) -> Result<T, HeadError>,
{
    let mut buf = Vec::with_capacity(1024);
    let end = read_head(r, &mut buf).await?;
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let head = parse(&buf[..end], &mut headers)?;
    Ok((head, buf.split_off(end)))
}

pub(crate) fn parse_request<'b>(
    buf: &'b [u8],
    headers: &mut [httparse::Header<'b>],
) -> Result<RequestHead, HeadError> {
    let mut req = httparse::Request::new(headers);
    complete(req.parse(buf), "request")?;
    Ok(RequestHead {
        method: req.method.unwrap_or_default().to_string(),
        target: req.path.unwrap_or_default().to_string(),
        minor_version: req.version.unwrap_or(1),
        headers: owned_headers(req.headers),
    })
}

fn parse_response<'b>(
    buf: &'b [u8],
    headers: &mut [httparse::Header<'b>],
) -> Result<ResponseHead, HeadError> {
    let mut resp = httparse::Response::new(headers);
    complete(resp.parse(buf), "response")?;
    Ok(ResponseHead {
        minor_version: resp.version.unwrap_or(1),
        code: resp.code.unwrap_or(0),
        reason: resp.reason.unwrap_or_default().to_string(),
        headers: owned_headers(resp.headers),
    })
}

/// Read one request head; returns it and the bytes that followed it.
pub(crate) async fn read_request<R: AsyncRead + Unpin>(
    r: &mut R,
) -> Result<(RequestHead, Vec<u8>), HeadError> {
    read_parsed(r, parse_request).await
}

/// Read one response head; returns it and the bytes that followed it.
pub(crate) async fn read_response<R: AsyncRead + Unpin>(
    r: &mut R,
) -> Result<(ResponseHead, Vec<u8>), HeadError> {
    read_parsed(r, parse_response).await
}

/// The values of every header called `name`.
pub(crate) fn header_values<'a>(
    headers: &'a [(String, Vec<u8>)],
    name: &'a str,
) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers
        .iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

/// Lowercased tokens of every `Connection` and `Proxy-Connection` header.
fn connection_tokens(headers: &[(String, Vec<u8>)]) -> Vec<String> {
    headers
        .iter()
        .filter(|(n, _)| {
            n.eq_ignore_ascii_case("connection") || n.eq_ignore_ascii_case("proxy-connection")
        })
        .flat_map(|(_, v)| {
            String::from_utf8_lossy(v)
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .filter(|t| !t.is_empty())
        .collect()
}

/// How a request body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// The body framing of a request, refusing every ambiguity request smuggling lives on.
pub(crate) fn request_framing(headers: &[(String, Vec<u8>)]) -> Result<Framing, String> {
    let te: Vec<&[u8]> = header_values(headers, "transfer-encoding").collect();
    let cl: Vec<&[u8]> = header_values(headers, "content-length").collect();
    if !te.is_empty() {
        if !cl.is_empty() {
            return Err("both Transfer-Encoding and Content-Length".into());
        }
        if te.len() != 1 || !te[0].trim_ascii().eq_ignore_ascii_case(b"chunked") {
            return Err(
                "unsupported Transfer-Encoding (only a single 'chunked' is relayed)".into(),
            );
        }
        return Ok(Framing::Chunked);
    }
    let mut length = None;
    for value in cl {
        let text = std::str::from_utf8(value).map_err(|_| "bad Content-Length".to_string())?;
        for part in text.split(',') {
            let part = part.trim();
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err("bad Content-Length".into());
            }
            let n: u64 = part.parse().map_err(|_| "bad Content-Length".to_string())?;
            if length.is_some_and(|l| l != n) {
                return Err("conflicting Content-Length values".into());
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(0) | None => Framing::None,
        Some(n) => Framing::Length(n),
    })
}

/// The request as the origin server gets it: origin-form target, `Host` from the checked
/// target, hop-by-hop and proxy headers removed, `Connection: close`.
pub(crate) fn origin_request(
    head: &RequestHead,
    path: &str,
    host_header: &str,
) -> Result<Vec<u8>, String> {
    let listed = connection_tokens(&head.headers);
    if let Some(t) = listed
        .iter()
        .find(|t| FRAMING.contains(&t.as_str()) || *t == "host")
    {
        return Err(format!("Connection header lists '{t}'"));
    }
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(
        format!(
            "{} {} HTTP/1.{}\r\n",
            head.method,
            path,
            head.minor_version.min(1)
        )
        .as_bytes(),
    );
    out.extend_from_slice(format!("Host: {host_header}\r\n").as_bytes());
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        if lower == "host" || HOP_BY_HOP.contains(&lower.as_str()) || listed.contains(&lower) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(out)
}

/// A response head as the client gets it: hop-by-hop headers removed, `Connection: close`
/// (the proxy serves one request per client connection).
pub(crate) fn client_response(head: &ResponseHead) -> Vec<u8> {
    let listed = connection_tokens(&head.headers);
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(
        format!(
            "HTTP/1.{} {} {}\r\n",
            head.minor_version.min(1),
            head.code,
            head.reason
        )
        .as_bytes(),
    );
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        let framing = FRAMING.contains(&lower.as_str());
        if HOP_BY_HOP.contains(&lower.as_str()) || (listed.contains(&lower) && !framing) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// An answer from the proxy itself.
pub(crate) fn proxy_response(status: u16, text: &str) -> Vec<u8> {
    let phrase = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    let body = format!("cordon egress proxy: {text}\n");
    format!(
        "HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The parts of an absolute-form `http://` target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AbsoluteUrl {
    pub authority: String,
    /// Origin-form: starts with `/`, fragment removed.
    pub path: String,
}

pub(crate) fn parse_absolute(target: &str) -> Result<AbsoluteUrl, String> {
    let Some((scheme, rest)) = target.split_once("://") else {
        return Err("request target is not an absolute http:// URL (this is a proxy)".into());
    };
    if scheme.eq_ignore_ascii_case("https") {
        return Err("https URLs go through CONNECT".into());
    }
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(format!(
            "unsupported URL scheme '{}'",
            crate::events::sanitize(scheme)
        ));
    }
    let end = rest.find(['/', '?', '#', '\\']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains('@') {
        return Err("credentials in the URL are not allowed".into());
    }
    if authority.is_empty() {
        return Err("URL without a host".into());
    }
    if path.starts_with('\\') {
        return Err("backslash after the URL host".into());
    }
    let path = path.split('#').next().unwrap_or_default();
    let path = if path.is_empty() {
        "/".to_string()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    Ok(AbsoluteUrl {
        authority: authority.to_string(),
        path,
    })
}

/// The host part of an authority as written, for the event log (no validation).
pub(crate) fn raw_host(authority: &str) -> &str {
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(i) => &authority[..=i],
            None => authority,
        };
    }
    match authority.matches(':').count() {
        1 => authority.split(':').next().unwrap_or(authority),
        _ => authority,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn framing_refuses_ambiguity() {
        assert_eq!(request_framing(&h(&[])), Ok(Framing::None));
        assert_eq!(
            request_framing(&h(&[("Content-Length", "10")])),
            Ok(Framing::Length(10))
        );
        assert_eq!(
            request_framing(&h(&[("Content-Length", "10, 10")])),
            Ok(Framing::Length(10))
        );
        assert_eq!(
            request_framing(&h(&[("Content-Length", "0")])),
            Ok(Framing::None)
        );
        assert_eq!(
            request_framing(&h(&[("transfer-encoding", " Chunked ")])),
            Ok(Framing::Chunked)
        );
        for bad in [
            h(&[("Content-Length", "10"), ("Content-Length", "11")]),
            h(&[("Content-Length", "1,2")]),
            h(&[("Content-Length", "-1")]),
            h(&[("Content-Length", "+1")]),
            h(&[("Content-Length", "")]),
            h(&[("Content-Length", "99999999999999999999999")]),
            h(&[("Transfer-Encoding", "chunked"), ("Content-Length", "3")]),
            h(&[("Transfer-Encoding", "gzip, chunked")]),
            h(&[
                ("Transfer-Encoding", "chunked"),
                ("Transfer-Encoding", "chunked"),
            ]),
            h(&[("Transfer-Encoding", "xchunked")]),
        ] {
            assert!(request_framing(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn absolute_urls() {
        let u = parse_absolute("http://Allowed.test:8080/a/b?c=d#frag").unwrap();
        assert_eq!(
            u,
            AbsoluteUrl {
                authority: "Allowed.test:8080".into(),
                path: "/a/b?c=d".into()
            }
        );
        assert_eq!(parse_absolute("HTTP://a.test").unwrap().path, "/");
        assert_eq!(parse_absolute("http://a.test?x").unwrap().path, "/?x");
        assert_eq!(
            parse_absolute("http://[::1]:80/").unwrap().authority,
            "[::1]:80"
        );
        for bad in [
            "/relative",
            "*",
            "https://a.test/",
            "ftp://a.test/",
            "http://allowed.test@evil.test/",
            "http://user:pw@a.test/",
            "http:///path",
            "http://a.test\\@evil.test/",
            "a.test:443",
        ] {
            assert!(parse_absolute(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn origin_request_strips_hop_by_hop() {
        let head = RequestHead {
            method: "GET".into(),
            target: "http://a.test/x".into(),
            minor_version: 1,
            headers: h(&[
                ("Host", "a.test"),
                ("Proxy-Connection", "keep-alive"),
                ("Proxy-Authorization", "Basic eA=="),
                ("Connection", "keep-alive, X-Secret"),
                ("X-Secret", "1"),
                ("Keep-Alive", "timeout=5"),
                ("Upgrade", "websocket"),
                ("TE", "trailers"),
                ("Accept", "*/*"),
            ]),
        };
        let out = String::from_utf8(origin_request(&head, "/x", "a.test").unwrap()).unwrap();
        assert_eq!(
            out,
            "GET /x HTTP/1.1\r\nHost: a.test\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let mut smuggle = head.clone();
        smuggle.headers = h(&[("Connection", "content-length"), ("Content-Length", "5")]);
        assert!(origin_request(&smuggle, "/", "a.test").is_err());
    }

    #[test]
    fn client_response_keeps_framing() {
        let head = ResponseHead {
            minor_version: 1,
            code: 302,
            reason: "Found".into(),
            headers: h(&[
                ("Location", "http://evil.test/"),
                ("Connection", "keep-alive, Transfer-Encoding"),
                ("Transfer-Encoding", "chunked"),
                ("Keep-Alive", "timeout=5"),
            ]),
        };
        let out = String::from_utf8(client_response(&head)).unwrap();
        assert_eq!(
            out,
            "HTTP/1.1 302 Found\r\nLocation: http://evil.test/\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn head_end_search() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody", 0), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\nbody", 0), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r", 0), None);
        // Resumed search still finds a terminator straddling the previous end.
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\n", 16), Some(18));
        assert_eq!(raw_host("a.test:80"), "a.test");
        assert_eq!(raw_host("[::1]:80"), "[::1]");
        assert_eq!(raw_host("::1"), "::1");
    }
}
