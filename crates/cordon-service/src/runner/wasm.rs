//! A one-shot run of a WebAssembly module: which backend a command gets, and the separate
//! `cordon-wasm` binary that runs it (wasmtime and Cranelift are not linked into `cordon`).
//!
//! Threat model: the module is hostile; it runs in that binary's confined runtime, never in
//! this process. The request (profile, argv, environment values) goes to the runtime in a
//! private 0700 directory, never on its command line.

use std::io::Read;
use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use cordon_policy::wasm::{self as wire, Reply};
use cordon_policy::{EnvEntry, Outcome, Profile};

use super::Backend;

/// The host file `cmd` names, if it is one: relative to the current directory, else to the
/// workspace (where the process backend would look for `./tool` inside the sandbox).
fn host_file(cmd: &str, profile: &Profile) -> Option<PathBuf> {
    let p = Path::new(cmd);
    if p.is_file() {
        return Some(p.to_path_buf());
    }
    if p.is_relative() {
        if let Some(ws) = &profile.workspace {
            let q = ws.join(p);
            if q.is_file() {
                return Some(q);
            }
        }
    }
    None
}

fn starts_like_wasm(path: &Path) -> bool {
    let mut head = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && wire::is_wasm(&head)
}

/// The module to run in the wasm backend, or `None` for a process run.
pub fn module_for(
    choice: Backend,
    command: &[String],
    profile: &Profile,
) -> Result<Option<PathBuf>, String> {
    let Some(cmd) = command.first() else {
        return Ok(None);
    };
    match choice {
        Backend::Process => Ok(None),
        Backend::Auto => Ok(host_file(cmd, profile).filter(|p| starts_like_wasm(p))),
        Backend::Wasm => {
            let path = host_file(cmd, profile).ok_or_else(|| {
                format!("--backend wasm: {cmd}: no such file (give the module's path on this host)")
            })?;
            if !starts_like_wasm(&path) {
                return Err(format!(
                    "--backend wasm: {cmd} is not a WebAssembly module (it does not start with \\0asm)"
                ));
            }
            Ok(Some(path))
        }
    }
}

/// Where the guest's stdin comes from.
pub enum Stdin {
    Empty,
    Bytes(Vec<u8>),
    File(PathBuf),
    /// The caller's own stdin.
    Inherit,
}

/// The `cordon-wasm` binary: `$CORDON_WASM_BIN` when set, else beside this `cordon` binary,
/// else on PATH. The error names what to install.
pub fn locate() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(wire::BINARY_ENV).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!(
                "{}={}: no such file (the WebAssembly runtime binary)",
                wire::BINARY_ENV,
                p.display()
            ))
        };
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join(wire::BINARY)));
    if let Some(p) = beside.as_ref().filter(|p| p.is_file()) {
        return Ok(p.clone());
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path).filter(|d| d.is_absolute()) {
            let p = dir.join(wire::BINARY);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err(format!(
        "the WebAssembly backend is not installed: it is the separate binary {bin}, found \
         neither beside cordon{beside} nor on PATH; install it with scripts/install.sh (which \
         installs cordon and {bin}), or run the file as a process with --backend process",
        bin = wire::BINARY,
        beside = beside
            .and_then(|p| p.parent().map(|d| format!(" (in {})", d.display())))
            .unwrap_or_default(),
    ))
}

/// A private directory for one request (0700; removed when dropped).
struct RequestDir(PathBuf);

impl RequestDir {
    /// In memory where the host offers a place (`$XDG_RUNTIME_DIR`, else a tmpfs `/dev/shm`)
    /// when it will hold only the request and the reply: on a disk filesystem, creating and
    /// removing them cost a measurable part of a warm module run. A module's bytes (`small`
    /// false) go to the temporary directory, which may be larger.
    fn new(small: bool) -> Result<RequestDir, String> {
        use std::os::unix::fs::DirBuilderExt;
        let in_memory = || -> Option<PathBuf> {
            if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
                if d.is_absolute() && d.is_dir() {
                    return Some(d);
                }
            }
            let shm = Path::new("/dev/shm");
            rustix::fs::statfs(shm)
                .ok()
                // TMPFS_MAGIC (the crate has no libc of its own).
                .filter(|s| s.f_type == 0x0102_1994)
                .map(|_| shm.to_path_buf())
        };
        let base = small
            .then(in_memory)
            .flatten()
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!(
            "cordon-wasm-req-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(RequestDir(dir))
    }

