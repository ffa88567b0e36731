//! The service keeps its contract: a private data directory, an atomic quota, JSON errors for
//! every request it cannot use, an OpenAPI document generated from the router, and a README
//! walk-through that runs as written. Real `cordon serve` on loopback, real HTTP clients.
#![allow(clippy::result_large_err)] // ureq 2 errors carry the whole response; fine in tests.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

mod serve;
use serve::{unique, Server};

fn scratch(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "cordon-http-{tag}-{}-{}",
        std::process::id(),
        unique()
    ))
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .mode()
        & 0o7777
}

/// Every entry of the data directory, with its mode.
fn modes(dir: &Path) -> Vec<(String, u32)> {
    let mut v: Vec<(String, u32)> = std::fs::read_dir(dir)
        .expect("data dir")
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                mode(&e.path()),
            )
        })
        .collect();
    v.sort();
    v
}

fn cordon_under_umask(umask: &str, args: &[&str], dir: &Path) -> std::process::Output {
    Command::new("/bin/sh")
        .args(["-c", &format!("umask {umask} && exec \"$0\" \"$@\"")])
        .arg(env!("CARGO_BIN_EXE_cordon"))
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .output()
        .expect("run cordon")
}

/// The registry (key hashes), its WAL and shared-memory files, the audit log and the lock are
/// 0600 in a 0700 directory, whether the server and `cordon keys` run under umask 022 or 000.
#[test]
fn data_directory_is_private_whatever_the_umask() {
    for umask in ["022", "000"] {
        let parent = scratch(&format!("umask{umask}"));
        let dir = parent.join("data");
        // `cordon keys create` may be the first to touch the directory.
        let out = cordon_under_umask(umask, &["keys", "create", "--name", "k"], &dir);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(mode(&dir), 0o700, "umask {umask}: {:?}", modes(&dir));
        let mut s = Server::start_with(dir.clone(), &[], Some(umask));
        s.key = String::from_utf8(out.stdout)
            .expect("key")
            .trim()
            .to_string();
        // Write through every file: a sandbox (registry, WAL), an exec (audit).
        let (st, v) = s.call("POST", "/v1/sandboxes", Some(json!({})));
        assert_eq!(st, 201, "{v}");
        let id = v["id"].as_str().expect("id").to_string();
        let (st, v) = s.call(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"cmd": "true"})),
        );
        assert_eq!(st, 200, "{v}");
        let found = modes(&dir);
        let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
        for f in [
            "audit.jsonl",
            "cordon.db",
            "cordon.db-wal",
            "cordon.db-shm",
            "lock",
        ] {
            assert!(names.contains(&f), "umask {umask}: no {f} in {found:?}");
        }
        for (name, m) in &found {
            assert_eq!(*m, 0o600, "umask {umask}: {name} is {m:o}: {found:?}");
        }
        assert_eq!(mode(&dir), 0o700);
        drop(s);
        let _ = std::fs::remove_dir_all(&parent);
    }
}

/// A data directory an older cordon left readable (0755, files 0644) is tightened at start; a
/// directory that is not cordon's own (other files in it) keeps its mode, with a warning, and
/// cordon's files in it are still 0600.
#[test]
fn data_directory_left_open_is_tightened_and_a_foreign_one_is_left_alone() {
    let dir = scratch("old");
    std::fs::create_dir_all(&dir).expect("dir");
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["keys", "create", "--data-dir"])
        .arg(&dir)
        .output()
        .expect("keys");
    assert!(out.status.success(), "{out:?}");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for (name, _) in modes(&dir) {
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["keys", "list", "--data-dir"])
        .arg(&dir)
        .output()
        .expect("keys");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(mode(&dir), 0o700);
    for (name, m) in modes(&dir) {
        assert_eq!(m, 0o600, "{name} is {m:o}");
    }
    let _ = std::fs::remove_dir_all(&dir);

    let shared = scratch("shared");
    std::fs::create_dir_all(&shared).expect("dir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(shared.join("someone-elses.txt"), "x").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["keys", "create", "--data-dir"])
        .arg(&shared)
        .output()
        .expect("keys");
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cordon: warning: data directory") && stderr.contains("755"),
        "{stderr}"
    );
    assert_eq!(
        mode(&shared),
        0o755,
        "a directory that is not cordon's is left as it is"
    );
    for (name, m) in modes(&shared) {
        if name != "someone-elses.txt" {
            assert_eq!(m, 0o600, "{name} is {m:o}");
        }
    }
    let _ = std::fs::remove_dir_all(&shared);
}

