//! `cordon run`: flags → Profile → engine → exit code or JSON Outcome.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use cordon_linux::{OutputMode, RunRequest, StdinSource};
use cordon_policy::network::entry_to_allow;
use cordon_policy::outcome::exit;
use cordon_policy::units::{format_duration, format_size};
use cordon_policy::units::{parse_duration, parse_size};
use cordon_policy::{Bind, EnvEntry, Layer, LimitHit, Limits, Outcome, Profile};

#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: the program's own; 128+N if killed by signal N; 124 on timeout; \
125 if cordon itself failed; 126 if the command is not executable; 127 if not found. \
With --json, cordon exits 0 whenever it printed an Outcome.\n\n\
Examples:\n  cordon run -- python3 -c 'import sys; print(sys.version)'\n  \
cordon run --memory 256M --timeout 10s --json -- node -e 'console.log(1)'\n  \
cordon run --workspace ./job --env API_URL=http://x -- python3 job.py"
)]
pub struct RunArgs {
    /// Built-in profile (default, strict) or a TOML profile file.
    #[arg(long, value_name = "NAME|FILE", default_value = "default")]
    profile: String,
    /// Memory limit for the whole sandbox, no swap (e.g. 256M, 1G). [profile default: 512M]
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// CPU quota in cores, fractions allowed (e.g. 0.5). [profile default: 1]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    cpus: Option<String>,
    /// Maximum processes and threads at once. [profile default: 64]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pids: Option<String>,
    /// Wall-clock limit (e.g. 500ms, 30s, 5m). [profile default: 30s]
    #[arg(long, value_name = "DURATION")]
    timeout: Option<String>,
    /// CPU-time limit over the whole tree (e.g. 10s). [profile default: none]
    #[arg(long = "cpu-time", value_name = "DURATION")]
    cpu_time: Option<String>,
    /// Size of the writable /tmp and /workspace tmpfs. [profile default: 64M]
    #[arg(long, value_name = "SIZE")]
    disk: Option<String>,
    /// Bytes kept per output stream; the rest is drained and dropped. [profile default: 1M]
    #[arg(long = "output-limit", value_name = "SIZE")]
    output_limit: Option<String>,
    /// Host directory mounted read-write at /workspace (default: a fresh tmpfs).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Extra read-only bind mount (repeatable).
    #[arg(long, value_name = "PATH[:DEST]")]
    ro: Vec<String>,
    /// Extra read-write bind mount (repeatable).
    #[arg(long, value_name = "PATH[:DEST]")]
    rw: Vec<String>,
    /// Set a variable, or pass KEY through from cordon's environment (repeatable).
    #[arg(long, value_name = "KEY=VALUE|KEY")]
    env: Vec<String>,
    /// Allow egress through the proxy to this domain (repeatable). Default: no network.
    #[arg(long = "allow-net", value_name = "DOMAIN[:PORT]")]
    allow_net: Vec<String>,
    /// Resolve NAME to IP in the egress proxy instead of asking DNS (repeatable).
    #[arg(long = "add-host", value_name = "NAME:IP")]
    add_host: Vec<String>,
    /// Print one JSON Outcome on stdout instead of streaming the program's output.
    #[arg(long)]
    json: bool,
    /// What the program reads on stdin: a file, or - for cordon's own stdin. Default: empty.
    #[arg(long, value_name = "FILE|-")]
    stdin: Option<String>,
    /// Working directory inside the sandbox. [default: /workspace]
    #[arg(long, value_name = "DIR")]
    cwd: Option<String>,
    /// Fail (exit 125) rather than run without these layers: user_ns, pid_ns, net_ns,
    /// mount_ns, ipc_ns, uts_ns, cgroup_ns, seccomp, landlock, cgroup, rlimits.
    #[arg(long, value_name = "LAYER,…", value_delimiter = ',')]
    require: Vec<String>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

fn bad(flag: &str, msg: impl std::fmt::Display) -> String {
    format!("{flag}: {msg}")
}

/// Applies the flags on top of the chosen profile.
fn build_profile(a: &RunArgs) -> Result<Profile, String> {
    let mut p = Profile::resolve(&a.profile).map_err(|e| bad("--profile", e))?;
    let l = &mut p.limits;
    if let Some(v) = &a.memory {
        l.memory = parse_size(v).map_err(|e| bad("--memory", e))?;
    }
    if let Some(v) = &a.cpus {
        l.cpus = v.trim().parse().map_err(|_| {
            bad(
                "--cpus",
                format!("'{v}' is not a number of cores, e.g. 1 or 0.5"),
            )
        })?;
    }
    if let Some(v) = &a.pids {
        l.pids = v
            .trim()
            .parse()
            .map_err(|_| bad("--pids", format!("'{v}' is not a whole number, e.g. 64")))?;
    }
    if let Some(v) = &a.timeout {
        l.timeout = parse_duration(v).map_err(|e| bad("--timeout", e))?;
    }
    if let Some(v) = &a.cpu_time {
        l.cpu_time = Some(parse_duration(v).map_err(|e| bad("--cpu-time", e))?);
    }
    if let Some(v) = &a.disk {
        l.disk = parse_size(v).map_err(|e| bad("--disk", e))?;
    }
    if let Some(v) = &a.output_limit {
        l.output_limit = parse_size(v).map_err(|e| bad("--output-limit", e))?;
    }
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let absolute = |p: PathBuf| if p.is_absolute() { p } else { cwd.join(p) };
    if let Some(ws) = &a.workspace {
        let abs = absolute(ws.clone());
        let canon = abs
            .canonicalize()
            .map_err(|e| bad("--workspace", format!("{}: {e}", abs.display())))?;
        p.workspace = Some(canon);
    }
    for (specs, writable) in [(&a.ro, false), (&a.rw, true)] {
        for spec in specs {
            let mut b = Bind::parse(spec, writable).map_err(|e| e.to_string())?;
            let flag = if writable { "--rw" } else { "--ro" };
            let src = absolute(b.source.clone());
            b.source = src
                .canonicalize()
                .map_err(|e| bad(flag, format!("{}: {e}", src.display())))?;
            if !spec.contains(':') {
                b.dest = b.source.clone();
            }
            p.binds.push(b);
        }
    }
    for e in &a.env {
        p.env.push(EnvEntry::parse(e).map_err(|e| e.to_string())?);
    }
    for n in &a.allow_net {
        p.network.allow.push(n.clone());
    }
    for h in &a.add_host {
        let (name, ip) = h
            .rsplit_once(':')
            .filter(|(n, _)| !n.is_empty())
            .ok_or_else(|| {
                bad(
                    "--add-host",
                    format!("'{h}' is not NAME:IP, e.g. api.test:127.0.0.2"),
                )
            })?;
        let ip = ip
            .trim_matches(|c| c == '[' || c == ']')
            .parse()
            .map_err(|_| bad("--add-host", format!("'{ip}' is not an IP address")))?;
        p.network.hosts.insert(name.to_string(), ip);
    }
    for r in &a.require {
        let layer = Layer::parse(r).map_err(|e| bad("--require", e))?;
        if !p.require.contains(&layer) {
            p.require.push(layer);
        }
    }
    p.validate().map_err(|e| e.to_string())?;
    Ok(p)
}

pub fn main(a: RunArgs) -> i32 {
    let profile = match build_profile(&a) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cordon: {e}");
            return exit::CORDON_FAILED;
        }
    };
    let stdin = match a.stdin.as_deref() {
        None => StdinSource::Empty,
        Some("-") => StdinSource::Inherit,
        Some(f) => {
            let path = PathBuf::from(f);
            if let Err(e) = std::fs::File::open(&path) {
                eprintln!("cordon: --stdin {f}: {e}");
                return exit::CORDON_FAILED;
            }
            StdinSource::File(path)
        }
    };
    let egress = if profile.network.is_enabled() {
        match crate::run_egress::factory(&profile) {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("cordon: --allow-net: {e}");
                return exit::CORDON_FAILED;
            }
        }
    } else {
        None
    };
    let limits = profile.limits.clone();
    let req = RunRequest {
        profile,
        argv: a.command.clone(),
        cwd: a.cwd.clone(),
        env: BTreeMap::new(),
        stdin,
        output: if a.json {
            OutputMode::Capture
        } else {
            OutputMode::Stream
        },
        egress,
    };
    match cordon_linux::run(req) {
        Ok(outcome) => {
            if a.json {
                match serde_json::to_string(&outcome) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("cordon: cannot encode the outcome: {e}");
                        return exit::CORDON_FAILED;
                    }
                }
                0
            } else {
                for line in notices(&outcome, &limits) {
                    eprintln!("cordon: {line}");
                }
                outcome.cli_exit_code()
            }
        }
        Err(e) => {
            eprintln!("cordon: {e}");
            exit::CORDON_FAILED
        }
    }
}

