//! Every way around the allowlist in issue 5's scope, tried over both CONNECT and plain HTTP:
//! each is refused with its reason recorded, and the refused ones never cause a connection
//! (the connect filter sees only the allowed upstream, which is on loopback).

mod common;

use common::*;

/// (host as the client writes it, reason the event must start with)
const BYPASSES: &[(&str, &str)] = &[
    // Names not in the allowlist, including suffix and prefix tricks.
    ("evil.test", "not in allowlist"),
    ("allowed.test.evil.test", "not in allowlist"),
    ("evilallowed.test", "not in allowlist"),
    ("evilwild.test", "not in allowlist"),
    ("wild.test", "not in allowlist"),
    ("sub.allowed.test", "not in allowlist"),
    // IP literals in every spelling (127.0.0.1, 169.254.169.254, 10.0.0.1; none listed).
    ("127.0.0.1", "ip literal not allowed: 127.0.0.1"),
    ("2130706433", "ip literal not allowed: 127.0.0.1"),
    ("0x7f000001", "ip literal not allowed: 127.0.0.1"),
    ("0x7f.0.0.1", "ip literal not allowed: 127.0.0.1"),
    ("0177.0.0.1", "ip literal not allowed: 127.0.0.1"),
    ("127.1", "ip literal not allowed: 127.0.0.1"),
    ("127.0.0.1.", "ip literal not allowed: 127.0.0.1"),
    ("[::1]", "ip literal not allowed: ::1"),
    ("[::ffff:127.0.0.1]", "ip literal not allowed: 127.0.0.1"),
    ("[::ffff:7f00:1]", "ip literal not allowed: 127.0.0.1"),
    ("[0:0:0:0:0:ffff:127.0.0.1]", "ip literal not allowed: 127.0.0.1"),
    ("169.254.169.254", "ip literal not allowed: 169.254.169.254"),
    ("0xa9fea9fe", "ip literal not allowed: 169.254.169.254"),
    ("2852039166", "ip literal not allowed: 169.254.169.254"),
    ("169.254.43518", "ip literal not allowed: 169.254.169.254"),
    ("[fd00:ec2::254]", "ip literal not allowed: fd00:ec2::254"),
    ("10.0.0.1", "ip literal not allowed: 10.0.0.1"),
    ("012.0.0.1", "ip literal not allowed: 10.0.0.1"),
    ("0", "ip literal not allowed: 0.0.0.0"),
    // Allowed names whose (static) resolution lands in a special range.
    ("private.test", "resolves to private address 10.0.0.1"),
    ("metadata.test", "resolves to cloud metadata address 169.254.169.254"),
    ("loop.test", "resolves to loopback address 127.0.0.1"),
    ("mapped.test", "resolves to loopback address 127.0.0.1"),
    ("v6meta.test", "resolves to cloud metadata address fd00:ec2::254"),
    ("ula.test", "resolves to unique-local address fd00::1"),
    ("nat64.test", "resolves to NAT64 address 64:ff9b::a9fe:a9fe embedding cloud metadata address 169.254.169.254"),
    ("cgnat.test", "resolves to cloud metadata address 100.100.100.200"),
    ("linklocal.test", "resolves to link-local address fe80::1"),
    ("zero.test", "resolves to unspecified address 0.0.0.0"),
];

#[test]
fn every_bypass_is_refused_over_connect() {
    let p = Proxy::start(|_| {});
    for (host, reason) in BYPASSES {
        let (status, head, _) = tunnel(p.addr, &format!("{host}:443"));
        assert_eq!(status, 403, "{host}: {head}");
        assert!(head.contains(reason), "{host}: {head}");
        let e = p.event_for(host);
        assert_eq!(
            (e.verdict.as_str(), e.port, e.bytes),
            ("deny", 443, 0),
            "{host}: {e:?}"
        );
        assert!(e.reason.starts_with(reason), "{host}: {e:?}");
    }
    assert!(
        p.connects.lock().unwrap().is_empty(),
        "{:?}",
        p.connects.lock().unwrap()
    );
    assert_eq!(p.proxy.shutdown().len(), BYPASSES.len());
}

