//! HTTP/2 through the TLS termination of a secret's host (issue 30): when the client and the
//! upstream both chose `h2` by ALPN, each client stream becomes one upstream stream, with the
//! same rules as HTTP/1.1 (see `intercept`): the `:authority` (and any `host`) must be the TLS
//! name, placeholders are replaced in header values only, a placeholder of a secret not bound
//! to this host refuses the stream and is logged as an attempted exfiltration, a value an
//! upstream reflects in a response header goes back to its placeholder.
//!
//! Threat model: as `intercept`; the client is hostile and may open many streams (h2's own
//! stream limits and flow control bound them), send oversized headers (h2's header list
//! limit), or reset streams at any point.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use cordon_policy::network::{parse_authority, Host};
use http::{HeaderMap, HeaderValue, Request, Response};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::intercept::{
    decode_basic, deny_event, exfiltration, placeholder_in_value, replace, Interception,
    SecretBinding,
};
use crate::Shared;

/// What every stream of one connection shares.
pub(crate) struct Ctx {
    pub host: String,
    pub port: u16,
    pub icpt: Arc<Interception>,
    pub shared: Arc<Shared>,
    pub bytes: Arc<AtomicU64>,
    /// Requests a value went into.
    pub used: AtomicU64,
}

impl Ctx {
    /// Charge `n` bytes to the budget; false when it is exhausted.
    fn charge(&self, n: usize) -> bool {
        let granted = self.shared.take_bytes(n);
        self.bytes.fetch_add(granted as u64, Ordering::AcqRel);
        granted == n
    }

    fn bound(&self) -> Vec<&SecretBinding> {
        self.icpt
            .secrets()
            .iter()
            .filter(|s| s.hosts.contains(&self.host))
            .collect()
    }
}

/// Serve the client's h2 connection against the upstream's until either ends. Returns a note
/// for the connection's event, if any.
pub(crate) async fn serve<C, U>(client: C, upstream: U, ctx: Arc<Ctx>) -> Option<String>
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    U: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = match h2::client::handshake(upstream).await {
        Ok(pair) => pair,
        Err(e) => return Some(format!("upstream h2 handshake failed: {e}")),
    };
    let upstream_task = tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut server = match h2::server::handshake(client).await {
        Ok(s) => s,
        Err(e) => {
            upstream_task.abort();
            return Some(format!("client h2 handshake failed: {e}"));
        }
    };
    let mut streams = Vec::new();
    while let Some(next) = server.accept().await {
        let Ok((req, respond)) = next else { break };
        let (send, ctx) = (send.clone(), ctx.clone());
        streams.push(tokio::spawn(stream(req, respond, send, ctx)));
    }
    for s in streams {
        s.abort();
    }
    upstream_task.abort();
    None
}

async fn refuse(respond: &mut h2::server::SendResponse<Bytes>, status: u16, text: &str) {
    let body = Bytes::from(format!("cordon egress proxy: {text}\n"));
    let Ok(resp) = Response::builder()
        .status(status)
        .header("content-type", "text/plain; charset=utf-8")
        .header("content-length", body.len())
        .body(())
    else {
        return;
    };
    if let Ok(mut s) = respond.send_response(resp, false) {
        let _ = s.send_data(body, true);
    }
}