/// Direct children of `parent` whose command line contains `needle` (seen from the host).
fn children_with(parent: u32, needle: &str) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").expect("proc").flatten() {
        if e.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // The parent pid is the second field after the command name's closing parenthesis.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if ppid == Some(parent) && String::from_utf8_lossy(&cmd).contains(needle) {
            n += 1;
        }
    }
    n
}

fn new_key(dir: &Path, max_sandboxes: u32, rps: u32) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["keys", "create", "--name", "quota", "--max-sandboxes"])
        .arg(max_sandboxes.to_string())
        .arg("--rps")
        .arg(rps.to_string())
        .arg("--data-dir")
        .arg(dir)
        .output()
        .expect("keys create");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .expect("key")
        .trim()
        .to_string()
}

/// 50 creates at once on a key allowed 5 sandboxes: exactly 5 are created, the other 45 answer
/// 429 `quota_exceeded` with `Retry-After`, and afterwards the server runs exactly 5 (its list,
/// its metrics and the helper processes on the host agree). A deleted sandbox frees its slot.
#[test]
fn concurrent_creates_never_overshoot_the_quota() {
    let dir = scratch("quota");
    let mut s = Server::start_with(dir.clone(), &[], None);
    s.scratch = true;
    s.key = new_key(&dir, 5, 10_000);
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(50));
    let results: Vec<(u16, Value, bool)> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..50)
            .map(|_| {
                let b = barrier.clone();
                let s = &s;
                sc.spawn(move || {
                    b.wait();
                    match s.req("POST", "/v1/sandboxes").send_json(json!({})) {
                        Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null), false),
                        Err(ureq::Error::Status(st, r)) => {
                            let retry = r.header("Retry-After").is_some();
                            (st, r.into_json().unwrap_or(Value::Null), retry)
                        }
                        Err(e) => panic!("create: {e}"),
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let created: Vec<&Value> = results
        .iter()
        .filter(|r| r.0 == 201)
        .map(|r| &r.1)
        .collect();
    let refused = results
        .iter()
        .filter(|r| r.0 == 429 && r.1["error"]["code"] == "quota_exceeded" && r.2)
        .count();
    let summary: Vec<(u16, &Value)> = results
        .iter()
        .map(|r| (r.0, r.1.get("error").unwrap_or(&r.1["id"])))
        .collect();
    assert_eq!(created.len(), 5, "{summary:?}");
    assert_eq!(refused, 45, "{summary:?}");

    let (_, list) = s.call("GET", "/v1/sandboxes", None);
    assert_eq!(
        list["sandboxes"].as_array().map(Vec::len),
        Some(5),
        "{list}"
    );
    let metrics = ureq::get(&format!("{}/metrics", s.url))
        .call()
        .expect("metrics")
        .into_string()
        .expect("metrics text");
    assert!(
        metrics.contains("cordon_sandboxes{state=\"running\"} 5"),
        "{metrics}"
    );
    assert_eq!(children_with(s.child.id(), "__sandbox"), 5);

    // A deleted sandbox gives its slot back; the quota still holds after.
    let first = created[0]["id"].as_str().expect("id");
    assert_eq!(
        s.call("DELETE", &format!("/v1/sandboxes/{first}"), None).0,
        204
    );
    let (st, v) = s.call("POST", "/v1/sandboxes", Some(json!({})));
    assert_eq!(st, 201, "{v}");
    let (st, v) = s.call("POST", "/v1/sandboxes", Some(json!({})));
    assert_eq!(
        (st, &v["error"]["code"]),
        (429, &json!("quota_exceeded")),
        "{v}"
    );
}

/// One raw HTTP/1.1 exchange, so a test controls every byte and header (ureq would set its
/// own `Host` and `Content-Type`). Answers (status, lower-cased headers, body).
fn raw(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    use std::io::{Read, Write};
    let authority = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(authority).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .expect("timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {authority}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    s.write_all(req.as_bytes()).expect("write");
    s.write_all(body).expect("write body");
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("read");
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let mut rest = out[split + 4..].to_vec();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let hdrs: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    if hdrs
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        let mut body = Vec::new();
        let mut at = 0;
        while let Some(eol) = rest[at..].windows(2).position(|w| w == b"\r\n") {
            let size =
                usize::from_str_radix(String::from_utf8_lossy(&rest[at..at + eol]).trim(), 16)
                    .unwrap_or(0);
            if size == 0 {
                break;
            }
            let start = at + eol + 2;
            body.extend_from_slice(&rest[start..start + size]);
            at = start + size + 2;
        }
        rest = body;
    }
    (status, hdrs, rest)
}

fn header<'a>(hdrs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    hdrs.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Asserts the contract's error: `status`, a JSON content type, `{"error": {code, message}}`
/// with a non-empty message, and the `code` given (when given).
fn assert_json_error(
    what: &str,
    got: &(u16, Vec<(String, String)>, Vec<u8>),
    status: u16,
    code: Option<&str>,
) -> Value {
    let (st, hdrs, body) = got;
    let text = String::from_utf8_lossy(body);
    assert_eq!(*st, status, "{what}: {text}");
    assert!(
        header(hdrs, "content-type").is_some_and(|c| c.starts_with("application/json")),
        "{what}: content type {:?}, body {text:?}",
        header(hdrs, "content-type")
    );
    let v: Value = serde_json::from_slice(body).unwrap_or_else(|e| panic!("{what}: {e}: {text:?}"));
    let message = v["error"]["message"].as_str().unwrap_or("");
    assert!(!message.is_empty(), "{what}: no message: {v}");
    assert!(v["error"]["code"].is_string(), "{what}: no code: {v}");
    if let Some(c) = code {
        assert_eq!(v["error"]["code"], c, "{what}: {v}");
    }
    v
}

/// Bad input stays a clear error: malformed bodies, wrong types, unknown fields, content types,
/// unknown routes, wrong methods, bad query strings and path segments, missing or wrong keys —
/// each answered with the contract's JSON error and a fitting status, never a 500 or an empty
/// body. JSON is read whatever the Content-Type says, so `curl -d` works.
#[test]
fn malformed_requests_get_json_errors() {
    let s = Server::start_with(scratch("malformed"), &["--max-upload", "64K"], None);
    let auth = format!("Bearer {}", s.key);
    let a: (&str, &str) = ("Authorization", auth.as_str());
    let json_ct = ("Content-Type", "application/json");
    let id = {
        let (st, v) = s.call("POST", "/v1/sandboxes", Some(json!({})));
        assert_eq!(st, 201, "{v}");
        v["id"].as_str().expect("id").to_string()
    };
    let exec = format!("/v1/sandboxes/{id}/exec");
    let big = vec![b' '; 100 << 10];
    // (what, method, path, headers, body, status, code, a word the message must contain)
    type Case<'a> = (
        &'a str,
        &'a str,
        String,
        Vec<(&'a str, &'a str)>,
        Vec<u8>,
        u16,
        &'a str,
        &'a str,
    );
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        ("truncated JSON", "POST", "/v1/sandboxes".into(), vec![a, json_ct], b"{\"memory\":".to_vec(), 400, "invalid_request", "body"),
        ("a JSON array", "POST", "/v1/sandboxes".into(), vec![a, json_ct], b"[]".to_vec(), 400, "invalid_request", "JSON object"),
        ("a JSON string", "POST", "/v1/sandboxes".into(), vec![a, json_ct], b"\"x\"".to_vec(), 400, "invalid_request", "JSON object"),
        ("invalid UTF-8", "POST", "/v1/sandboxes".into(), vec![a, json_ct], b"{\"profile\": \"\xff\xfe\"}".to_vec(), 400, "invalid_request", "body"),
        ("an unknown field", "POST", "/v1/sandboxes".into(), vec![a, json_ct], b"{\"memroy\": \"1G\"}".to_vec(), 400, "invalid_request", "memroy"),
        ("a wrong type", "POST", "/v1/sandboxes".into(), vec![a, json_ct], b"{\"cpus\": \"two\"}".to_vec(), 400, "invalid_request", "body"),
        ("a bad size", "POST", "/v1/sandboxes".into(), vec![a, json_ct], b"{\"memory\": \"lots\"}".to_vec(), 400, "invalid_request", "memory"),
        ("a size with spaces", "POST", "/v1/sandboxes".into(), vec![a, json_ct], b"{\"memory\": \" 1G\"}".to_vec(), 400, "invalid_request", "memory"),
        ("a zero duration", "POST", "/v1/sandboxes".into(), vec![a, json_ct], b"{\"ttl\": \"0s\"}".to_vec(), 400, "invalid_request", "ttl"),
        ("an unknown profile", "POST", "/v1/sandboxes".into(), vec![a, json_ct], b"{\"profile\": \"nosuch\"}".to_vec(), 400, "invalid_request", "only the built-in names (default, strict)"),
        ("a profile path", "POST", "/v1/sandboxes".into(), vec![a, json_ct], b"{\"profile\": \"/etc/passwd\"}".to_vec(), 400, "invalid_request", "profile files are for the command line"),
        ("a bad env name", "POST", "/v1/sandboxes".into(), vec![a, json_ct], b"{\"env\": {\"A=B\": \"x\"}}".to_vec(), 400, "invalid_request", "env"),
        ("form-encoded garbage", "POST", "/v1/sandboxes".into(), vec![a, ("Content-Type", "application/x-www-form-urlencoded")], b"memory=1G".to_vec(), 400, "invalid_request", "x-www-form-urlencoded"),
        ("multipart garbage", "POST", "/v1/sandboxes".into(), vec![a, ("Content-Type", "multipart/form-data; boundary=x")], b"--x\r\n\r\n--x--".to_vec(), 400, "invalid_request", "multipart/form-data"),
        ("an empty command", "POST", exec.clone(), vec![a], b"{\"cmd\": \"\"}".to_vec(), 400, "invalid_request", "cmd"),
        ("an empty argv", "POST", exec.clone(), vec![a], b"{\"cmd\": []}".to_vec(), 400, "invalid_request", "cmd"),
        ("a NUL in argv", "POST", exec.clone(), vec![a], b"{\"cmd\": [\"echo\", \"a\\u0000b\"]}".to_vec(), 400, "invalid_request", "NUL"),
        ("a relative cwd", "POST", exec.clone(), vec![a], b"{\"cmd\": \"true\", \"cwd\": \"tmp\"}".to_vec(), 400, "invalid_request", "cwd"),
        ("a timeout over the maximum", "POST", exec.clone(), vec![a], b"{\"cmd\": \"true\", \"timeout\": \"2h\"}".to_vec(), 400, "invalid_request", "timeout"),
        ("no body where one is needed", "POST", exec.clone(), vec![a], Vec::new(), 400, "invalid_request", "cmd"),
        ("a body over the limit", "POST", exec.clone(), vec![a, json_ct], big.clone(), 413, "too_large", "`cordon serve --max-upload`"),
        ("an upload over the limit", "PUT", format!("/v1/sandboxes/{id}/files?path=/workspace/big"), vec![a], big.clone(), 413, "too_large", "at most 64 KiB (set by the server's operator with `cordon serve --max-upload`)"),
        ("an unknown signal", "POST", format!("/v1/sandboxes/{id}/commands/c/signal"), vec![a], b"{\"signal\": \"NOPE\"}".to_vec(), 400, "invalid_request", "signal"),
        ("a signal out of range", "POST", format!("/v1/sandboxes/{id}/commands/c/signal"), vec![a], b"{\"signal\": 99}".to_vec(), 400, "invalid_request", "signal"),
        ("a bad query value", "DELETE", format!("/v1/sandboxes/{id}/files?path=x&recursive=maybe"), vec![a], Vec::new(), 400, "invalid_request", "recursive"),
        ("a missing query value", "GET", format!("/v1/sandboxes/{id}/files"), vec![a], Vec::new(), 400, "invalid_request", "path"),
        ("a bad wait", "POST", format!("/v1/sandboxes/{id}/commands/c/wait?timeout=soon"), vec![a], Vec::new(), 400, "invalid_request", "timeout"),
        ("a path segment that is not UTF-8", "GET", "/v1/sandboxes/%FF%FE".into(), vec![a], Vec::new(), 400, "invalid_request", "UTF-8"),
        ("an unknown sandbox", "GET", "/v1/sandboxes/nope".into(), vec![a], Vec::new(), 404, "not_found", "nope"),
        ("an unknown route", "GET", "/nope".into(), vec![a], Vec::new(), 404, "no_route", "/nope"),
        ("an unknown API route", "POST", "/v1/sandboxes/x/y/z".into(), vec![a], b"{}".to_vec(), 404, "no_route", "/v1/sandboxes/x/y/z"),
        ("an unknown route without a key", "GET", "/v2/anything".into(), vec![], Vec::new(), 404, "no_route", "/v2/anything"),
        ("a wrong method", "DELETE", "/v1/sandboxes".into(), vec![a], Vec::new(), 405, "method_not_allowed", "DELETE"),
        ("a wrong method on a sandbox", "PATCH", format!("/v1/sandboxes/{id}"), vec![a], b"{}".to_vec(), 405, "method_not_allowed", "PATCH"),
        ("a wrong method on exec", "GET", exec.clone(), vec![a], Vec::new(), 405, "method_not_allowed", "POST"),
        ("a wrong method on a public route", "PUT", "/healthz".into(), vec![], Vec::new(), 405, "method_not_allowed", "GET"),
        ("a wrong method on MCP", "PUT", "/mcp".into(), vec![a], Vec::new(), 405, "method_not_allowed", "PUT"),
        ("no key", "GET", "/v1/sandboxes".into(), vec![], Vec::new(), 401, "unauthorized", "Bearer"),
        ("a wrong key", "GET", "/v1/sandboxes".into(), vec![("Authorization", "Bearer cdn_wrong")], Vec::new(), 401, "unauthorized", "invalid"),
        ("another scheme", "GET", "/v1/sandboxes".into(), vec![("Authorization", "Basic eDp5")], Vec::new(), 401, "unauthorized", "Bearer"),
        ("MCP without the Accept it needs", "POST", "/mcp".into(), vec![a, json_ct], b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"}".to_vec(), 406, "not_acceptable", "Accept"),
    ];
    for (what, method, path, headers, body, status, code, fragment) in &cases {
        let got = raw(&s.url, method, path, headers, body);
        let v = assert_json_error(what, &got, *status, Some(code));
        let message = v["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains(fragment),
            "{what}: {message:?} does not name {fragment:?}"
        );
        if *status == 405 {
            assert!(header(&got.1, "allow").is_some(), "{what}: no Allow header");
        }
    }

    // JSON is JSON whatever the label: what `curl -d` sends, text/plain, none at all, and an
    // empty body where every field is optional.
    for (what, headers, body) in [
        (
            "curl -d",
            vec![a, ("Content-Type", "application/x-www-form-urlencoded")],
            &b"{\"metadata\": {\"via\": \"curl\"}}"[..],
        ),
        (
            "text/plain",
            vec![a, ("Content-Type", "text/plain")],
            &b"{}"[..],
        ),
        ("no content type", vec![a], &b"{}"[..]),
        ("an empty body", vec![a], &b""[..]),
    ] {
        let (st, _, body) = raw(&s.url, "POST", "/v1/sandboxes", &headers, body);
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        assert_eq!(st, 201, "{what}: {v}");
        let sid = v["id"].as_str().expect("id");
        assert_eq!(
            s.call("DELETE", &format!("/v1/sandboxes/{sid}"), None).0,
            204
        );
    }
    let (st, _, body) = raw(
        &s.url,
        "POST",
        &exec,
        &[a, ("Content-Type", "application/x-www-form-urlencoded")],
        b"{\"cmd\": \"echo hi\"}",
    );
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    assert_eq!((st, &v["stdout"]), (200, &json!("hi\n")), "{v}");
}

