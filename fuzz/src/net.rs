//! The egress proxy: what a sandboxed program sends it (HTTP request heads, the first bytes of
//! a CONNECT tunnel).

use cordon_net::fuzzing::{self, HeadError, Hello};
use cordon_policy::network::Host;

/// The most headers the proxy parses in a head (`cordon-net`'s `http::MAX_HEADERS`).
const PROXY_MAX_HEADERS: usize = 128;

/// Headers the upstream request must never carry (hop-by-hop, the proxy's own).
const HOP: &[&str] = &[
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// Bytes a sandboxed program sends the proxy as a plain-HTTP request. What the proxy forwards
/// is one complete head and nothing else (no request smuggled after it), with one `Host`
/// header naming the host the policy checked, no hop-by-hop header, `Connection: close`, and
/// the same body framing the proxy itself read: the origin cannot see a different request
/// than the one judged.
pub fn http_request(data: &[u8]) {
    if let Some(end) = fuzzing::head_end(data) {
        assert!(end <= data.len());
        let _ = fuzzing::parse_request(&data[..end]);
    }
    let Ok(f) = fuzzing::forward(data) else {
        return;
    };
    let up = &f.upstream;
    assert_eq!(
        fuzzing::head_end(up),
        Some(up.len()),
        "the upstream request is not exactly one head: {:?}",
        String::from_utf8_lossy(up)
    );
    let lines = up.split(|&b| b == b'\n').count().saturating_sub(3);
    let head = match fuzzing::parse_request(up) {
        Ok(head) => head,
        // A client's 128 headers (the proxy's cap) plus the `Host` it adds: more than the
        // proxy's own parser takes, which the origin's limit, not this check, is about.
        Err(HeadError::TooLarge) if lines > PROXY_MAX_HEADERS => return,
        Err(e) => panic!(
            "the upstream request does not parse ({e:?}): {:?}",
            String::from_utf8_lossy(up)
        ),
    };
    assert!(head.target.starts_with('/'), "target {:?}", head.target);
    let hosts: Vec<&[u8]> = head
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map(|(_, v)| v.as_slice())
        .collect();
    assert_eq!(hosts, [f.authority.as_bytes()], "Host headers upstream");
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        assert!(!HOP.contains(&lower.as_str()), "{name} forwarded");
        if lower == "connection" {
            assert_eq!(value.as_slice(), b"close", "Connection forwarded");
        }
    }
    assert_eq!(
        fuzzing::framing(&head),
        Ok(f.framing),
        "the origin would frame the body differently than the proxy"
    );
}

/// The first bytes of a CONNECT tunnel: the SNI parser never panics, its verdict on a complete
/// ClientHello does not change with bytes that follow it or on any cut before its end
/// (which reads as "need more", never as another name), and every host name the proxy could
/// allow is read back from a ClientHello carrying it.
pub fn tls_sni(data: &[u8]) {
    let verdict = fuzzing::sni(data);
    if let Hello::Complete(_) = &verdict {
        let mut more = data.to_vec();
        more.extend_from_slice(b"\x17\x03\x03\x00\x05hello");
        assert_eq!(
            fuzzing::sni(&more),
            verdict,
            "trailing bytes changed the verdict"
        );
        for cut in [data.len() / 2, data.len().saturating_sub(1)] {
            let v = fuzzing::sni(&data[..cut]);
            assert!(
                v == Hello::Incomplete || v == verdict,
                "a cut at {cut} reads as {v:?}, the whole as {verdict:?}"
            );
        }
    }
    if let Hello::Complete(Some(name)) = &verdict {
        assert!(!name.is_empty());
    }
    if data.len() < 256 {
        if let Ok(Host::Name(n)) = Host::parse(&crate::text(data)) {
            let record = fuzzing::client_hello_record(Some(&n));
            assert_eq!(fuzzing::sni(&record), Hello::Complete(Some(n.clone())));
        }
    }
}
