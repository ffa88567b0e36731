//! `cordon-wasm`: cordon's WebAssembly runtime as a binary of its own, so that wasmtime and
//! Cranelift stay out of the `cordon` binary (its size and its cold start) and out of its
//! whole-program-optimised build. `cordon run -- MODULE`, the server's one-shot runs and MCP's
//! `run_wasm` start it (found beside `cordon`, then on PATH):
//!
//! - `cordon-wasm run DIR`: the supervisor. Reads `DIR/request.json` (a
//!   `cordon_policy::wasm::Request`), forks the confined runtime (see `cordon_wasm::confined`),
//!   looks the module's compiled code up in the cache (the HMAC key is read after the fork and
//!   stays in this process), hands the runtime its spec, and writes the Outcome to
//!   `DIR/reply.json`. The guest's stdin is this process's stdin.
//! - `cordon-wasm --version`.

use std::path::Path;
use std::process::ExitCode;

use cordon_policy::wasm::{Reply, Request, REPLY_FILE, REQUEST_FILE};
use cordon_wasm::cache;
use cordon_wasm::confined::{self, Stdin};

/// cordon's own failure (as `cordon run` exits).
const FAILED: u8 = 125;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("run") => match args.get(2) {
            Some(dir) => supervise(Path::new(dir)),
            None => {
                eprintln!("cordon-wasm: run needs the request's directory");
                ExitCode::from(FAILED)
            }
        },
        Some("--version" | "-V") => {
            println!("cordon-wasm {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!(
                "cordon-wasm: cordon's WebAssembly runtime, started by cordon itself \
                 (cordon run -- MODULE.wasm); usage: cordon-wasm run DIR | --version"
            );
            ExitCode::from(FAILED)
        }
    }
}

fn supervise(dir: &Path) -> ExitCode {
    let reply: Reply = run(dir);
    let written = serde_json::to_vec(&reply)
        .map_err(|e| e.to_string())
        .and_then(|b| std::fs::write(dir.join(REPLY_FILE), b).map_err(|e| e.to_string()));
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cordon-wasm: writing the reply: {e}");
            ExitCode::from(FAILED)
        }
    }
}

fn run(dir: &Path) -> Reply {
    let path = dir.join(REQUEST_FILE);
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let req: Request =
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    confined::run(confined::Request {
        profile: &req.profile,
        module: &req.module,
        argv: req.argv,
        extra_env: req.extra_env,
        stdin: Stdin::Inherit,
        echo: req.echo,
        cache_dir: cache::default_dir(),
    })
    .map_err(|e| e.to_string())
}
