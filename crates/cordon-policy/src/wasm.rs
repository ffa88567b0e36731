//! What a front end (`cordon run`, the server's one-shot runner) hands the separate
//! `cordon-wasm` binary, and what it gets back. Data only: the binary that runs modules (and
//! links wasmtime and Cranelift) is found and started by the caller; nothing here needs it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{Outcome, Profile};

/// The binary that runs WebAssembly modules, installed beside `cordon`.
pub const BINARY: &str = "cordon-wasm";
/// Names the `cordon-wasm` binary to use instead of looking for it (tests, unusual installs).
pub const BINARY_ENV: &str = "CORDON_WASM_BIN";
/// The request file in the directory given to `cordon-wasm run DIR`.
pub const REQUEST_FILE: &str = "request.json";
/// The reply file `cordon-wasm run DIR` writes there: a [`Reply`].
pub const REPLY_FILE: &str = "reply.json";

/// The only variables `cordon-wasm run` is started with (its runtime is a fork of it and must
/// not inherit the caller's environment): where its compiled-code cache and its temporary
/// directories go. `Pass` entries of the request's profile are resolved by the caller.
pub const SUPERVISOR_ENV: [&str; 5] = [
    "CORDON_WASM_CACHE",
    "XDG_CACHE_HOME",
    "HOME",
    "XDG_RUNTIME_DIR",
    "TMPDIR",
];

/// The first bytes of every WebAssembly binary (module or component).
pub const MAGIC: [u8; 4] = *b"\0asm";

/// Whether `head` (a file's first bytes) starts like a WebAssembly binary.
pub fn is_wasm(head: &[u8]) -> bool {
    head.starts_with(&MAGIC)
}

/// One module run: what `cordon run -- MODULE` asks of `cordon-wasm`. The guest's stdin is
/// the binary's own stdin, and with `echo` its output goes live to the binary's stdout and
/// stderr. The file carrying it is private (0600 in a 0700 directory): `extra_env` values may
/// be secrets, and the binary's argv is readable by every user.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub profile: Profile,
    /// The module on this host.
    pub module: PathBuf,
    /// The guest's argv; `argv[0]` is the name the user gave.
    pub argv: Vec<String>,
    /// Environment on top of the profile's (whose pass-through entries the caller resolves:
    /// the binary gets only [`SUPERVISOR_ENV`]).
    pub extra_env: Vec<(String, String)>,
    /// Echo the guest's output live (what is kept is capped either way).
    pub echo: bool,
}

/// What `cordon-wasm run` writes back: the Outcome, or why there is none.
pub type Reply = Result<Outcome, String>;