async fn stream(
    req: Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    send: h2::client::SendRequest<Bytes>,
    ctx: Arc<Ctx>,
) {
    let (mut parts, body) = req.into_parts();
    let (host, port) = (ctx.host.as_str(), ctx.port);
    // A placeholder of a secret not bound to this host, anywhere in the head.
    let target = parts.uri.to_string();
    let foreign = ctx.icpt.secrets().iter().find(|s| {
        !s.hosts.iter().any(|h| h == host)
            && (target.contains(&s.placeholder)
                || parts
                    .headers
                    .iter()
                    .any(|(_, v)| placeholder_in_value(v.as_bytes(), &s.placeholder)))
    });
    if let Some(s) = foreign {
        let reason = exfiltration(&s.name, host);
        deny_event(&ctx.shared, host, port, &reason);
        return refuse(&mut respond, 403, &reason).await;
    }
    let names_host = |text: &str| {
        matches!(
            parse_authority(text.trim()),
            Ok((Host::Name(n), p)) if n == host && p.unwrap_or(443) == port
        )
    };
    let authority_ok = parts
        .uri
        .authority()
        .is_some_and(|a| names_host(a.as_str()));
    let host_headers: Vec<&HeaderValue> = parts.headers.get_all("host").iter().collect();
    let host_ok = match host_headers.as_slice() {
        [] => true,
        [one] => one.to_str().is_ok_and(names_host),
        _ => false,
    };
    if !(authority_ok && host_ok) {
        let reason = format!(
            "h2 :authority or host does not name {host}, the TLS server name: request refused, \
             no secret substituted"
        );
        deny_event(&ctx.shared, host, port, &reason);
        return refuse(&mut respond, 403, &reason).await;
    }
    let bound = ctx.bound();
    let mut used = 0u64;
    let mut headers = HeaderMap::with_capacity(parts.headers.len() + bound.len());
    for (name, value) in parts.headers.iter() {
        let mut bytes = value.as_bytes().to_vec();
        for s in &bound {
            let (v, hit) = replace(&bytes, s.placeholder.as_bytes(), s.value.get().as_bytes());
            bytes = v;
            if hit {
                used += 1;
            } else if let Some(cred) = decode_basic(&bytes) {
                let (c, hit) = replace(&cred, s.placeholder.as_bytes(), s.value.get().as_bytes());
                if hit {
                    use base64::Engine as _;
                    bytes = format!(
                        "Basic {}",
                        base64::engine::general_purpose::STANDARD.encode(c)
                    )
                    .into_bytes();
                    used += 1;
                }
            }
        }
        match HeaderValue::from_bytes(&bytes) {
            Ok(v) => {
                headers.append(name.clone(), v);
            }
            Err(_) => return refuse(&mut respond, 400, "malformed header value").await,
        }
    }
    for s in &bound {
        let Some(header) = &s.header else { continue };
        let Ok(name) = http::HeaderName::from_bytes(header.to_ascii_lowercase().as_bytes()) else {
            continue;
        };
        if headers.contains_key(&name) {
            continue;
        }
        let value = match &s.format {
            Some(f) => f.replace("{value}", &s.value.get()),
            None => s.value.get(),
        };
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(name, v);
            used += 1;
        }
    }
    parts.headers = headers;
    ctx.used.fetch_add(used, Ordering::AcqRel);
    let end = body.is_end_stream();
    let mut send = match send.ready().await {
        Ok(s) => s,
        Err(e) => return refuse(&mut respond, 502, &format!("upstream: {e}")).await,
    };
    let (response, up_body) = match send.send_request(Request::from_parts(parts, ()), end) {
        Ok(pair) => pair,
        Err(e) => return refuse(&mut respond, 502, &format!("upstream: {e}")).await,
    };
    let upload = (!end).then(|| {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let _ = pipe(body, up_body, &ctx).await;
        })
    });
    let resp = match response.await {
        Ok(r) => r,
        Err(e) => {
            if let Some(u) = upload {
                u.abort();
            }
            return refuse(&mut respond, 502, &format!("upstream: {e}")).await;
        }
    };
    let (mut rparts, rbody) = resp.into_parts();
    for value in rparts.headers.values_mut() {
        let mut bytes = value.as_bytes().to_vec();
        for s in &bound {
            bytes = replace(&bytes, s.value.get().as_bytes(), s.placeholder.as_bytes()).0;
        }
        if let Ok(v) = HeaderValue::from_bytes(&bytes) {
            *value = v;
        }
    }
    let end = rbody.is_end_stream();
    let Ok(down) = respond.send_response(Response::from_parts(rparts, ()), end) else {
        return;
    };
    if !end {
        let _ = pipe(rbody, down, &ctx).await;
    }
    if let Some(u) = upload {
        let _ = u.await;
    }
}

/// Relay one body (and its trailers) with flow control: capacity released to the sender only
/// as the receiver takes the bytes.
async fn pipe(
    mut from: h2::RecvStream,
    mut to: h2::SendStream<Bytes>,
    ctx: &Ctx,
) -> Result<(), h2::Error> {
    while let Some(data) = from.data().await {
        let mut data = data?;
        let n = data.len();
        if !ctx.charge(n) {
            to.send_reset(h2::Reason::CANCEL);
            return Ok(());
        }
        while !data.is_empty() {
            to.reserve_capacity(data.len());
            let cap = match std::future::poll_fn(|cx| to.poll_capacity(cx)).await {
                Some(Ok(c)) => c,
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            };
            let chunk = data.split_to(cap.min(data.len()));
            to.send_data(chunk, false)?;
        }
        from.flow_control().release_capacity(n)?;
    }
    match from.trailers().await? {
        Some(t) => to.send_trailers(t),
        None => to.send_data(Bytes::new(), true),
    }
}
