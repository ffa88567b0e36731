//! A real `cordon serve` on loopback for integration tests: started on port 0 with its own
//! data directory, URL and first API key read from what it prints, stopped (and its data
//! removed) on drop.
#![allow(dead_code)] // each test crate uses a different part

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Server {
    pub child: Child,
    pub url: String,
    pub key: String,
    pub data_dir: PathBuf,
    /// Remove the data directory on drop.
    pub scratch: bool,
}

pub fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}

/// Polls `f` every 50 ms until it holds; panics after 10 s.
pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}

impl Server {
    /// A server with a fresh data directory that is removed on drop.
    pub fn start() -> Server {
        let dir = std::env::temp_dir().join(format!(
            "cordon-serve-test-{}-{}",
            std::process::id(),
            unique()
        ));
        let mut s = Server::start_in(dir, &[]);
        s.scratch = true;
        s
    }

    /// A server on `data_dir` (kept on drop, e.g. for restart tests), with extra flags.
    pub fn start_in(data_dir: PathBuf, extra: &[&str]) -> Server {
        std::fs::create_dir_all(&data_dir).expect("data dir");
        Server::start_with(data_dir, extra, None)
    }

    /// A server on `data_dir` (created by the server itself if missing), with extra flags,
    /// started under `umask` when given (an octal string, e.g. "022").
    pub fn start_with(data_dir: PathBuf, extra: &[&str], umask: Option<&str>) -> Server {
        let mut cmd = match umask {
            Some(m) => {
                let mut c = Command::new("/bin/sh");
                c.args(["-c", &format!("umask {m} && exec \"$0\" \"$@\"")])
                    .arg(env!("CARGO_BIN_EXE_cordon"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_cordon")),
        };
        let mut child = cmd
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&data_dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start cordon serve");
        let out = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(out).lines();
        let mut url = String::new();
        let mut key = String::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let Some(Ok(line)) = lines.next() else { break };
            if let Some(u) = line.strip_prefix("cordon serving on ") {
                url = u.trim().to_string();
            }
            if let Some((_, k)) = line.split_once("shown once): ") {
                key = k.trim().to_string();
            }
            if line.starts_with("API key")
                || line.starts_with("API keys")
                || line.starts_with("authentication disabled")
            {
                break;
            }
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        assert!(
            url.starts_with("http://127.0.0.1:"),
            "server did not print a loopback URL: {url:?}"
        );
        Server {
            child,
            url,
            key,
            data_dir,
            scratch: false,
        }
    }

    pub fn req(&self, method: &str, path: &str) -> ureq::Request {
        ureq::request(method, &format!("{}{}", self.url, path))
            .set("Authorization", &format!("Bearer {}", self.key))
            .timeout(Duration::from_secs(60))
    }

    /// One JSON call; any HTTP status comes back with its body (JSON if it parses).
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let r = self.req(method, path);
        let res = match body {
            Some(b) => r.send_json(b),
            None => r.call(),
        };
        let resp = match res {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{method} {path}: {e}"),
        };
        let status = resp.status();
        let text = resp.into_string().unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::TERM,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                if self.scratch {
                    let _ = std::fs::remove_dir_all(&self.data_dir);
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill9();
    }
}