/// Without keys the server answers only local programs: a web page (its own `Origin`) or a
/// DNS-rebinding name (a `Host` that is not loopback) gets 403, since a page may send JSON as
/// `text/plain` without a preflight.
#[test]
fn a_server_without_keys_refuses_web_pages() {
    let s = Server::start_with(scratch("noauth"), &["--no-auth"], None);
    let authority = s.url.trim_start_matches("http://").to_string();
    let body = b"{\"cmd\": \"echo ran\"}";
    for (what, headers) in [
        (
            "a foreign origin",
            vec![
                ("Origin", "http://evil.example"),
                ("Content-Type", "text/plain"),
            ],
        ),
        (
            "a rebinding host",
            vec![
                ("Host", "evil.example:8080"),
                ("Content-Type", "text/plain"),
            ],
        ),
    ] {
        let got = raw(&s.url, "POST", "/v1/run", &headers, body);
        assert_json_error(what, &got, 403, Some("forbidden"));
    }
    let local_origin = format!("http://{authority}");
    for (what, headers) in [
        ("a local program", vec![]),
        ("localhost", vec![("Host", "localhost")]),
        (
            "a page of the server itself",
            vec![("Origin", local_origin.as_str())],
        ),
    ] {
        let (st, _, out) = raw(&s.url, "POST", "/v1/run", &headers, body);
        let v: Value = serde_json::from_slice(&out).unwrap_or(Value::Null);
        assert_eq!((st, &v["stdout"]), (200, &json!("ran\n")), "{what}: {v}");
    }
}

