//! The stateful code interpreter (`POST /v1/sandboxes/{id}/code` and the contexts API) end to
//! end: a real `cordon serve` on loopback, real sandboxes, real kernels (python3, node, bash).
//!
//! The rich-output tests need Debian's `python3-matplotlib` and `python3-pandas` (the sandbox
//! runs /usr/bin/python3, so packages installed with pip elsewhere are not seen):
//!   apt-get install -y python3-matplotlib python3-pandas
#![allow(clippy::result_large_err)] // ureq 2 errors carry the whole response; fine in tests.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// A real server (same start-up contract as tests/server.rs)

mod serve;
use serve::{unique, wait_until, Server};

impl Server {
    /// A fresh sandbox on this server.
    fn sandbox(&self) -> Sb<'_> {
        self.sandbox_with(json!({}))
    }

    fn sandbox_with(&self, body: Value) -> Sb<'_> {
        let (s, v) = self.call("POST", "/v1/sandboxes", Some(body));
        assert_eq!(s, 201, "{v}");
        Sb {
            s: self,
            id: v["id"].as_str().expect("id").to_string(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cells

struct Sb<'a> {
    s: &'a Server,
    id: String,
}

impl Sb<'_> {
    /// POST /code with an arbitrary body: (status, body).
    fn post_code(&self, body: Value) -> (u16, Value) {
        self.s.call(
            "POST",
            &format!("/v1/sandboxes/{}/code", self.id),
            Some(body),
        )
    }

    /// Runs a cell and expects 200.
    fn run(&self, language: &str, context: &str, code: &str, timeout: Option<&str>) -> Value {
        let mut body = json!({"language": language, "context": context, "code": code});
        if let Some(t) = timeout {
            body["timeout"] = json!(t);
        }
        let (s, v) = self.post_code(body);
        assert_eq!(s, 200, "cell {code:?}: {v}");
        assert!(v["stdout"].is_string() && v["stderr"].is_string(), "{v}");
        assert!(v["results"].is_array(), "{v}");
        assert!(v["execution_count"].is_u64(), "{v}");
        assert!(v["state_lost"].is_boolean(), "{v}");
        v
    }

    fn py(&self, code: &str) -> Value {
        self.run("python", "default", code, None)
    }

    fn path(&self, rest: &str) -> String {
        format!("/v1/sandboxes/{}{rest}", self.id)
    }
}

/// The main result (value of the last expression), if any.
fn main_result(v: &Value) -> Option<&Value> {
    let mains: Vec<&Value> = v["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|r| r["is_main_result"] == true)
        .collect();
    assert!(mains.len() <= 1, "more than one main result: {v}");
    mains.first().copied()
}

/// text/plain of the main result; panics (with the whole response) when there is none.
fn text(v: &Value) -> String {
    main_result(v)
        .and_then(|r| r["text/plain"].as_str())
        .unwrap_or_else(|| panic!("no main text/plain result in {v}"))
        .to_string()
}

fn assert_ok(v: &Value) {
    assert!(v["error"].is_null(), "unexpected error: {v}");
}

fn error_name(v: &Value) -> &str {
    v["error"]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("expected an error: {v}"))
}

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .unwrap_or_else(|e| panic!("not base64 ({e}): {}", &s[..s.len().min(80)]))
}

/// (width, height) from a PNG's IHDR chunk.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert!(png.len() > 24, "PNG too short: {} bytes", png.len());
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG signature");
    assert_eq!(&png[12..16], b"IHDR", "first chunk is not IHDR");
    let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(png[20..24].try_into().unwrap());
    (w, h)
}

/// The PNG images among a cell's results, decoded.
fn pngs(v: &Value) -> Vec<Vec<u8>> {
    v["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter_map(|r| r["image/png"].as_str().map(b64))
        .collect()
}

/// Host pids of processes whose argv is exactly `argv`.
fn pids_with_argv(argv: &[&str]) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.len() == argv.len() && args.iter().zip(argv).all(|(a, b)| a == b) {
            out.push(pid);
        }
    }
    out
}

/// A unique argument for a marker process (`sleep <tag>`).
fn tag() -> String {
    format!(
        "{}",
        3_100_000 + (std::process::id() % 10_000) * 100 + (unique() % 100) as u32
    )
}

/// Parent pid, from /proc/<pid>/stat.
fn ppid(pid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .expect("stat")
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap()
}

/// True while `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().unwrap_or("").split_whitespace().next() != Some("Z"))
        .unwrap_or(false)
}

/// Starts `sleep <tag>` from a python context's kernel (as `_p`) and returns (host pid of the
/// kernel's driver process, host pid of the sleep).
fn kernel_child(sb: &Sb, context: &str) -> (u32, u32) {
    let tag = tag();
    let code = format!("import subprocess; _p = subprocess.Popen(['sleep', '{tag}'])");
    assert_ok(&sb.run("python", context, &code, None));
    let mut sleeper = 0;
    wait_until("the marker child to appear", || {
        sleeper = pids_with_argv(&["sleep", &tag])
            .first()
            .copied()
            .unwrap_or(0);
        sleeper != 0
    });
    (ppid(sleeper), sleeper)
}

/// Host pid of a python context's driver (its marker child is stopped again).
fn kernel_host_pid(sb: &Sb, context: &str) -> u32 {
    let (driver, _) = kernel_child(sb, context);
    assert_ok(&sb.run("python", context, "_p.kill(); _p.wait()", None));
    driver
}

// ---------------------------------------------------------------------------------------------
// Python: state

