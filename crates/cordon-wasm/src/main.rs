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
//! - `cordon-wasm bench-unconfined MODULE`: for `cordon bench` only. Runs the module in this
//!   process (`cordon_wasm::run`: the same engine, cache, limits and output capture) with no
//!   confinement and no runtime process: what the runtime alone costs, the floor under any
//!   confined run. Not a way to run untrusted code: nothing but WASI holds it.
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
        Some("bench-unconfined") => match args.get(2) {
            Some(module) => bench_unconfined(Path::new(module)),
            None => {
                eprintln!("cordon-wasm: bench-unconfined needs a module");
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
                 (cordon run -- MODULE.wasm); usage: cordon-wasm run DIR | bench-unconfined MODULE | --version"
            );
            ExitCode::from(FAILED)
        }
    }
}

/// The bench's floor: the module in this process, its output printed after it ends.
fn bench_unconfined(module: &Path) -> ExitCode {
    let run = || -> Result<cordon_policy::Outcome, String> {
        let profile = cordon_policy::Profile::builtin("default").map_err(|e| e.to_string())?;
        let bytes = std::fs::read(module).map_err(|e| format!("{}: {e}", module.display()))?;
        let cache = cache::default_dir()
            .map(|d| cache::Cache::open(&d))
            .transpose()
            .map_err(|e| e.to_string())?;
        cordon_wasm::run(cordon_wasm::WasmRequest {
            profile,
            module: bytes,
            argv: vec![module.display().to_string()],
            stdin: cordon_wasm::GuestStdin::Empty,
            echo: false,
            cache,
        })
        .map_err(|e| e.to_string())
    };
    match run() {
        Ok(o) => {
            print!("{}", o.stdout);
            eprint!("{}", o.stderr);
            ExitCode::from(o.exit_code.unwrap_or(FAILED as i32).clamp(0, 255) as u8)
        }
        Err(e) => {
            eprintln!("cordon-wasm: {e}");
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
