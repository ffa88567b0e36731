//! The commands a person at a shell uses on a running `cordon serve`, as `docker ps` and
//! friends are used: `ps`, `exec`, `logs`, `top`, `kill`, `cp`. Each is a client of the native
//! HTTP API (`client.rs` says which server and key); parsing, calls and printing only — the
//! server checks everything.
//!
//! Threat model: what the server sends back is printed, and a sandbox's output is the
//! sandbox's: `exec` and `logs` write it to stdout/stderr as bytes, unchanged, as `cordon run`
//! does; the tables (`ps`, `top`) print ids, states and numbers from the server, with control
//! characters of metadata replaced so that a sandbox's creator cannot paint the terminal.
//! `cp` writes only the one local path the user named (a directory download writes under it and
//! refuses entry names that would climb out of it).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{json, Value};

use crate::client::{enc, finish, Server, ServerArgs};

#[derive(Args, Debug)]
#[command(
    about = "List the sandboxes of a running `cordon serve` (like `docker ps`)",
    after_help = "Examples:\n  cordon ps\n  cordon ps -q | xargs cordon kill\n  cordon ps --filter owner=alice --json"
)]
pub struct PsArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Only their ids, one a line.
    #[arg(short, long)]
    quiet: bool,
    /// Only those whose metadata has KEY equal to VALUE (repeatable: all must hold).
    #[arg(long, value_name = "KEY=VALUE")]
    filter: Vec<String>,
    /// The server's answer as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
#[command(
    about = "Run a command in a running sandbox and stream its output; exits with its status",
    after_help = "Exit status: the command's own; 128+N if killed by signal N; 124 on timeout; \
125 if it could not be run (unknown sandbox, refused key, server out of reach).\n\n\
Examples:\n  cordon exec SBX -- python3 -c 'print(1+1)'\n  cordon exec -t SBX -- bash\n  \
echo hi | cordon exec -i SBX -- cat\n  \
cordon exec -w /tmp -e DEBUG=1 --timeout 30s SBX -- make test"
)]
pub struct ExecArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Send this shell's stdin to the command (read to its end first; text only).
    #[arg(short, long, conflicts_with = "tty")]
    interactive: bool,
    /// On a terminal of the sandbox's own, relayed to this one (raw mode: ^C goes to the
    /// command); needs a terminal on stdin. Closing it ends the command.
    #[arg(short, long)]
    tty: bool,
    /// Working directory inside the sandbox (default `/workspace`).
    #[arg(short = 'w', long, value_name = "DIR")]
    workdir: Option<String>,
    /// An environment variable for the command (repeatable).
    #[arg(short, long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Wall-clock limit, e.g. `30s`.
    #[arg(long)]
    timeout: Option<String>,
    /// The sandbox's id.
    id: String,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true)]
    cmd: Vec<String>,
}

#[derive(Args, Debug)]
#[command(
    about = "Show a sandbox's commands and what they printed (its command history)",
    long_about = "Show a sandbox's commands and what they printed: its last 32 commands run in \
the foreground (the last 4 KiB of each output stream) and its background commands, oldest \
first, each with how it ended.",
    after_help = "Examples:\n  cordon logs SBX\n  cordon logs -f SBX        # keep printing as running commands write"
)]
pub struct LogsArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Keep following: print new output of running commands and new commands as they come,
    /// until the sandbox ends or Ctrl-C.
    #[arg(short, long)]
    follow: bool,
    /// The server's answer as JSON (no follow).
    #[arg(long, conflicts_with = "follow")]
    json: bool,
    /// The sandbox's id.
    id: String,
}

#[derive(Args, Debug)]
#[command(
    about = "What each sandbox uses now: CPU, memory, disk, processes against their limits",
    after_help = "Examples:\n  cordon top                 # refreshes every 2 s; Ctrl-C to stop\n  \
cordon top --once SBX1 SBX2"
)]
pub struct TopArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// One table, then exit.
    #[arg(long)]
    once: bool,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 2.0, value_parser = positive_secs)]
    interval: f64,
    /// Only these sandboxes (default: all of the key's).
    ids: Vec<String>,
}

#[derive(Args, Debug)]
#[command(
    about = "End sandboxes: every process of each is gone when this returns",
    after_help = "Examples:\n  cordon kill SBX\n  cordon ps -q | xargs cordon kill"
)]
pub struct KillArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The sandboxes' ids.
    #[arg(required = true)]
    ids: Vec<String>,
}