#[test]
fn every_bypass_is_refused_over_plain_http() {
    let up = Upstream::start();
    let p = Proxy::start(|_| {});
    for (host, reason) in BYPASSES {
        let resp = get(p.addr, &format!("http://{host}/hello"), host);
        assert_eq!(resp.status, 403, "{host}: {resp:?}");
        assert!(resp.text().contains(reason), "{host}: {}", resp.text());
        let e = p.event_for(host);
        assert_eq!((e.verdict.as_str(), e.port), ("deny", 80), "{host}: {e:?}");
        assert!(e.reason.starts_with(reason), "{host}: {e:?}");
    }
    assert!(p.connects.lock().unwrap().is_empty());
    assert!(up.heads().is_empty());
}

#[test]
fn ports_outside_the_entry_are_refused() {
    let p = Proxy::start(|_| {});
    let (status, head, _) = tunnel(p.addr, "portonly.test:2");
    assert_eq!(status, 403);
    assert!(
        head.contains("port 2 not allowed for portonly.test"),
        "{head}"
    );
    let resp = get(p.addr, "http://portonly.test/", "portonly.test");
    assert_eq!(resp.status, 403);
    assert!(resp
        .text()
        .contains("port 80 not allowed for portonly.test"));
    assert!(p.connects.lock().unwrap().is_empty());
}

#[test]
fn host_header_must_match_the_target() {
    let up = Upstream::start();
    let p = Proxy::start(|_| {});
    let port = up.port();
    let url = format!("http://allowed.test:{port}/hello");
    for (host_header, status, reason) in [
        (
            "evil.test",
            403,
            "host header mismatch: evil.test is not allowed.test:",
        ),
        (
            &format!("evil.test:{port}") as &str,
            403,
            "host header mismatch",
        ),
        ("allowed.test", 403, "host header mismatch"), // port 80 is not the target port
        ("allowed.test.evil.test", 403, "host header mismatch"),
        ("allowed.test@evil.test", 403, "host header mismatch"),
    ] {
        let resp = get(p.addr, &url, host_header);
        assert_eq!(resp.status, status, "{host_header}: {resp:?}");
        assert!(
            resp.text().contains(reason),
            "{host_header}: {}",
            resp.text()
        );
    }
    // Two Host headers.
    let req = format!("GET {url} HTTP/1.1\r\nHost: allowed.test:{port}\r\nHost: evil.test\r\n\r\n");
    assert_eq!(send(p.addr, req.as_bytes()).status, 400);
    // Equal after normalisation is fine.
    assert_eq!(
        get(p.addr, &url, &format!("ALLOWED.TEST.:{port}")).status,
        200
    );
    assert_eq!(up.heads().len(), 1);
    let denied: Vec<_> = p
        .proxy
        .events()
        .into_iter()
        .filter(|e| e.verdict == "deny")
        .collect();
    assert_eq!(denied.len(), 6, "{denied:#?}");
}

#[test]
fn url_tricks_are_refused() {
    let up = Upstream::start();
    let p = Proxy::start(|_| {});
    let port = up.port();
    for (url, status) in [
        (format!("http://allowed.test@evil.test:{port}/"), 400),
        (format!("http://allowed.test:{port}@evil.test/"), 400),
        (format!("http://%61llowed.test:{port}/"), 400),
        (format!("http://allowed.test:{port}\\@evil.test/"), 400),
        (format!("http://allowed.test%2f@evil.test:{port}/"), 400),
        (format!("http://allowed.test:{port}:{port}/"), 400),
    ] {
        let resp = get(p.addr, &url, "allowed.test");
        assert_eq!(resp.status, status, "{url}: {resp:?}");
    }
    for target in [
        "allowed.test@evil.test:443",
        "%61llowed.test:443",
        "allowed.test:443:443",
        "[::1:443",
    ] {
        let (status, head, _) = tunnel(p.addr, target);
        assert_eq!(status, 400, "{target}: {head}");
    }
    assert!(up.heads().is_empty());
    assert!(p.connects.lock().unwrap().is_empty());
}

#[test]
fn names_are_normalised_before_matching() {
    let up = Upstream::start();
    let p = Proxy::start(|_| {});
    let port = up.port();
    for host in [
        "ALLOWED.TEST",
        "allowed.test.",
        "Allowed.Test.",
        "a.wild.test",
        "A.WILD.TEST.",
    ] {
        let resp = get(
            p.addr,
            &format!("http://{host}:{port}/hello"),
            &format!("{host}:{port}"),
        );
        assert_eq!(resp.status, 200, "{host}: {resp:?}");
    }
    p.assert_loopback_only();
}
