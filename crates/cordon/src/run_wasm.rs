//! `cordon run` of a WebAssembly module: which backend, and cordon-wasm's confined runtime.

use std::io::Read;
use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use cordon_policy::{Outcome, Profile};
use cordon_wasm::cache::{self, Cache};
use cordon_wasm::confined::{self, Stdin};

use crate::sandbox_args::BackendChoice;

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
        && cordon_wasm::is_wasm(&head)
}

/// The module to run in the wasm backend, or `None` for a process run.
pub fn module_for(
    choice: BackendChoice,
    command: &[String],
    profile: &Profile,
) -> Result<Option<PathBuf>, String> {
    let Some(cmd) = command.first() else {
        return Ok(None);
    };
    match choice {
        BackendChoice::Process => Ok(None),
        BackendChoice::Auto => Ok(host_file(cmd, profile).filter(|p| starts_like_wasm(p))),
        BackendChoice::Wasm => {
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

/// Runs `module` in the confined wasm runtime (see `cordon_wasm::confined`).
pub fn run(
    profile: &Profile,
    module: &Path,
    command: &[String],
    extra_env: &BTreeMap<String, String>,
    stdin: Stdin,
    echo: bool,
) -> Result<Outcome, String> {
    if profile.network.is_enabled() {
        return Err(
            "--allow-net: a WebAssembly module has no network (WASI sockets are refused), so \
             an egress allowlist cannot apply; run it without --allow-net"
                .into(),
        );
    }
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find cordon's own binary to run the wasm runtime: {e}"))?;
    let cache = match cache::default_dir().map(|d| Cache::open(&d)) {
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => {
            eprintln!("cordon: {e}; compiling without a cache");
            None
        }
        None => None,
    };
    confined::run(confined::Request {
        profile,
        module,
        argv: command.to_vec(),
        extra_env: extra_env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        stdin,
        echo,
        exe: &exe,
        cache,
    })
    .map_err(|e| e.to_string())
}

/// Runs a module handed over as base64 (the server's one-shot runs): the bytes go to a
/// private temporary file that `run` reads (and copies) first.
pub fn run_bytes(
    profile: &Profile,
    b64: &str,
    argv: &[String],
    extra_env: &BTreeMap<String, String>,
    stdin: Stdin,
) -> Result<Outcome, String> {
    use base64::Engine;
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| format!("wasm: not base64: {e}"))?;
    let dir = std::env::temp_dir().join(format!(
        "cordon-wasm-upload-{}-{}",
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
    let path = dir.join("module.wasm");
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(&bytes));
    let ran = written
        .map_err(|e| format!("{}: {e}", path.display()))
        .and_then(|()| run(profile, &path, argv, extra_env, stdin, false));
    let _ = std::fs::remove_dir_all(&dir);
    ran
}

/// `cordon __wasm SPEC`: the runtime inside the sandbox.
pub fn inner_main() -> i32 {
    match std::env::args().nth(2) {
        Some(spec) => confined::inner_main(&spec),
        None => {
            eprintln!("cordon: __wasm needs its spec");
            cordon_policy::outcome::exit::CORDON_FAILED
        }
    }
}