/// `/openapi.json` documents every route the server serves, and only those: each documented
/// operation is routed (never the 404 of an unmatched route, never 405), every other method on
/// a documented path is 405 with `Allow` naming exactly the documented ones (so the router
/// serves no method the document lacks), and the routes the issue found missing are there. The
/// document has the bearer scheme, every authenticated operation its error answers, and
/// schemas as strict as the server.
#[test]
fn every_route_the_router_serves_is_documented() {
    let s = Server::start();
    let doc: Value = ureq::get(&format!("{}/openapi.json", s.url))
        .call()
        .expect("openapi")
        .into_json()
        .expect("json");
    let paths = doc["paths"].as_object().expect("paths");
    for (path, methods) in [
        ("/v1/sandboxes/{id}/network", &["get", "put"][..]),
        ("/mcp", &["get", "post", "delete"]),
        ("/metrics", &["get"]),
        ("/healthz", &["get"]),
        ("/openapi.json", &["get"]),
        ("/v1/sandboxes", &["get", "post"]),
        ("/v1/sandboxes/{id}/exec", &["post"]),
        ("/v1/sandboxes/{id}/learned-profile", &["get"]),
        ("/v1/sandboxes/{id}/code", &["post"]),
        ("/v1/sandboxes/{id}/files", &["get", "put", "delete"]),
        ("/v1/run", &["post"]),
        // The E2B door, under its own tag.
        ("/v2/sandboxes", &["get", "post"]),
        ("/sandboxes/{id}", &["get", "delete"]),
        ("/process.Process/{method}", &["post"]),
        ("/files", &["get", "post"]),
        ("/execute", &["post"]),
        ("/contexts/{id}/restart", &["post"]),
    ] {
        for m in methods {
            assert!(
                paths.get(path).and_then(|p| p.get(*m)).is_some(),
                "{m} {path} is not documented"
            );
        }
    }
    let auth = format!("Bearer {}", s.key);
    let mut probed = 0;
    for (path, item) in paths {
        let concrete = path.replace("{language}", "python").replace(['{', '}'], "");
        let documented: Vec<String> = item
            .as_object()
            .expect("path item")
            .keys()
            .map(|m| m.to_ascii_uppercase())
            .collect();
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            // A sandbox created by POST /v1/sandboxes is deleted right away; others run nothing.
            // The probes outrun the key's rate limit (100/s) as the API grows: wait it out.
            let (st, hdrs, body) = loop {
                let r = raw(&s.url, method, &concrete, &[("Authorization", &auth)], b"");
                if r.0 != 429 {
                    break r;
                }
                std::thread::sleep(std::time::Duration::from_millis(1100));
            };
            probed += 1;
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            if documented.contains(&method.to_string()) {
                assert!(
                    st != 405 && v["error"]["code"] != "no_route",
                    "{method} {path} is documented but not served: {st} {v}"
                );
                if method == "POST" && path == "/v1/sandboxes" {
                    let id = v["id"].as_str().expect("created");
                    assert_eq!(
                        s.call("DELETE", &format!("/v1/sandboxes/{id}"), None).0,
                        204
                    );
                }
            } else {
                assert_eq!(st, 405, "{method} {path} is served but not documented: {v}");
                let mut allow: Vec<String> = header(&hdrs, "allow")
                    .unwrap_or("")
                    .split(',')
                    .map(|m| m.trim().to_string())
                    .filter(|m| !m.is_empty() && m != "HEAD")
                    .collect();
                allow.sort();
                let mut want = documented.clone();
                want.sort();
                assert_eq!(allow, want, "{path}: Allow differs from the document");
            }
        }
    }
    assert!(probed > 100, "{probed}");

    // Security: a bearer scheme, required everywhere but on the public routes.
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    assert_eq!(doc["security"][0]["bearer"], json!([]));
    for (path, item) in paths {
        for (method, op) in item.as_object().expect("item") {
            let mut params: Vec<String> = op["parameters"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .map(|p| format!("{} in {}", p["name"], p["in"]))
                        .collect()
                })
                .unwrap_or_default();
            let n = params.len();
            params.sort();
            params.dedup();
            assert_eq!(params.len(), n, "{method} {path} lists a parameter twice");
            for name in path.split('{').skip(1).filter_map(|s| s.split('}').next()) {
                assert!(
                    params.contains(&format!("\"{name}\" in \"path\"")),
                    "{method} {path} does not document {{{name}}}"
                );
            }
            let public = ["/healthz", "/metrics", "/openapi.json"].contains(&path.as_str());
            let responses = op["responses"].as_object().expect("responses");
            if public {
                assert_eq!(op["security"], json!([]), "{method} {path}");
                continue;
            }
            for status in ["400", "401", "429", "500"] {
                let r = &responses
                    .get(status)
                    .unwrap_or_else(|| panic!("{method} {path} does not document {status}"));
                // The E2B door answers E2B's error shape.
                let e2b = op["tags"] == json!(["e2b"]);
                if path != "/mcp" || status != "400" {
                    assert_eq!(
                        r["content"]["application/json"]["schema"]["$ref"],
                        if e2b {
                            "#/components/schemas/E2bError"
                        } else {
                            "#/components/schemas/ErrorBody"
                        },
                        "{method} {path} {status}"
                    );
                }
            }
            assert!(responses["429"]["headers"].get("Retry-After").is_some());
            if path.contains("{id}") {
                assert!(responses.contains_key("404"), "{method} {path} has no 404");
            }
            if op.get("requestBody").is_some() {
                assert!(responses.contains_key("413"), "{method} {path} has no 413");
            }
        }
    }
    assert!(paths["/v1/sandboxes/{id}/files"]["put"]["responses"]
        .get("507")
        .is_some());

    // Strict schemas: unknown fields refused where the server refuses them, enums, patterns,
    // bounds, and null where the server answers null.
    let schemas = &doc["components"]["schemas"];
    for name in [
        "CreateSandbox",
        "ExecRequest",
        "RunRequest",
        "ExtendTtl",
        "StdinRequest",
        "SignalRequest",
        "MkdirRequest",
        "MoveRequest",
        "CodeRequest",
        "NewContext",
        "NetworkPolicy",
    ] {
        assert_eq!(schemas[name]["additionalProperties"], false, "{name}");
    }
    assert_eq!(schemas["ProfileName"]["enum"], json!(["default", "strict"]));
    assert_eq!(schemas["Status"]["enum"][0], "exited");
    assert!(schemas["SizeSchema"]["oneOf"][1]["pattern"].is_string());
    assert!(schemas["DurationSchema"]["oneOf"][1]["pattern"].is_string());
    assert_eq!(schemas["CreateSandbox"]["properties"]["pids"]["minimum"], 1);
    assert_eq!(schemas["ErrorBody"]["required"], json!(["error"]));
    let enforcement =
        serde_json::to_string(&schemas["SandboxInfo"]["properties"]["enforcement"]).expect("text");
    assert!(
        enforcement.contains("null"),
        "enforcement is not nullable: {enforcement}"
    );

    // …and a deleted sandbox does answer null there.
    let (_, v) = s.call("POST", "/v1/sandboxes", Some(json!({})));
    let id = v["id"].as_str().expect("id");
    s.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
    let (st, v) = s.call("GET", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!(
        (st, &v["state"], &v["enforcement"]),
        (200, &json!("deleted"), &Value::Null)
    );
}

