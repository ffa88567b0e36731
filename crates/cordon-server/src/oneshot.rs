//! One-shot runs from the server. The engine must fork from a single-threaded process, so the
//! server re-executes the cordon binary (`cordon __oneshot`) per run and hands it the request
//! on fd 3 — never on the command line, where other users could read environment values.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;

use cordon_policy::{Outcome, Profile};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::ApiError;
use crate::service::{profile_from, Caller, Service};
use crate::types::RunRequest;

/// What `cordon __oneshot` reads from fd 3.
#[derive(Debug, Serialize, Deserialize)]
pub struct OneShot {
    pub profile: Profile,
    pub argv: Vec<String>,
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    pub stdin: Option<String>,
}

pub const REQUEST_FD: i32 = 3;

pub async fn run(svc: &Service, caller: &Caller, req: RunRequest) -> Result<Outcome, ApiError> {
    let profile = profile_from(
        req.profile.as_deref(),
        req.memory.as_ref(),
        req.cpus,
        req.pids,
        req.disk.as_ref(),
        req.timeout.as_ref(),
        &req.env,
        req.network.as_ref(),
    )?;
    let argv = req.cmd.checked_argv()?;
    crate::types::check_cwd(req.cwd.as_deref())?;
    svc.audit.record(
        "run",
        &caller.key_id,
        None,
        json!({"argv0": argv.first(), "args": argv.len(), "env_keys": req.env.keys().collect::<Vec<_>>()}),
    );
    let request = OneShot {
        profile,
        argv,
        cwd: req.cwd,
        env: BTreeMap::new(),
        stdin: req.stdin,
    };
    let body = serde_json::to_vec(&request).map_err(|e| ApiError::internal(e.to_string()))?;
    let exe = svc.cfg.helper_exe.clone();
    let t0 = std::time::Instant::now();
    let out = tokio::task::spawn_blocking(move || -> std::io::Result<std::process::Output> {
        let (r, w) = std::io::pipe()?;
        let r: OwnedFd = r.into();
        let raw = r.as_raw_fd();
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("__oneshot").stdin(std::process::Stdio::null());
        // SAFETY: only dup2 (async-signal-safe) runs between fork and exec; it also clears
        // FD_CLOEXEC on fd 3 so the request pipe, and nothing else, is inherited.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(raw, REQUEST_FD) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        drop(r);
        let mut w = w;
        w.write_all(&body)?;
        drop(w);
        child.wait_with_output()
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::internal(format!("starting the one-shot runner: {e}")))?;
    svc.metrics
        .observe_exec(t0.elapsed().as_secs_f64() * 1000.0);
    if !out.status.success() {
        let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(ApiError::new(
            500,
            "run_failed",
            if msg.is_empty() {
                format!("the runner exited with {}", out.status)
            } else {
                msg
            },
        ));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| ApiError::internal(format!("the runner's outcome did not parse: {e}")))
}