#[derive(Args, Debug)]
#[command(
    about = "Copy files between this machine and a sandbox (SANDBOX:PATH on one side)",
    after_help = "A relative sandbox path is under /workspace. `-` as the local side is stdin or \
stdout. Directories are copied with what they hold (regular files and directories; \
symlinks and special files are skipped and named).\n\n\
Examples:\n  cordon cp data.csv SBX:/workspace/data.csv\n  cordon cp SBX:/workspace/out ./out\n  \
cordon cp SBX:report.txt -"
)]
pub struct CpArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// From: a local path, `-`, or SANDBOX:PATH.
    src: String,
    /// To: a local path, `-`, or SANDBOX:PATH.
    dst: String,
}

fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.1 => Ok(v),
        _ => Err("a number of seconds, at least 0.1".into()),
    }
}

/// Text from the server made safe for a terminal table: control characters become `?`.
fn cell(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        v => v.to_string(),
    };
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `3s`, `4m`, `2h`, `3d`: how long, as `docker ps` shows it.
fn human_secs(s: u64) -> String {
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// `512K`, `1.5M`, `2.0G`.
fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b}B")
    } else if v < 10.0 {
        format!("{v:.1}{}", UNITS[u])
    } else {
        format!("{v:.0}{}", UNITS[u])
    }
}

pub fn ps_main(a: PsArgs) -> i32 {
    let mut query = Vec::new();
    for f in &a.filter {
        let Some((k, v)) = f.split_once('=') else {
            eprintln!("cordon: --filter {f}: KEY=VALUE");
            return 125;
        };
        query.push(format!("metadata.{}={}", enc(k), enc(v)));
    }
    let path = if query.is_empty() {
        "/v1/sandboxes".to_string()
    } else {
        format!("/v1/sandboxes?{}", query.join("&"))
    };
    let r = a.server.resolve().and_then(|s| s.call("GET", &path, None));
    finish(r, |v| {
        if a.json {
            crate::client::pretty(v);
            return;
        }
        let list = v["sandboxes"].as_array().cloned().unwrap_or_default();
        if a.quiet {
            for sb in &list {
                println!("{}", cell(&sb["id"]));
            }
            return;
        }
        let now = now_secs();
        println!(
            "{:<26} {:<8} {:<12} {:>6} {:>8}  METADATA",
            "ID", "STATE", "PROFILE", "AGE", "TTL LEFT"
        );
        for sb in &list {
            let created = sb["created_at"].as_u64().unwrap_or(now);
            let expires = sb["expires_at"].as_u64().unwrap_or(now);
            let meta: Vec<String> = sb["metadata"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{}={}", cell(&json!(k)), cell(v)))
                        .collect()
                })
                .unwrap_or_default();
            println!(
                "{:<26} {:<8} {:<12} {:>6} {:>8}  {}",
                cell(&sb["id"]),
                cell(&sb["state"]),
                cell(&sb["profile"]),
                human_secs(now.saturating_sub(created)),
                human_secs(expires.saturating_sub(now)),
                meta.join(",")
            );
        }
    })
}

pub fn exec_main(a: ExecArgs) -> i32 {
    match exec(a) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cordon: {e}");
            125
        }
    }
}

fn exec(a: ExecArgs) -> Result<i32, String> {
    let s = a.server.resolve()?;
    let mut env = BTreeMap::new();
    for e in &a.env {
        let Some((k, v)) = e.split_once('=') else {
            return Err(format!("--env {e}: NAME=VALUE"));
        };
        env.insert(k.to_string(), v.to_string());
    }
    let mut body = json!({ "cmd": a.cmd, "env": env });
    if let Some(w) = &a.workdir {
        body["cwd"] = json!(w);
    }
    if let Some(t) = &a.timeout {
        body["timeout"] = json!(t);
    }
    if a.tty {
        return crate::ops_tty::exec_tty(&s, &a.id, body);
    }
    if a.interactive {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("reading stdin for -i (text only): {e}"))?;
        body["stdin"] = json!(text);
    }
    let req = s
        .request("POST", &format!("/v1/sandboxes/{}/exec", enc(&a.id)))
        .set("Accept", "text/event-stream");
    let resp = s.send(req, Some(body))?;
    let outcome = relay_events(BufReader::new(resp.into_reader()))?;
    if let Some(err) = &outcome.error {
        eprintln!("cordon: {err}");
    }
    for hit in &outcome.limits_hit {
        eprintln!(
            "cordon: limit hit: {}",
            serde_json::to_string(hit).unwrap_or_default()
        );
    }
    Ok(outcome.cli_exit_code())
}

