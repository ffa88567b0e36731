//! One-shot runs from the server. The engine must fork from a single-threaded process, so the
//! server re-executes the cordon binary (`cordon __oneshot`) per run and hands it the request
//! on its stdin — never on the command line, where other users could read environment values.
//! (The payload's own stdin is a separate pipe the engine feeds from the request.)

use std::collections::BTreeMap;
use std::io::Write;

use cordon_policy::{Outcome, Profile};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{ErrorKind, ServiceError};
use crate::types::RunRequest;
use crate::{profile_from, Caller, Service};

/// What `cordon __oneshot` reads from its stdin.
#[derive(Debug, Serialize, Deserialize)]
pub struct OneShot {
    pub profile: Profile,
    pub argv: Vec<String>,
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    pub stdin: Option<String>,
    /// A WebAssembly module (base64) to run with `argv` as its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasm: Option<String>,
}

/// Checks a base64 WebAssembly module from a client: 400 unless it decodes and starts like
/// one. Returns its size.
pub fn check_wasm(b64: &str, network: bool) -> Result<usize, ServiceError> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| ServiceError::bad_request(format!("wasm: not base64: {e}")))?;
    // The runner reads the rest; the header is enough to refuse the wrong thing early.
    if bytes.len() < 8 || !cordon_policy::wasm::is_wasm(&bytes) {
        return Err(ServiceError::bad_request(
            "wasm: not a WebAssembly module or component (no \\0asm header)",
        ));
    }
    if network {
        return Err(ServiceError::bad_request(
            "network: a WebAssembly module has no network (WASI sockets are refused)",
        ));
    }
    Ok(bytes.len())
}

pub async fn run(svc: &Service, caller: &Caller, req: RunRequest) -> Result<Outcome, ServiceError> {
    run_in(svc, caller, req, None).await
}

/// [`run`] with `workspace`, a host directory of the server's own making, as the sandbox's
/// `/workspace` (a run of a program with files in and out: [`crate::programs`]).
pub(crate) async fn run_in(
    svc: &Service,
    caller: &Caller,
    req: RunRequest,
    workspace: Option<std::path::PathBuf>,
) -> Result<Outcome, ServiceError> {
    if req.wasm.is_some() && req.image.is_some() {
        return Err(ServiceError::bad_request(
            "image: a WebAssembly module runs without a root filesystem; send wasm or image, \
             not both",
        ));
    }
    let mut profile = profile_from(
        req.profile.as_deref(),
        req.memory.as_ref(),
        req.cpus,
        req.pids,
        req.disk.as_ref(),
        req.timeout.as_ref(),
        &req.env,
        req.network.as_ref(),
    )?;
    profile.image = req.image.clone();
    if workspace.is_some() {
        profile.workspace = workspace;
    }
    // Held until the runner is done: the image's layers must not be pruned under it.
    let _image = svc.attach_image(&mut profile, false).await?;
    svc.add_required(&mut profile);
    let argv = req.cmd.checked_argv()?;
    crate::types::check_cwd(req.cwd.as_deref())?;
    let wasm_bytes = match &req.wasm {
        Some(_) if req.cwd.is_some() => {
            return Err(ServiceError::bad_request(
                "cwd: a WebAssembly module has no working directory to set",
            ))
        }
        Some(b64) => Some(check_wasm(b64, profile.network.is_enabled())?),
        None => None,
    };
    svc.audit.record(
        "run",
        &caller.key_id,
        None,
        json!({"argv0": argv.first(), "args": argv.len(), "env_keys": req.env.keys().collect::<Vec<_>>(), "wasm_bytes": wasm_bytes}),
    );
    let request = OneShot {
        profile,
        argv,
        cwd: req.cwd,
        env: BTreeMap::new(),
        stdin: req.stdin,
        wasm: req.wasm,
    };
    execute(svc, request).await
}

/// Runs one prepared request in a fresh `cordon __oneshot` runner.
pub async fn execute(svc: &Service, request: OneShot) -> Result<Outcome, ServiceError> {
    let body = serde_json::to_vec(&request).map_err(|e| ServiceError::internal(e.to_string()))?;
    let exe = svc.cfg.helper_exe.clone();
    let t0 = std::time::Instant::now();
    let out = tokio::task::spawn_blocking(move || -> std::io::Result<std::process::Output> {
        let mut child = std::process::Command::new(exe)
            .arg("__oneshot")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        // The runner reads the whole request before it prints anything, so writing it all
        // first cannot deadlock against a full stdout pipe. A runner that stops reading has
        // failed, and says why on stderr: it is waited for and reported like any failure.
        if let Some(mut w) = child.stdin.take() {
            let _ = w.write_all(&body);
        }
        child.wait_with_output()
    })
    .await
    .map_err(|e| ServiceError::internal(e.to_string()))?
    .map_err(|e| ServiceError::internal(format!("starting the one-shot runner: {e}")))?;
    svc.metrics
        .observe_exec(t0.elapsed().as_secs_f64() * 1000.0);
    if !out.status.success() {
        let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(ServiceError::new(
            ErrorKind::Internal,
            "run_failed",
            if msg.is_empty() {
                format!("the runner exited with {}", out.status)
            } else {
                msg
            },
        ));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| ServiceError::internal(format!("the runner's outcome did not parse: {e}")))
}