#[test]
fn python_state_imports_and_files_persist() {
    let s = Server::start();
    let sb = s.sandbox();

    let v = sb.py("x = 5");
    assert_ok(&v);
    assert_eq!(v["results"], json!([]), "an assignment has no result: {v}");
    assert_eq!(v["execution_count"], 1);
    assert_eq!(v["state_lost"], false);

    let v = sb.py("x * 2");
    assert_ok(&v);
    assert_eq!(text(&v), "10");
    assert_eq!(v["execution_count"], 2);

    // Imports, functions and classes persist.
    assert_ok(&sb.py(
        "import math\nimport collections as co\ndef sq(n):\n    return n * n\nclass P:\n    def __repr__(self):\n        return 'P!'",
    ));
    assert_eq!(text(&sb.py("math.sqrt(sq(4))")), "4.0");
    assert_eq!(text(&sb.py("co.Counter('aab')['a']")), "2");
    assert_eq!(text(&sb.py("P()")), "P!");

    // An open file handle persists too.
    assert_ok(&sb.py("f = open('/tmp/persist.txt', 'w')"));
    assert_ok(&sb.py("f.write('abc'); f.close()"));
    assert_eq!(text(&sb.py("open('/tmp/persist.txt').read()")), "'abc'");

    // stdout and stderr are captured; the last expression is still the result.
    let v = sb.py("import sys\nprint('out', 1)\nprint('err', file=sys.stderr)\nx + 1");
    assert_ok(&v);
    assert_eq!(v["stdout"], "out 1\n");
    assert_eq!(v["stderr"], "err\n");
    assert_eq!(text(&v), "6");

    // `expr;` suppresses the result, and None is not a result.
    assert_eq!(sb.py("x;")["results"], json!([]));
    assert_eq!(sb.py("None")["results"], json!([]));

    // `_` holds the last value, as in a REPL.
    sb.py("6 * 7");
    assert_eq!(text(&sb.py("_")), "42");

    // Top-level await works.
    assert_eq!(
        text(&sb.py("import asyncio\nawait asyncio.sleep(0.01)\n'awaited'")),
        "'awaited'"
    );

    // Default language is python, default context is "default".
    let (st, v) = sb.post_code(json!({"code": "x"}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(text(&v), "5");
}

// ---------------------------------------------------------------------------------------------
// Python: rich output

const REPR_CLASSES: &str = r##"
class Html:
    def _repr_html_(self): return "<b>bold</b>"
class Md:
    def _repr_markdown_(self): return "# Title"
class Svg:
    def _repr_svg_(self): return '<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"/>'
class Js:
    def _repr_json_(self): return {"a": [1, 2], "b": None}
class Png:
    def _repr_png_(self): return b"\x89PNG\r\n\x1a\n\x00\xffraw"
class Many:
    def _repr_html_(self): return "<i>many</i>"
    def _repr_markdown_(self): return "*many*"
    def __repr__(self): return "Many()"
class Broken:
    def _repr_html_(self): raise RuntimeError("no html today")
    def __repr__(self): return "Broken()"
class Bundle:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": "<u>bundle</u>", "application/vnd.custom+json": {"k": 1}}
"##;

#[test]
fn python_each_mime_kind() {
    let s = Server::start();
    let sb = s.sandbox();
    assert_ok(&sb.py(REPR_CLASSES));

    let one = |code: &str| -> Value {
        let v = sb.py(code);
        assert_ok(&v);
        let r = main_result(&v)
            .unwrap_or_else(|| panic!("no main result: {v}"))
            .clone();
        assert!(
            r["text/plain"].is_string(),
            "text/plain is always there: {r}"
        );
        r
    };

    assert_eq!(one("Html()")["text/html"], "<b>bold</b>");
    assert_eq!(one("Md()")["text/markdown"], "# Title");
    let svg = one("Svg()");
    assert!(
        svg["image/svg+xml"].as_str().unwrap().starts_with("<svg"),
        "{svg}"
    );
    assert_eq!(
        one("Js()")["application/json"],
        json!({"a": [1, 2], "b": null}),
        "JSON comes back as JSON, not a string"
    );
    let png = one("Png()");
    assert_eq!(
        b64(png["image/png"].as_str().expect("image/png")),
        b"\x89PNG\r\n\x1a\n\x00\xffraw",
        "_repr_png_ bytes come back base64, byte for byte"
    );
    let many = one("Many()");
    assert_eq!(many["text/html"], "<i>many</i>");
    assert_eq!(many["text/markdown"], "*many*");
    assert_eq!(many["text/plain"], "Many()");
    let b = one("Bundle()");
    assert_eq!(b["text/html"], "<u>bundle</u>");
    assert_eq!(b["application/vnd.custom+json"], json!({"k": 1}));

    // A failing _repr_html_ costs only that representation (with a note), not the cell.
    let v = sb.py("Broken()");
    assert_ok(&v);
    let r = main_result(&v).expect("main result");
    assert_eq!(r["text/plain"], "Broken()");
    assert!(r.get("text/html").is_none(), "{r}");
    assert!(
        v["stderr"].as_str().unwrap().contains("no html today"),
        "{v}"
    );

    // A class (not an instance) is shown by repr only.
    let r = one("Html");
    assert!(r.get("text/html").is_none(), "{r}");

    // display() of several objects: one non-main result each, in order, plus the main result.
    let v = sb.py("display(Html(), Md(), 'plain', 3)\nprint('between')\ndisplay(Js())\n'last'");
    assert_ok(&v);
    let rs = v["results"].as_array().unwrap();
    assert_eq!(rs.len(), 6, "{v}");
    assert_eq!(rs[0]["text/html"], "<b>bold</b>");
    assert_eq!(rs[1]["text/markdown"], "# Title");
    assert_eq!(rs[2]["text/plain"], "'plain'");
    assert_eq!(rs[3]["text/plain"], "3");
    assert_eq!(rs[4]["application/json"], json!({"a": [1, 2], "b": null}));
    for r in &rs[..5] {
        assert_eq!(r["is_main_result"], false, "{r}");
    }
    assert_eq!(rs[5]["is_main_result"], true);
    assert_eq!(rs[5]["text/plain"], "'last'");
    assert_eq!(v["stdout"], "between\n");
}

#[test]
fn python_matplotlib_chart_is_a_png_of_the_drawn_size() {
    let s = Server::start();
    let sb = s.sandbox();

    let v = sb.py(
        "import matplotlib.pyplot as plt\nplt.figure(figsize=(4,3), dpi=50); plt.plot([1,2,3])",
    );
    assert_ok(&v);
    let imgs = pngs(&v);
    assert_eq!(imgs.len(), 1, "exactly one figure: {v}");
    assert_eq!(png_size(&imgs[0]), (200, 150));
    let fig = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["image/png"].is_string())
        .unwrap();
    assert_eq!(
        fig["is_main_result"], false,
        "a drawn figure is a display: {fig}"
    );
    // The main result is the value of plt.plot(...), a list of lines.
    assert!(text(&v).contains("Line2D"), "{v}");

    // Figures are closed at the end of the cell: nothing open, nothing re-sent.
    let v = sb.py("plt.get_fignums()");
    assert_eq!(text(&v), "[]");
    assert!(pngs(&v).is_empty(), "{v}");

    // Two figures and an explicit show(): two images, each its own size.
    let v = sb.py(
        "plt.figure(figsize=(2,1), dpi=100); plt.plot([1,2])\nplt.show()\nplt.figure(figsize=(3,2), dpi=20); plt.bar([1,2],[3,4]);",
    );
    assert_ok(&v);
    let sizes: Vec<(u32, u32)> = pngs(&v).iter().map(|p| png_size(p)).collect();
    assert_eq!(sizes, vec![(200, 100), (60, 40)], "{v}");

    // A figure as the last expression comes back once (not twice).
    let v = sb.py("fig, ax = plt.subplots(figsize=(1,1), dpi=64)\nax.plot([0,1])\nfig");
    assert_ok(&v);
    let imgs = pngs(&v);
    assert_eq!(imgs.len(), 1, "{v}");
    assert_eq!(png_size(&imgs[0]), (64, 64));
}

#[test]
fn python_pandas_dataframe_is_an_html_table() {
    let s = Server::start();
    let sb = s.sandbox();
    let v = sb.py("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})\ndf");
    assert_ok(&v);
    let r = main_result(&v).expect("main result");
    let html = r["text/html"].as_str().expect("text/html");
    assert!(html.contains("<table"), "{html}");
    assert!(
        html.contains("<td>x</td>") && html.contains("<th>b</th>"),
        "{html}"
    );
    let plain = r["text/plain"].as_str().expect("text/plain");
    assert!(plain.contains('a') && plain.contains('y'), "{plain}");
    // The frame persists.
    assert_eq!(text(&sb.py("int(df['a'].sum())")), "3");
}

// ---------------------------------------------------------------------------------------------
// Python: errors, interrupts, crashes

#[test]
fn python_errors_carry_name_value_and_traceback() {
    let s = Server::start();
    let sb = s.sandbox();

    let v = sb.py("1/0");
    assert_eq!(error_name(&v), "ZeroDivisionError");
    assert_eq!(v["error"]["value"], "division by zero");
    let tb: Vec<String> = serde_json::from_value(v["error"]["traceback"].clone()).unwrap();
    assert_eq!(
        tb.first().map(String::as_str),
        Some("Traceback (most recent call last):")
    );
    assert_eq!(
        tb.last().map(String::as_str),
        Some("ZeroDivisionError: division by zero")
    );
    assert!(tb.iter().any(|l| l.contains("<cell-1>")), "{tb:?}");
    assert!(
        tb.iter().any(|l| l.trim() == "1/0"),
        "source line shown: {tb:?}"
    );
    assert_eq!(v["results"], json!([]));

    // Frames of functions defined in earlier cells, with their source; no driver frames.
    assert_ok(
        &sb.py("def inner(n):\n    raise ValueError(f'bad value {n}')\ndef outer():\n    inner(7)"),
    );
    let v = sb.py("print('before')\ny = 1\nouter()\ny = 2");
    assert_eq!(error_name(&v), "ValueError");
    assert_eq!(v["error"]["value"], "bad value 7");
    assert_eq!(v["stdout"], "before\n", "output before the error is kept");
    let tb = v["error"]["traceback"].as_array().unwrap();
    let tb: Vec<&str> = tb.iter().map(|l| l.as_str().unwrap()).collect();
    let joined = tb.join("\n");
    assert!(joined.contains("in outer"), "{joined}");
    assert!(joined.contains("in inner"), "{joined}");
    assert!(
        joined.contains("raise ValueError(f'bad value {n}')"),
        "{joined}"
    );
    assert!(
        !joined.contains("driver") && !joined.contains("File \"<string>\""),
        "driver frames leak into the traceback:\n{joined}"
    );
    // State up to the error is kept; the rest of the cell did not run.
    assert_eq!(text(&sb.py("y")), "1");

    // A syntax error.
    let v = sb.py("def (:");
    assert_eq!(error_name(&v), "SyntaxError");
    assert!(
        !v["error"]["traceback"].as_array().unwrap().is_empty(),
        "{v}"
    );

    // A NameError, and an exception class defined by the user.
    assert_eq!(error_name(&sb.py("undefined_name")), "NameError");
    let v = sb.py("class MyErr(Exception): pass\nraise MyErr('mine')");
    assert_eq!(error_name(&v), "MyErr");
    assert_eq!(v["error"]["value"], "mine");

    // execution_count advances on errors too, and the kernel is fine afterwards.
    let v = sb.py("'still fine'");
    assert_ok(&v);
    assert_eq!(text(&v), "'still fine'");
    assert_eq!(v["state_lost"], false);
}

#[test]
fn python_interrupt_keeps_state() {
    let s = Server::start();
    let sb = s.sandbox();
    assert_ok(&sb.py("x = 1"));

    let t0 = Instant::now();
    let v = sb.run("python", "default", "while True: pass", Some("1s"));
    let took = t0.elapsed();
    assert_eq!(error_name(&v), "KeyboardInterrupt", "{v}");
    assert_eq!(v["state_lost"], false, "{v}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(3900),
        "interrupted after {took:?}"
    );
    let v = sb.py("x");
    assert_eq!(text(&v), "1");
    assert_eq!(v["state_lost"], false);

    // A blocking call is interrupted too; output before it is kept.
    let v = sb.run(
        "python",
        "default",
        "import time\nx = 2\nprint('sleeping', flush=True)\ntime.sleep(60)",
        Some("500ms"),
    );
    assert_eq!(error_name(&v), "KeyboardInterrupt", "{v}");
    assert_eq!(v["stdout"], "sleeping\n");
    assert_eq!(text(&sb.py("x")), "2");
}

#[test]
fn python_kernel_that_ignores_the_interrupt_is_replaced() {
    let s = Server::start();
    let sb = s.sandbox();
    let t0 = Instant::now();
    let v = sb.run(
        "python",
        "default",
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nz = 1\nwhile True: pass",
        Some("1s"),
    );
    assert_eq!(error_name(&v), "TimeoutError", "{v}");
    assert_eq!(v["state_lost"], true, "{v}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let v = sb.py("z");
    assert_eq!(error_name(&v), "NameError", "state is gone: {v}");
    assert_eq!(text(&sb.py("1 + 1")), "2");
}

#[test]
fn python_crash_restarts_the_kernel() {
    let s = Server::start();
    let sb = s.sandbox();
    assert_ok(&sb.py("x = 1"));

    let v = sb.py("import os; os._exit(3)");
    assert_eq!(error_name(&v), "KernelDied", "{v}");
    assert_eq!(v["state_lost"], true, "{v}");
    assert!(
        v["error"]["value"].as_str().unwrap().contains("status 3"),
        "{v}"
    );

    // The next cell gets a fresh kernel: told so, and `x` is gone.
    let v = sb.py("x");
    assert_eq!(
        v["state_lost"], true,
        "the caller is told the state was lost: {v}"
    );
    assert_eq!(error_name(&v), "NameError", "{v}");
    assert_eq!(v["execution_count"], 1, "a fresh kernel counts from 1: {v}");
    let v = sb.py("x = 3\nx");
    assert_eq!(text(&v), "3");
    assert_eq!(
        v["state_lost"], false,
        "only the first cell after a crash: {v}"
    );

    // A segfault.
    let v = sb.py("import ctypes; ctypes.string_at(0)");
    assert_eq!(error_name(&v), "KernelDied", "{v}");
    assert!(
        v["error"]["value"].as_str().unwrap().contains("signal 11"),
        "{v}"
    );
    assert_eq!(error_name(&sb.py("x")), "NameError");

    // SIGKILL (what the OOM killer sends).
    let v = sb.py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)");
    assert_eq!(error_name(&v), "KernelDied", "{v}");
    assert!(
        v["error"]["value"].as_str().unwrap().contains("signal 9"),
        "{v}"
    );
    assert_eq!(text(&sb.py("'alive'")), "'alive'");
}

// ---------------------------------------------------------------------------------------------
// The driver's protocol cannot be spoofed from a cell

#[test]
fn protocol_spoofing_output_is_harmless() {
    let s = Server::start();
    let sb = s.sandbox();

    // Protocol-looking lines for every id a fresh context might use, on stdout (print and a
    // raw write to fd 1), on stderr and from a subprocess.
    let spoof = r#"
import json, os, sys, subprocess
lines = []
for i in range(0, 12):
    for t in ({"type": "done", "status": "ok", "execution_count": 99},
              {"type": "result", "is_main_result": True, "data": {"text/plain": "SPOOF"}},
              {"type": "error", "name": "Spoof", "value": "x", "traceback": []},
              {"type": "stream", "name": "stdout", "text": "SPOOFSTREAM"}):
        lines.append(json.dumps(dict(id=i, **t)))
for l in lines:
    print(l)
    print(l, file=sys.stderr)
    os.write(1, (l + "\n").encode())
print('{"id": 1, "type": "done", "status": "ok", "execution_count": 99}')
print('{"type": "ready", "language": "python"}')
sys.stdout.flush()
subprocess.run(["echo", '{"id": 2, "type": "done", "execution_count": 99}'])
y = 7
y
"#;
    let v = sb.py(spoof);
    assert_ok(&v);
    assert_eq!(text(&v), "7");
    assert_eq!(
        v["results"].as_array().unwrap().len(),
        1,
        "only the real result"
    );
    assert_eq!(v["execution_count"], 1);
    let out = v["stdout"].as_str().unwrap();
    assert_eq!(
        out.matches("\"execution_count\": 99").count(),
        12 * 2 + 2,
        "every spoofed line is plain output"
    );
    assert!(out.contains(r#"{"id": 1, "type": "done", "status": "ok", "execution_count": 99}"#));
    assert!(v["stderr"].as_str().unwrap().contains("SPOOF"));

    let v = sb.py("y + 1");
    assert_eq!(text(&v), "8");
    assert_eq!(v["execution_count"], 2);

    // Closing sys.stdout, then fds 1 and 2, in a cell: the next cell still prints.
    assert_ok(&sb.py("import sys; sys.stdout.close()"));
    let v = sb.py("print('after close'); y");
    assert_eq!(v["stdout"], "after close\n", "{v}");
    assert_eq!(text(&v), "7");
    assert_ok(&sb.py("import os; os.close(1); os.close(2)"));
    let v = sb.py("import sys\nprint('after os.close')\nprint('e', file=sys.stderr)\ny");
    assert_eq!(v["stdout"], "after os.close\n", "{v}");
    assert_eq!(v["stderr"], "e\n", "{v}");
    assert_eq!(text(&v), "7");
    assert_ok(&sb.py("import sys; sys.stdout = None; sys.stderr = None"));
    let v = sb.py("print('restored'); y");
    assert_eq!(v["stdout"], "restored\n", "{v}");
    assert_eq!(v["state_lost"], false);

    // A long line without a newline is plain output too.
    let v = sb.py("import sys; sys.stdout.write('{' * 300000); 1");
    assert_eq!(v["stdout"].as_str().unwrap().len(), 300000);
    assert_eq!(text(&v), "1");

    // The same for javascript and bash.
    let v = sb.run(
        "javascript",
        "default",
        "let q = 3; for (let i = 0; i < 8; i++) console.log(JSON.stringify({id: i, type: 'done', status: 'ok', execution_count: 99})); process.stdout.write('{\"id\": 1, \"type\": \"done\"}\\n'); q",
        None,
    );
    assert_eq!(text(&v), "3", "{v}");
    assert_eq!(v["stdout"].as_str().unwrap().lines().count(), 9);
    assert_ok(&sb.run("javascript", "default", "process.stderr.destroy(); 1", None));
    let v = sb.run(
        "javascript",
        "default",
        "console.log('after'); console.error('e'); q",
        None,
    );
    assert_eq!(v["stdout"], "after\n", "{v}");
    assert_eq!(v["stderr"], "e\n", "{v}");
    assert_eq!(text(&v), "3");

    let v = sb.run(
        "bash",
        "default",
        "Z=1; for i in 1 2 3; do echo \"{\\\"id\\\": $i, \\\"type\\\": \\\"done\\\", \\\"execution_count\\\": 99}\"; done",
        None,
    );
    assert_ok(&v);
    assert_eq!(v["stdout"].as_str().unwrap().lines().count(), 3, "{v}");
    assert_ok(&sb.run("bash", "default", "exec 1>&-; exec 2>&-", None));
    let v = sb.run("bash", "default", "echo after $Z; echo e >&2", None);
    assert_eq!(v["stdout"], "after 1\n", "{v}");
    assert_eq!(v["stderr"], "e\n", "{v}");
}

/// Code in a kernel can always lie about its own results (it runs in the driver's process),
/// e.g. by writing forged messages to the driver's private protocol descriptor. That must stay
/// contained: the server keeps working, other contexts are unaffected, and a restart recovers.
#[test]
fn forged_protocol_messages_only_fool_their_own_context() {
    let s = Server::start();
    let sb = s.sandbox();
    assert_ok(&sb.run("python", "other", "w = 'other'", None));
    assert_ok(&sb.run("python", "victim", "w = 5", None));
    let forge = r#"
import os, json
for fd in sorted(int(f) for f in os.listdir("/proc/self/fd")):
    if fd < 3:
        continue
    for i in range(0, 10):
        msg = json.dumps({"id": i, "type": "result", "is_main_result": True,
                          "data": {"text/plain": "FORGED"}}) + "\n"
        msg += json.dumps({"id": i, "type": "done", "status": "ok", "execution_count": 99})
        msg += "\n" + "{" * (1 << 16) + "\n"  # and some garbage
        try:
            os.write(fd, msg.encode())
        except OSError:
            pass
w
"#;
    sb.run("python", "victim", forge, None);
    // Whatever the victim context now says, the server and the other context are fine.
    let v = sb.run("python", "other", "w", None);
    assert_eq!(text(&v), "'other'");
    let (st, _) = s.call("GET", &sb.path(""), None);
    assert_eq!(st, 200);
    // A restart gives the victim an honest kernel again.
    let (st, v) = s.call("POST", &sb.path("/contexts/python/victim/restart"), None);
    assert_eq!(st, 204, "{v}");
    let v = sb.run("python", "victim", "'honest'", None);
    assert_eq!(text(&v), "'honest'");
    assert_eq!(v["execution_count"], 1);
}

// ---------------------------------------------------------------------------------------------
// Contexts

#[test]
fn contexts_do_not_share_state_and_run_in_parallel() {
    let s = Server::start();
    let sb = s.sandbox();
    assert_ok(&sb.run("python", "a", "x = 'a'", None));
    let v = sb.run("python", "b", "x", None);
    assert_eq!(error_name(&v), "NameError", "context b sees a's x: {v}");
    assert_ok(&sb.run("python", "b", "x = 'b'", None));
    assert_eq!(text(&sb.run("python", "a", "x", None)), "'a'");
    assert_eq!(text(&sb.run("python", "b", "x", None)), "'b'");
    assert_eq!(error_name(&sb.py("x")), "NameError", "default is its own");
    // Each context counts its own cells.
    assert_eq!(sb.run("python", "a", "1", None)["execution_count"], 3);

    // A crash in one context does not touch the other.
    let v = sb.run("python", "b", "import os; os._exit(1)", None);
    assert_eq!(error_name(&v), "KernelDied");
    let v = sb.run("python", "a", "x", None);
    assert_eq!(text(&v), "'a'");
    assert_eq!(v["state_lost"], false);

    // Contexts of the same name in different languages are different contexts.
    assert_ok(&sb.run("javascript", "a", "var x = 'js'", None));
    assert_eq!(text(&sb.run("python", "a", "x", None)), "'a'");

    // Two contexts run concurrently: a cell in `a` waits for a file that a cell in `b` writes.
    // Were contexts serialised, `a` would run into its timeout instead.
    std::thread::scope(|sc| {
        let waiter = sc.spawn(|| {
            sb.run(
                "python",
                "a",
                "import os, time\nwhile not os.path.exists('/tmp/flag-b'): time.sleep(0.01)\nopen('/tmp/flag-a', 'w').close()\n'saw b'",
                Some("20s"),
            )
        });
        let v = sb.run(
            "python",
            "b",
            "import os, time\nopen('/tmp/flag-b', 'w').close()\nwhile not os.path.exists('/tmp/flag-a'): time.sleep(0.01)\n'saw a'",
            Some("20s"),
        );
        assert_eq!(text(&v), "'saw a'");
        let v = waiter.join().expect("waiter");
        assert_eq!(text(&v), "'saw b'");
    });
}

#[test]
fn contexts_list_create_restart_delete() {
    let s = Server::start();
    let sb = s.sandbox();
    let (st, v) = s.call("GET", &sb.path("/contexts"), None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["contexts"], json!([]));

    // Creating starts the kernel at once.
    let (st, v) = s.call(
        "POST",
        &sb.path("/contexts"),
        Some(json!({"language": "python", "name": "c1"})),
    );
    assert_eq!(st, 201, "{v}");
    assert_eq!(
        v,
        json!({"language": "python", "name": "c1", "execution_count": 0, "alive": true})
    );
    // Aliases are normalised.
    let (st, v) = s.call(
        "POST",
        &sb.path("/contexts"),
        Some(json!({"language": "js", "name": "j1"})),
    );
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["language"], "javascript");

    // A cell in c1 and in the default context.
    assert_ok(&sb.run("python", "c1", "x = 1", None));
    assert_ok(&sb.run("python", "c1", "x += 1", None));
    assert_ok(&sb.py("1"));
    let (_, v) = s.call("GET", &sb.path("/contexts"), None);
    assert_eq!(
        v["contexts"],
        json!([
            {"language": "javascript", "name": "j1", "execution_count": 0, "alive": true},
            {"language": "python", "name": "c1", "execution_count": 2, "alive": true},
            {"language": "python", "name": "default", "execution_count": 1, "alive": true},
        ])
    );

    // Restart: the kernel process is gone, state is gone, the count starts over.
    let driver = kernel_host_pid(&sb, "c1");
    let (st, v) = s.call("POST", &sb.path("/contexts/python/c1/restart"), None);
    assert_eq!(st, 204, "{v}");
    wait_until("the old kernel to exit", || !alive(driver));
    let v = sb.run("python", "c1", "x", None);
    assert_eq!(error_name(&v), "NameError", "{v}");
    assert_eq!(v["execution_count"], 1);
    // The other contexts were not touched.
    assert_eq!(sb.py("2")["execution_count"], 2);

    // Delete: its kernel is stopped, it is gone from the list, deleting again is 404.
    let driver = kernel_host_pid(&sb, "c1");
    let (st, v) = s.call("DELETE", &sb.path("/contexts/python/c1"), None);
    assert_eq!(st, 204, "{v}");
    wait_until("the deleted kernel to exit", || !alive(driver));
    let (_, v) = s.call("GET", &sb.path("/contexts"), None);
    let names: Vec<&str> = v["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["j1", "default"], "{v}");
    let (st, v) = s.call("DELETE", &sb.path("/contexts/python/c1"), None);
    assert_eq!(st, 404, "{v}");
    // Using the name again starts a fresh context.
    let v = sb.run("python", "c1", "'new'", None);
    assert_eq!(text(&v), "'new'");
    assert_eq!(v["execution_count"], 1);

    // Bad names and languages.
    for (body, what) in [
        (json!({"language": "python", "name": "bad name"}), "space"),
        (json!({"language": "python", "name": ""}), "empty"),
        (
            json!({"language": "python", "name": "x".repeat(65)}),
            "too long",
        ),
        (json!({"language": "python", "name": "../etc"}), "path"),
        (json!({"language": "cobol", "name": "ok"}), "language"),
        (
            json!({"language": "python", "name": "ok", "extra": 1}),
            "unknown field",
        ),
    ] {
        let (st, v) = s.call("POST", &sb.path("/contexts"), Some(body));
        assert_eq!(st, 400, "{what}: {v}");
    }
    let (st, v) = sb.post_code(json!({"code": "1", "context": "no/slash"}));
    assert_eq!(st, 400, "{v}");
    let (st, v) = s.call("POST", &sb.path("/contexts/cobol/x/restart"), None);
    assert_eq!(st, 400, "{v}");

    // Unknown sandbox.
    let (st, v) = s.call("GET", "/v1/sandboxes/nope/contexts", None);
    assert_eq!(st, 404, "{v}");
}

#[test]
fn at_most_32_contexts_per_sandbox() {
    let s = Server::start();
    // The default profile's 64 processes would run out before 32 kernels (see
    // kernel_start_failure_for_lack_of_processes_is_not_a_500).
    let sb = s.sandbox_with(json!({"pids": 512, "memory": "2G"}));
    // Bash contexts: the cheapest kernels.
    std::thread::scope(|sc| {
        for t in 0..4 {
            let sb = &sb;
            sc.spawn(move || {
                for i in 0..8 {
                    let n = t * 8 + i;
                    let v = sb.run("bash", &format!("c{n}"), &format!("echo {n}"), None);
                    assert_eq!(v["stdout"], format!("{n}\n"));
                }
            });
        }
    });
    let (st, v) = sb.post_code(json!({"language": "bash", "context": "c32", "code": "echo"}));
    assert_eq!(st, 409, "{v}");
    let (st, v) = s.call(
        "POST",
        &sb.path("/contexts"),
        Some(json!({"language": "python", "name": "one-more"})),
    );
    assert_eq!(st, 409, "{v}");
    // An existing context still works, and deleting one makes room.
    assert_eq!(
        sb.run("bash", "c0", "echo again", None)["stdout"],
        "again\n"
    );
    let (st, _) = s.call("DELETE", &sb.path("/contexts/bash/c5"), None);
    assert_eq!(st, 204);
    assert_ok(&sb.run("bash", "c32", "true", None));
}

// ---------------------------------------------------------------------------------------------
// JavaScript and bash

#[test]
fn javascript_state_await_and_console() {
    let s = Server::start();
    let sb = s.sandbox();
    let js = |code: &str| sb.run("javascript", "default", code, None);

    let v = js("let x = 5; const k = 'const'; function g(a) { return a + 1 }; class C { hi() { return 'hi' } }");
    assert_ok(&v);
    let v = js("x * 2");
    assert_eq!(text(&v), "10");
    assert_eq!(v["execution_count"], 2);
    assert_eq!(text(&js("[g(1), k, new C().hi()]")), "[ 2, 'const', 'hi' ]");

    // Top-level await, console.log / console.error.
    let v = js(
        "const r = await new Promise(res => setTimeout(() => res(7), 20));\nconsole.log('hi', r);\nconsole.error('oops');\nr + g(1)",
    );
    assert_ok(&v);
    assert_eq!(v["stdout"], "hi 7\n");
    assert_eq!(v["stderr"], "oops\n");
    assert_eq!(text(&v), "9");
    assert_eq!(text(&js("r")), "7", "awaited bindings persist");
    assert_eq!(text(&js("({a: 1, b: [1, 2]})")), "{ a: 1, b: [ 1, 2 ] }");
    // require works and modules persist.
    assert_ok(&js("const path = require('path')"));
    assert_eq!(text(&js("path.join('a', 'b')")), "'a/b'");
    // The driver's source is not left in the environment.
    assert_eq!(
        text(&js("typeof process.env.CORDON_NODE_DRIVER")),
        "'undefined'"
    );

    // Errors.
    let v = js("function boom() { throw new TypeError('boom') }\nboom()");
    assert_eq!(error_name(&v), "TypeError", "{v}");
    assert_eq!(v["error"]["value"], "boom");
    let tb = v["error"]["traceback"].as_array().unwrap();
    assert!(
        tb.iter().any(|l| l.as_str().unwrap().contains("boom")),
        "{v}"
    );
    let v = js("await Promise.reject(new RangeError('nope'))");
    assert_eq!(error_name(&v), "RangeError", "{v}");
    assert_eq!(error_name(&js("x +")), "SyntaxError");
    assert_eq!(text(&js("x")), "5", "state survives errors");

    // Interrupt keeps state.
    let v = sb.run(
        "javascript",
        "default",
        "x = 6; while (true) {}",
        Some("1s"),
    );
    assert_eq!(error_name(&v), "KeyboardInterrupt", "{v}");
    assert_eq!(v["state_lost"], false);
    assert_eq!(text(&js("x")), "6");

    // process.exit: the kernel restarts, state is lost.
    let v = js("process.exit(4)");
    assert_eq!(error_name(&v), "KernelDied", "{v}");
    assert_eq!(v["state_lost"], true);
    let v = js("typeof x");
    assert_eq!(text(&v), "'undefined'");
    assert_eq!(v["state_lost"], true);
}

#[test]
fn bash_cwd_variables_and_functions_persist() {
    let s = Server::start();
    let sb = s.sandbox();
    let sh = |code: &str| sb.run("bash", "default", code, None);

    assert_ok(&sh(
        "cd /tmp; X=hello; export EX=exported; f() { echo \"f:$1\"; }",
    ));
    let v = sh("pwd; echo $X; f a; sh -c 'echo $EX'");
    assert_ok(&v);
    assert_eq!(v["stdout"], "/tmp\nhello\nf:a\nexported\n");
    assert_eq!(v["results"], json!([]), "bash has no results, only output");
    assert_eq!(v["execution_count"], 2);

    let v = sh("echo err >&2");
    assert_ok(&v);
    assert_eq!(v["stderr"], "err\n");

    // A failing last command is an error carrying its status; state is kept.
    let v = sh("ls /nonexistent");
    assert_eq!(error_name(&v), "ExitCode");
    assert_eq!(v["error"]["value"], "exit status 2");
    assert!(v["stderr"].as_str().unwrap().contains("nonexistent"));
    assert_eq!(sh("echo $X")["stdout"], "hello\n");

    // Reading stdin does not hang the cell.
    let v = sh("read line; echo \"read:[$line]\"");
    assert_eq!(v["stdout"], "read:[]\n", "{v}");

    // An interrupted busy loop, then an interrupted command: state kept.
    let v = sb.run(
        "bash",
        "default",
        "W=8; while true; do :; done",
        Some("500ms"),
    );
    assert!(v["error"].is_object(), "{v}");
    assert_eq!(v["state_lost"], false, "{v}");
    let v = sb.run("bash", "default", "Y=9; sleep 60", Some("500ms"));
    assert!(v["error"].is_object(), "{v}");
    assert_eq!(v["state_lost"], false, "{v}");
    assert_eq!(sh("echo $W $Y $X; pwd")["stdout"], "8 9 hello\n/tmp\n");

    // `exit` ends the shell: restarted, state lost.
    let v = sh("exit 3");
    assert_eq!(error_name(&v), "KernelDied");
    assert_eq!(v["state_lost"], true);
    let v = sh("echo ${X:-unset}");
    assert_eq!(v["stdout"], "unset\n");
    assert_eq!(v["state_lost"], true);
}

/// Every interrupt is a KeyboardInterrupt and keeps the shell: also a busy loop after an
/// interrupted child (bash 5.2 stopped running INT traps after one had `return`ed while it
/// waited for a child) and a command inside a function.
#[test]
fn bash_interrupts_are_keyboard_interrupts_and_keep_state() {
    let s = Server::start();
    let sb = s.sandbox();
    assert_ok(&sb.run(
        "bash",
        "default",
        "V=1; f() { sleep 60; echo not reached; }",
        None,
    ));
    for code in [
        "sleep 60",
        "while true; do :; done",
        "f",
        "sleep 60; echo not reached",
        "while true; do :; done",
    ] {
        let v = sb.run("bash", "default", code, Some("500ms"));
        assert_eq!(error_name(&v), "KeyboardInterrupt", "{code}: {v}");
        assert_eq!(v["state_lost"], false, "{code}: {v}");
        assert!(
            !v["stdout"].as_str().unwrap().contains("not reached"),
            "{v}"
        );
    }
    let v = sb.run("bash", "default", "echo $V", None);
    assert_eq!(v["stdout"], "1\n");
    assert_eq!(v["execution_count"], 7);
}

// ---------------------------------------------------------------------------------------------
// Streaming

/// (event, data, when) from a server-sent-events response.
fn read_sse(resp: ureq::Response, t0: Instant) -> Vec<(String, Value, Duration)> {
    let mut events = Vec::new();
    let mut name = String::new();
    let mut data = String::new();
    for line in BufReader::new(resp.into_reader()).lines() {
        let line = line.expect("sse read");
        if let Some(n) = line.strip_prefix("event:") {
            name = n.trim().to_string();
        } else if let Some(d) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(d.strip_prefix(' ').unwrap_or(d));
        } else if line.is_empty() && !data.is_empty() {
            let v: Value = serde_json::from_str(&data).expect("event data is JSON");
            events.push((std::mem::take(&mut name), v, t0.elapsed()));
            data.clear();
        }
    }
    events
}

#[test]
fn sse_streams_a_cell_as_it_runs() {
    let s = Server::start();
    let sb = s.sandbox();
    let code = "import time, sys\nfor i in range(3):\n    print(f'line {i}', flush=True)\n    time.sleep(0.3)\nprint('warn', file=sys.stderr)\ndisplay('shown')\n'end'";
    let t0 = Instant::now();
    let resp = s
        .req("POST", &sb.path("/code"))
        .set("Accept", "text/event-stream")
        .send_json(json!({"code": code}))
        .expect("stream");
    assert!(
        resp.content_type().starts_with("text/event-stream"),
        "{}",
        resp.content_type()
    );
    let events = read_sse(resp, t0);
    let names: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        names,
        vec!["stdout", "stdout", "stdout", "stderr", "result", "result", "done"],
        "{events:?}"
    );
    for (i, e) in events[..3].iter().enumerate() {
        assert_eq!(e.1["data"], format!("line {i}\n"));
    }
    assert_eq!(events[3].1["data"], "warn\n");
    assert_eq!(events[4].1["text/plain"], "'shown'");
    assert_eq!(events[4].1["is_main_result"], false);
    assert_eq!(events[5].1["text/plain"], "'end'");
    assert_eq!(events[5].1["is_main_result"], true);
    // The first line arrived while the cell was still running.
    let first = events[0].2;
    let done = events[6].2;
    assert!(
        done >= first + Duration::from_millis(600),
        "not streamed: first {first:?}, done {done:?}"
    );
    // `done` carries the whole buffered result.
    let d = &events[6].1;
    assert_eq!(d["stdout"], "line 0\nline 1\nline 2\n");
    assert_eq!(d["stderr"], "warn\n");
    assert_eq!(d["results"].as_array().unwrap().len(), 2);
    assert_eq!(d["execution_count"], 1);
    assert!(d["error"].is_null());

    // An error streams as an `error` event before `done`.
    let resp = s
        .req("POST", &sb.path("/code"))
        .set("Accept", "text/event-stream")
        .send_json(json!({"code": "print('x')\n1/0"}))
        .expect("stream");
    let events = read_sse(resp, Instant::now());
    let names: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(names, vec!["stdout", "error", "done"], "{events:?}");
    assert_eq!(events[1].1["name"], "ZeroDivisionError");
    assert_eq!(events[2].1["error"]["name"], "ZeroDivisionError");
    assert_eq!(events[2].1["execution_count"], 2);

    // A request the server refuses is still a clean response.
    let resp = s
        .req("POST", &sb.path("/code"))
        .set("Accept", "text/event-stream")
        .send_json(json!({"code": "1", "timeout": "2h"}));
    match resp {
        Err(ureq::Error::Status(400, _)) => {}
        Ok(r) => {
            let ev = read_sse(r, Instant::now());
            assert_eq!(ev.last().map(|e| e.0.as_str()), Some("done"), "{ev:?}");
            assert!(ev.last().unwrap().1["error"].is_object(), "{ev:?}");
        }
        Err(e) => panic!("{e}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Request validation

#[test]
fn bad_requests_are_refused() {
    let s = Server::start();
    let sb = s.sandbox();
    // A timeout above the server's maximum (3600s).
    let (st, v) = sb.post_code(json!({"code": "1", "timeout": "2h"}));
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("timeout"),
        "{v}"
    );
    let (st, v) = sb.post_code(json!({"code": "1", "timeout": 3601}));
    assert_eq!(st, 400, "{v}");
    // At the maximum is fine.
    let (st, v) = sb.post_code(json!({"code": "1", "timeout": "1h"}));
    assert_eq!(st, 200, "{v}");
    let (st, v) = sb.post_code(json!({"code": "1", "timeout": "soon"}));
    assert_eq!(st, 400, "{v}");
    let (st, v) = sb.post_code(json!({"code": "1", "language": "cobol"}));
    assert_eq!(st, 400, "{v}");
    let (st, v) = sb.post_code(json!({"code": "1", "extra": true}));
    assert_eq!(st, 400, "{v}");
    let (st, v) = sb.post_code(json!({"language": "python"}));
    assert_eq!(st, 400, "missing code: {v}");
    // Language aliases.
    let (st, v) = sb.post_code(json!({"code": "1+1", "language": "py"}));
    assert_eq!((st, text(&v)), (200, "2".to_string()));
    // Unknown sandbox; no key.
    let (st, v) = s.call(
        "POST",
        "/v1/sandboxes/nope/code",
        Some(json!({"code": "1"})),
    );
    assert_eq!(st, 404, "{v}");
    let r = ureq::post(&format!("{}{}", s.url, sb.path("/code"))).send_json(json!({"code": "1"}));
    match r {
        Err(ureq::Error::Status(401, _)) => {}
        other => panic!("expected 401, got {other:?}"),
    }
    // A deleted sandbox's contexts are gone with it.
    assert_ok(&sb.py("x = 1"));
    let (st, _) = s.call("DELETE", &sb.path(""), None);
    assert!(st == 204 || st == 200, "{st}");
    let (st, v) = sb.post_code(json!({"code": "x"}));
    assert_eq!(st, 404, "{v}");
}

// ---------------------------------------------------------------------------------------------
// Known bugs, reproduced precisely; run with `-- --ignored` to check a fix. Each turns green
// (and should lose its #[ignore]) once the bug is fixed.

#[test]
fn cell_output_is_capped() {
    let s = Server::start();
    let sb = s.sandbox();
    let v = sb.py("import sys\ns = 'x' * (1 << 20)\nfor _ in range(16): sys.stdout.write(s)\n1");
    let n = v["stdout"].as_str().unwrap().len();
    assert!(
        n <= (1 << 20) + 4096,
        "16 MiB of output came back whole ({n} bytes)"
    );
    assert_eq!(text(&v), "1");
}

#[test]
fn restarting_an_unknown_context_is_404() {
    let s = Server::start();
    let sb = s.sandbox();
    let (st, v) = s.call("POST", &sb.path("/contexts/python/nope/restart"), None);
    assert_eq!(st, 404, "{v}");
    let (_, v) = s.call("GET", &sb.path("/contexts"), None);
    assert_eq!(v["contexts"], json!([]));
}

#[test]
fn javascript_closing_stdout_does_not_silence_later_cells() {
    let s = Server::start();
    let sb = s.sandbox();
    assert_ok(&sb.run("javascript", "a", "process.stdout.end(); 1", None));
    let v = sb.run("javascript", "a", "console.log('after end'); 2", None);
    assert_eq!(v["stdout"], "after end\n", "{v}");
    assert_ok(&sb.run("javascript", "b", "require('fs').closeSync(1); 1", None));
    let v = sb.run("javascript", "b", "console.log('after close'); 2", None);
    assert_eq!(v["stdout"], "after close\n", "{v}");
    let v = sb.run(
        "javascript",
        "b",
        "require('child_process').execSync('echo sub', {stdio: 'inherit'}); 3",
        None,
    );
    assert_ok(&v);
    assert_eq!(v["stdout"], "sub\n", "{v}");
}

#[test]
fn kernel_start_failure_for_lack_of_processes_is_not_a_500() {
    let s = Server::start();
    let sb = s.sandbox_with(json!({"pids": 12}));
    let mut failure = None;
    for i in 0..12 {
        let (st, v) =
            sb.post_code(json!({"language": "bash", "context": format!("c{i}"), "code": "true"}));
        if st != 200 {
            failure = Some((st, v));
            break;
        }
    }
    let (st, v) = failure.expect("12 bash kernels fit in 12 processes?");
    let msg = v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!((400..500).contains(&st), "{st} {v}");
    assert!(
        !msg.contains("is its interpreter in the sandbox"),
        "misleading: {msg}"
    );
    assert!(msg.contains("process") || msg.contains("pids"), "{msg}");
}

#[test]
fn restart_and_delete_stop_the_kernels_children() {
    let s = Server::start();
    let sb = s.sandbox();
    for round in 0..12 {
        let (driver, sleeper) = kernel_child(&sb, "k");
        let path = if round % 2 == 0 {
            ("POST", sb.path("/contexts/python/k/restart"))
        } else {
            ("DELETE", sb.path("/contexts/python/k"))
        };
        let (st, v) = s.call(path.0, &path.1, None);
        assert_eq!(st, 204, "{v}");
        wait_until("the kernel to exit", || !alive(driver));
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !alive(sleeper),
            "round {round}: {} left the kernel's child {sleeper} running",
            path.0
        );
    }
}