/// Copies the exec stream's `stdout` and `stderr` events to ours as they come; returns the
/// Outcome of its `exit` event.
fn relay_events(r: impl BufRead) -> Result<cordon_policy::Outcome, String> {
    use base64::Engine;
    let (mut event, mut data) = (String::new(), String::new());
    for line in r.lines() {
        let line = line.map_err(|e| format!("reading the command's output: {e}"))?;
        if let Some(v) = line.strip_prefix("event:") {
            event = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(v.strip_prefix(' ').unwrap_or(v));
        } else if line.is_empty() && !event.is_empty() {
            match event.as_str() {
                "stdout" | "stderr" => {
                    let v: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
                    let bytes = match v["b64"].as_str() {
                        Some(b) => base64::engine::general_purpose::STANDARD
                            .decode(b)
                            .unwrap_or_default(),
                        None => v["data"].as_str().unwrap_or("").as_bytes().to_vec(),
                    };
                    // A closed stdout (`| head`) must not stop the command's accounting.
                    let _ = if event == "stdout" {
                        let mut o = std::io::stdout().lock();
                        o.write_all(&bytes).and_then(|_| o.flush())
                    } else {
                        std::io::stderr().write_all(&bytes)
                    };
                }
                "exit" => {
                    return serde_json::from_str(&data)
                        .map_err(|e| format!("the server's Outcome: {e}"));
                }
                _ => {}
            }
            event.clear();
            data.clear();
        }
    }
    Err("the server ended the stream before the command's Outcome".into())
}

pub fn logs_main(a: LogsArgs) -> i32 {
    let s = match a.server.resolve() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cordon: {e}");
            return 1;
        }
    };
    let path = format!("/v1/sandboxes/{}/logs", enc(&a.id));
    if a.json {
        return finish(s.call("GET", &path, None), crate::client::pretty);
    }
    // How much of each command's output is already printed.
    let mut shown: BTreeMap<String, (usize, usize, bool)> = BTreeMap::new();
    loop {
        let v = match s.call("GET", &path, None) {
            Ok(v) => v,
            // Following a sandbox that ended: its history is gone with it; that ends the follow.
            Err(e) if a.follow && !shown.is_empty() => {
                eprintln!("cordon: {e}");
                return 0;
            }
            Err(e) => {
                eprintln!("cordon: {e}");
                return 1;
            }
        };
        for c in v["commands"].as_array().into_iter().flatten() {
            print_command(c, &mut shown);
        }
        if !a.follow {
            return 0;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Prints what is new of one command: its heading the first time, output past what was shown,
/// and how it ended once it has.
fn print_command(c: &Value, shown: &mut BTreeMap<String, (usize, usize, bool)>) {
    let id = c["command_id"].as_str().unwrap_or("").to_string();
    let first = !shown.contains_key(&id);
    let (out_at, err_at, ended) = shown.entry(id.clone()).or_insert((0, 0, false));
    if first {
        let argv: Vec<String> = c["cmd"]
            .as_array()
            .into_iter()
            .flatten()
            .map(cell)
            .collect();
        println!("### {} $ {}", cell(&json!(id)), argv.join(" "));
    }
    let out = c["stdout"].as_str().unwrap_or("");
    let err = c["stderr"].as_str().unwrap_or("");
    let _ = std::io::stdout().write_all(out.get(*out_at..).unwrap_or("").as_bytes());
    let _ = std::io::stderr().write_all(err.get(*err_at..).unwrap_or("").as_bytes());
    let _ = std::io::stdout().flush();
    (*out_at, *err_at) = (out.len(), err.len());
    if !*ended && !c["outcome"].is_null() {
        *ended = true;
        let o = &c["outcome"];
        let how = match (
            o["status"].as_str(),
            o["exit_code"].as_i64(),
            o["signal"].as_i64(),
        ) {
            (Some("exited"), Some(code), _) => format!("exit {code}"),
            (Some(st), _, Some(sig)) => format!("{st} (signal {sig})"),
            (Some(st), _, _) => st.to_string(),
            _ => "ended".into(),
        };
        println!("### {} ended: {how}", cell(&json!(id)));
    }
}

pub fn top_main(a: TopArgs) -> i32 {
    let s = match a.server.resolve() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cordon: {e}");
            return 1;
        }
    };
    let tty = std::io::stdout().is_terminal();
    loop {
        let started = Instant::now();
        let ids = if a.ids.is_empty() {
            match s.call("GET", "/v1/sandboxes", None) {
                Ok(v) => v["sandboxes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|sb| sb["state"] == "running")
                    .filter_map(|sb| sb["id"].as_str().map(str::to_string))
                    .collect(),
                Err(e) => {
                    eprintln!("cordon: {e}");
                    return 1;
                }
            }
        } else {
            a.ids.clone()
        };
        let mut table = format!(
            "{:<26} {:>6} {:>17} {:>17} {:>9}\n",
            "ID", "CPU%", "MEM / LIMIT", "DISK / LIMIT", "PIDS"
        );
        let mut failed = false;
        for id in &ids {
            match metrics(&s, id) {
                Ok(m) => table.push_str(&format!(
                    "{:<26} {:>5.1}% {:>17} {:>17} {:>9}\n",
                    cell(&json!(id)),
                    m["cpu_used_pct"].as_f64().unwrap_or(0.0),
                    format!(
                        "{} / {}",
                        human_bytes(m["mem_used"].as_u64().unwrap_or(0)),
                        human_bytes(m["mem_total"].as_u64().unwrap_or(0))
                    ),
                    format!(
                        "{} / {}",
                        human_bytes(m["disk_used"].as_u64().unwrap_or(0)),
                        human_bytes(m["disk_total"].as_u64().unwrap_or(0))
                    ),
                    format!("{}/{}", m["processes"], m["processes_max"]),
                )),
                // A sandbox that ended between the list and its metrics is simply gone.
                Err(e) if a.ids.is_empty() => drop(e),
                Err(e) => {
                    eprintln!("cordon: {id}: {e}");
                    failed = true;
                }
            }
        }
        if tty && !a.once {
            // Clear the screen and go home, as top does.
            print!("\x1b[H\x1b[2J");
        }
        print!("{table}");
        let _ = std::io::stdout().flush();
        if a.once {
            return i32::from(failed);
        }
        let wait = Duration::from_secs_f64(a.interval).saturating_sub(started.elapsed());
        std::thread::sleep(wait);
    }
}

fn metrics(s: &Server, id: &str) -> Result<Value, String> {
    s.call("GET", &format!("/v1/sandboxes/{}/metrics", enc(id)), None)
}

pub fn kill_main(a: KillArgs) -> i32 {
    let s = match a.server.resolve() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cordon: {e}");
            return 1;
        }
    };
    let mut code = 0;
    for id in &a.ids {
        match s.call("DELETE", &format!("/v1/sandboxes/{}", enc(id)), None) {
            Ok(_) => println!("{id}"),
            Err(e) => {
                eprintln!("cordon: {id}: {e}");
                code = 1;
            }
        }
    }
    code
}