/// What a person running without `--json` is told on stderr after the program's own output:
/// why cordon failed, each limit that ended the run or refused it something, and each egress
/// request the proxy refused, with the flag that would allow it. One line each.
fn notices(o: &Outcome, limits: &Limits) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(err) = &o.error {
        lines.push(err.clone());
    }
    let scratch = "a scratch filesystem (/tmp, /workspace or /dev/shm)";
    for hit in &o.limits_hit {
        lines.push(match hit {
            LimitHit::WallTime => format!(
                "timed out after {} (raise --timeout)",
                format_duration(limits.timeout)
            ),
            LimitHit::Memory => format!(
                "out of memory: the memory limit ({}) was hit and a process was killed \
                 (raise --memory)",
                format_size(limits.memory)
            ),
            LimitHit::Pids if o.enforcement.cgroup == "none" => format!(
                "the process limit ({}) was reached: further forks and threads fail \
                 (raise --pids)",
                limits.pids
            ),
            LimitHit::Pids => format!(
                "the process limit ({}) refused a fork or thread (raise --pids)",
                limits.pids
            ),
            LimitHit::CpuTime => match limits.cpu_time {
                Some(t) => format!(
                    "the CPU-time limit ({}) was hit (raise --cpu-time)",
                    format_duration(t)
                ),
                None => "the CPU-time limit was hit (raise --cpu-time)".to_string(),
            },
            LimitHit::Output => {
                let cut = match (o.stdout_truncated, o.stderr_truncated) {
                    (true, true) => "stdout and stderr were",
                    (false, true) => "stderr was",
                    _ => "stdout was",
                };
                format!(
                    "output was cut: {cut} kept only up to {} (raise --output-limit)",
                    format_size(limits.output_limit)
                )
            }
            LimitHit::Disk => format!(
                "{scratch} filled up: {} each (raise --disk)",
                format_size(limits.disk)
            ),
            LimitHit::Files => format!(
                "{scratch} ran out of inodes: {} files and directories each (raise --disk)",
                limits.scratch_inodes()
            ),
        });
    }
    for e in o.network.iter().filter(|e| e.verdict == "deny") {
        let mut line = format!("egress refused: {}:{}: {}", e.host, e.port, e.reason);
        if let Some(entry) = entry_to_allow(&e.host, e.port, &e.reason) {
            line.push_str(&format!("; allow it with --allow-net {entry}"));
        }
        lines.push(line);
    }
    lines
}