/// A free loopback port (the listener is dropped, so another process could take it first; the
/// scripts below would then fail loudly, not pass).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Runs `script` with bash as a user would: `cordon` on PATH (this build), its data directory
/// a scratch one, the documented port swapped for a free one. Whatever it leaves running in
/// the background (the server) is stopped at the end — a server the script's own `kill`
/// already ended leaves `jobs -p` empty, and that bare `kill` is not the script failing.
/// Answers (success, stdout, stderr).
fn run_as_documented(script: &str) -> (bool, String, String) {
    assert!(
        Command::new("jq").arg("--version").output().is_ok(),
        "jq is not installed (scripts/test.sh installs it)"
    );
    let dir = scratch("walkthrough");
    std::fs::create_dir_all(&dir).expect("dir");
    let port = free_port();
    let script = script.replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"));
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_cordon"))
        .parent()
        .expect("bin dir")
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let wrapped = format!(
        "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT\ncd {}\n{script}",
        dir.display()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&wrapped)
        .env("PATH", path)
        .env("CORDON_DATA_DIR", dir.join("data"))
        .output()
        .expect("bash");
    let _ = std::fs::remove_dir_all(&dir);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The README's curl walk-through, run from the README text itself: it succeeds, and what it
/// prints contains every `#>` line of the block, in order.
#[test]
fn readme_walkthrough_runs_as_written() {
    let readme = include_str!("../../../README.md");
    let start = readme
        .find("<!-- walkthrough:")
        .expect("the README marks its walk-through");
    let block = &readme[start..];
    let body_start = block.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let body = &block[body_start..];
    let script = &body[..body.find("\n```").expect("end of the block")];
    assert!(
        script.contains("/exec") && script.contains("/files") && script.contains("/code"),
        "the walk-through lost a step:\n{script}"
    );
    let expected: Vec<&str> = script
        .lines()
        .filter_map(|l| l.strip_prefix("#> "))
        .collect();
    assert!(expected.len() >= 8, "{expected:?}");
    let (ok, stdout, stderr) = run_as_documented(script);
    assert!(
        ok,
        "the walk-through failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let mut lines = stdout.lines();
    for want in &expected {
        assert!(
            lines.any(|l| l == *want),
            "the walk-through did not print {want:?} (in order)\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
    }
}

/// `cordon serve --help`'s example, as printed, creates a sandbox.
#[test]
fn serve_help_example_works_as_written() {
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["serve", "--help"])
        .output()
        .expect("help");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let example: Vec<&str> = help
        .split("Example:\n")
        .nth(1)
        .expect("an example in the help")
        .lines()
        .take_while(|l| l.starts_with("  "))
        .map(str::trim)
        .collect();
    assert!(example.iter().any(|l| l.starts_with("curl ")), "{help}");
    let (ok, stdout, stderr) = run_as_documented(&example.join("\n"));
    assert!(
        ok,
        "the help's example failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let created: Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON answer\nstdout:\n{stdout}\nstderr:\n{stderr}"));
    assert_eq!(created["state"], "running", "{created}");
}