/// One side of `cordon cp`.
enum Side {
    Local(PathBuf),
    Stdio,
    Sandbox { id: String, path: String },
}

fn side(s: &str) -> Side {
    if s == "-" {
        return Side::Stdio;
    }
    // `ID:PATH`, where ID holds no `/` (so `./a:b` and `/x:y` stay local paths).
    match s.split_once(':') {
        Some((id, path)) if !id.is_empty() && !id.contains('/') && !path.is_empty() => {
            Side::Sandbox {
                id: id.to_string(),
                path: path.to_string(),
            }
        }
        _ => Side::Local(PathBuf::from(s)),
    }
}

pub fn cp_main(a: CpArgs) -> i32 {
    let r = a
        .server
        .resolve()
        .and_then(|s| match (side(&a.src), side(&a.dst)) {
            (Side::Sandbox { id, path }, Side::Stdio) => {
                let data = s.get_bytes(&file_url(&id, &path))?;
                std::io::stdout()
                    .write_all(&data)
                    .map_err(|e| format!("stdout: {e}"))
            }
            (Side::Sandbox { id, path }, Side::Local(to)) => download(&s, &id, &path, &to),
            (Side::Stdio, Side::Sandbox { id, path }) => {
                let mut data = Vec::new();
                std::io::stdin()
                    .read_to_end(&mut data)
                    .map_err(|e| format!("stdin: {e}"))?;
                upload_file(&s, &id, &path, &data)
            }
            (Side::Local(from), Side::Sandbox { id, path }) => upload(&s, &from, &id, &path),
            (Side::Sandbox { .. }, Side::Sandbox { .. }) => {
                Err("both sides are sandboxes: copy through this machine in two steps".into())
            }
            _ => Err("neither side is a sandbox: name one as SANDBOX:PATH".into()),
        });
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cordon: {e}");
            1
        }
    }
}

fn file_url(id: &str, path: &str) -> String {
    format!("/v1/sandboxes/{}/files?path={}", enc(id), enc(path))
}

fn upload_file(s: &Server, id: &str, path: &str, data: &[u8]) -> Result<(), String> {
    let req = s.request("PUT", &file_url(id, path));
    s.send_bytes(req, data).map(drop)
}