    /// Writes a new 0600 file `name` in the directory.
    fn write(&self, name: &str, data: &[u8]) -> Result<PathBuf, String> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.0.join(name);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(data))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }
}

impl Drop for RequestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `module` in the `cordon-wasm` binary (see `cordon_wasm::confined`).
pub fn run(
    profile: &Profile,
    module: &Path,
    command: &[String],
    extra_env: &BTreeMap<String, String>,
    stdin: Stdin,
    echo: bool,
) -> Result<Outcome, String> {
    let dir = RequestDir::new(true)?;
    run_in(&dir, profile, module, command, extra_env, stdin, echo)
}

fn run_in(
    dir: &RequestDir,
    profile: &Profile,
    module: &Path,
    command: &[String],
    extra_env: &BTreeMap<String, String>,
    stdin: Stdin,
    echo: bool,
) -> Result<Outcome, String> {
    use std::process::{Command, Stdio};
    if profile.network.is_enabled() {
        return Err(
            "--allow-net: a WebAssembly module has no network (WASI sockets are refused), so \
             an egress allowlist cannot apply; run it without --allow-net"
                .into(),
        );
    }
    let bin = locate()?;
    // The module's path must still name it for a runtime that may run elsewhere in the tree.
    let module = std::path::absolute(module).map_err(|e| format!("{}: {e}", module.display()))?;
    // The runtime is a fork of the supervisor (`cordon-wasm run`), so the supervisor gets no
    // environment it does not need: pass-through entries are resolved here, and only the
    // variables that place its cache and scratch directories go along.
    let mut profile = profile.clone();
    profile.env = std::mem::take(&mut profile.env)
        .into_iter()
        .filter_map(|e| match e {
            EnvEntry::Pass(k) => std::env::var(&k).ok().map(|v| EnvEntry::Set(k, v)),
            set => Some(set),
        })
        .collect();
    let req = wire::Request {
        profile,
        module,
        argv: command.to_vec(),
        extra_env: extra_env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        echo,
    };
    let json = serde_json::to_vec(&req).map_err(|e| e.to_string())?;
    dir.write(wire::REQUEST_FILE, &json)?;
    let mut cmd = Command::new(&bin);
    cmd.arg("run").arg(&dir.0).env_clear();
    for k in wire::SUPERVISOR_ENV {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    let mut feed = None;
    match stdin {
        Stdin::Empty => cmd.stdin(Stdio::null()),
        Stdin::Inherit => cmd.stdin(Stdio::inherit()),
        Stdin::File(p) => {
            let f = std::fs::File::open(&p).map_err(|e| format!("--stdin {}: {e}", p.display()))?;
            cmd.stdin(f)
        }
        Stdin::Bytes(b) => {
            feed = Some(b);
            cmd.stdin(Stdio::piped())
        }
    };
    // Without echo this process's stdout may carry the Outcome itself (the server's runner):
    // nothing of the runtime's may land there.
    cmd.stdout(if echo {
        Stdio::inherit()
    } else {
        Stdio::null()
    });
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the wasm runtime {}: {e}", bin.display()))?;
    if let (Some(b), Some(mut sink)) = (feed, child.stdin.take()) {
        // A guest that stops reading is no reason to hang: the writer goes on its own.
        std::thread::spawn(move || {
            use std::io::Write;
            let _ = sink.write_all(&b);
        });
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for {}: {e}", bin.display()))?;
    let path = dir.0.join(wire::REPLY_FILE);
    let reply = std::fs::read(&path).map_err(|_| {
        format!(
            "the wasm runtime {} ended ({status}) without a result",
            bin.display()
        )
    })?;
    serde_json::from_slice::<Reply>(&reply)
        .map_err(|e| format!("the wasm runtime's result: {e}"))?
}

/// Runs a module handed over as base64 (the server's one-shot runs): the bytes go to a
/// private temporary file that the runtime's supervisor reads (and copies) first.
pub fn run_bytes(
    profile: &Profile,
    b64: &str,
    argv: &[String],
    extra_env: &BTreeMap<String, String>,
    stdin: Stdin,
) -> Result<Outcome, String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| format!("wasm: not base64: {e}"))?;
    let dir = RequestDir::new(false)?;
    let path = dir.write("module.wasm", &bytes)?;
    drop(bytes);
    run_in(&dir, profile, &path, argv, extra_env, stdin, false)
}