/// Uploads a file, or a directory with what it holds. Symlinks and special files are skipped
/// with a note: following a symlink could send a file from outside what the user named.
fn upload(s: &Server, from: &Path, id: &str, path: &str) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(from).map_err(|e| format!("{}: {e}", from.display()))?;
    if meta.is_file() {
        let data = std::fs::read(from).map_err(|e| format!("{}: {e}", from.display()))?;
        return upload_file(s, id, path, &data);
    }
    if !meta.is_dir() {
        eprintln!(
            "cordon: skipped {} (not a file or directory)",
            from.display()
        );
        return Ok(());
    }
    s.call(
        "POST",
        &format!("/v1/sandboxes/{}/files/mkdir", enc(id)),
        Some(json!({ "path": path })),
    )?;
    let mut entries: Vec<_> = std::fs::read_dir(from)
        .map_err(|e| format!("{}: {e}", from.display()))?
        .filter_map(Result::ok)
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            eprintln!(
                "cordon: skipped {} (its name is not UTF-8)",
                e.path().display()
            );
            continue;
        };
        upload(
            s,
            &e.path(),
            id,
            &format!("{}/{name}", path.trim_end_matches('/')),
        )?;
    }
    Ok(())
}

/// Downloads a file, or a directory with what it holds, to `to`.
fn download(s: &Server, id: &str, path: &str, to: &Path) -> Result<(), String> {
    let stat = s.call(
        "GET",
        &format!("/v1/sandboxes/{}/files/stat?path={}", enc(id), enc(path)),
        None,
    )?;
    match stat["type"].as_str() {
        Some("file") => {
            let data = s.get_bytes(&file_url(id, path))?;
            std::fs::write(to, data).map_err(|e| format!("{}: {e}", to.display()))
        }
        Some("dir") => {
            match std::fs::create_dir(to) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && to.is_dir() => {}
                Err(e) => return Err(format!("{}: {e}", to.display())),
            }
            let list = s.call(
                "GET",
                &format!("/v1/sandboxes/{}/files/list?path={}", enc(id), enc(path)),
                None,
            )?;
            for entry in list["entries"].as_array().into_iter().flatten() {
                let name = entry["name"].as_str().unwrap_or("");
                // A name is one component: anything else could write outside `to`.
                if name.is_empty() || name == "." || name == ".." || name.contains('/') {
                    eprintln!("cordon: skipped an entry named {:?}", cell(&json!(name)));
                    continue;
                }
                let child = format!("{}/{name}", path.trim_end_matches('/'));
                match entry["type"].as_str() {
                    Some("file") | Some("dir") => download(s, id, &child, &to.join(name))?,
                    _ => eprintln!("cordon: skipped {child} (not a file or directory)"),
                }
            }
            Ok(())
        }
        _ => Err(format!("{id}:{path} is not a file or directory")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_side_is_id_colon_path_and_anything_with_a_slash_first_is_local() {
        assert!(matches!(side("sbx1:/tmp/a"), Side::Sandbox { .. }));
        assert!(matches!(side("./a:b"), Side::Local(_)));
        assert!(matches!(side("/x:y"), Side::Local(_)));
        assert!(matches!(side("plain.txt"), Side::Local(_)));
        assert!(matches!(side("-"), Side::Stdio));
    }

    #[test]
    fn table_cells_never_carry_terminal_escapes() {
        assert_eq!(cell(&json!("a\x1b[2Jb\n")), "a?[2Jb?");
    }

    #[test]
    fn sizes_and_ages_read_as_docker_shows_them() {
        assert_eq!(human_bytes(512), "512B");
        assert_eq!(human_bytes(1536), "1.5K");
        assert_eq!(human_bytes(64 << 20), "64M");
        assert_eq!(human_secs(59), "59s");
        assert_eq!(human_secs(3600 * 5), "5h");
    }

    #[test]
    fn the_exec_stream_is_relayed_and_its_outcome_read() {
        let mut o = cordon_policy::Outcome::error("x".to_string(), Default::default());
        o.status = cordon_policy::Status::Exited;
        o.exit_code = Some(3);
        let stream = format!(
            "event: stdout\ndata: {{\"data\":\"\"}}\n\nevent: exit\ndata: {}\n\n",
            serde_json::to_string(&o).unwrap_or_default()
        );
        let got = relay_events(std::io::Cursor::new(stream)).map(|o| o.cli_exit_code());
        assert_eq!(got, Ok(3));
        assert!(relay_events(std::io::Cursor::new("event: stdout\ndata: {}\n\n")).is_err());
    }
}
