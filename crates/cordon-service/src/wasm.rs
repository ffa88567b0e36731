//! WebAssembly modules in a persistent sandbox: a command whose program is a module (a file in
//! the sandbox that starts with `\0asm`) runs in the confined wasm runtime, as `cordon run --
//! MODULE` does, with the sandbox's `/workspace` as its own. A process could not run it: the
//! sandbox's kernel has no loader for it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use cordon_linux::fsview::{as_sandbox_user, FsError, SandboxFs};
use cordon_policy::Outcome;
use serde_json::json;
use tokio::sync::mpsc;

use super::exec::ExecEvent;
use super::{Caller, Live, Service};
use crate::error::ServiceError;
use crate::files::fs_error;
use crate::oneshot::OneShot;
use crate::types::ExecRequest;

/// A module found in the sandbox: its path there, its bytes, and the sandbox's workspace
/// directory it will see as its own.
pub(super) struct SandboxModule {
    path: String,
    bytes: Vec<u8>,
    workspace: OwnedFd,
}

/// Where `argv0` is in the sandbox if it may name a module there: a name ending in `.wasm`,
/// a relative path (against the command's working directory), or a path in `/workspace`.
/// Other programs — bare names (a process's `PATH` lookup) and absolute paths elsewhere
/// (`/bin/sh`, `/usr/bin/python3`) — are never looked at: no file read on the way of every
/// command.
fn candidate(argv0: &str, cwd: Option<&str>) -> Option<String> {
    let wasm_name = argv0.ends_with(".wasm");
    if argv0.starts_with('/') {
        return (wasm_name || argv0.starts_with("/workspace/")).then(|| argv0.to_string());
    }
    if argv0.contains('/') || wasm_name {
        let dir = cwd.unwrap_or("/workspace").trim_end_matches('/');
        return Some(format!("{dir}/{argv0}"));
    }
    None
}

impl Service {
    /// The module `argv0` names, read as the sandbox's own user, if that file is one.
    /// Anything else (no such file, a directory, an ELF, a script) is the process's to run or
    /// to refuse, as before.
    pub(super) async fn module_in_sandbox(
        &self,
        live: &Arc<Live>,
        argv0: &str,
        cwd: Option<&str>,
    ) -> Result<Option<SandboxModule>, ServiceError> {
        let Some(path) = candidate(argv0, cwd) else {
            return Ok(None);
        };
        let owner = (live.sandbox.host_uid, live.sandbox.host_gid);
        let root = live
            .sandbox
            .root_dir()
            .map_err(|e| ServiceError::internal(format!("sandbox root: {e}")))?;
        let max = self.cfg.max_upload;
        let keep = live.clone();
        let found = tokio::task::spawn_blocking(move || {
            let _live = keep;
            as_sandbox_user(owner, move || {
                use std::io::Read;
                let fs = SandboxFs::from_root_fd(root, owner)?;
                let Ok((mut file, meta)) = fs.open_read(&path) else {
                    return Ok(None);
                };
                let mut head = [0u8; 4];
                if file.read_exact(&mut head).is_err() || !cordon_policy::wasm::is_wasm(&head) {
                    return Ok(None);
                }
                let too_large = || FsError::TooLarge {
                    path: path.clone(),
                    detail: format!("a module larger than the server's limit of {max} bytes"),
                };
                if meta.len() > max {
                    return Err(too_large());
                }
                // The rest from the file already open: the bytes run are those of the file
                // whose header was checked, not of whatever the path names a moment later.
                let mut bytes = head.to_vec();
                (&mut file)
                    .take(max.saturating_add(1).saturating_sub(head.len() as u64))
                    .read_to_end(&mut bytes)
                    .map_err(|e| FsError::from_io(e, &path))?;
                if bytes.len() as u64 > max {
                    return Err(too_large());
                }
                // Resolved inside the sandbox's root and checked to be its user's: the host
                // runtime never walks a path the sandbox could have pointed elsewhere.
                let workspace = fs.own_dir("/workspace")?;
                Ok(Some(SandboxModule {
                    path,
                    bytes,
                    workspace,
                }))
            })?
        })
        .await
        .map_err(|e| ServiceError::internal(e.to_string()))?
        .map_err(fs_error)?;
        Ok(found)
    }

    /// Runs `module` to completion in a fresh confined wasm runtime: the sandbox's limits
    /// (memory, output, CPU time), this command's timeout, environment and stdin, and the
    /// sandbox's `/workspace` preopened read-write at `/workspace` — what the module writes
    /// there, the sandbox's processes see. No network (a module has no sockets) and none of
    /// the sandbox's other files.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn exec_wasm(
        &self,
        caller: &Caller,
        live: &Arc<Live>,
        module: SandboxModule,
        argv: Vec<String>,
        req: &ExecRequest,
        timeout: Duration,
        events: Option<mpsc::Sender<ExecEvent>>,
    ) -> Result<Outcome, ServiceError> {
        super::exec::refuse_if_paused(live)?;
        self.audit.record(
            "sandbox.exec",
            &caller.key_id,
            Some(&live.id),
            json!({"argv0": argv.first(), "args": argv.len(), "env_keys": req.env.keys().collect::<Vec<_>>(), "timeout_ms": timeout.as_millis() as u64, "wasm": module.path, "wasm_bytes": module.bytes.len()}),
        );
        let mut profile = live.profile.clone();
        profile.network = Default::default();
        profile.limits.timeout = timeout;
        // The sandbox's workspace as this server holds it open (until the run is over): the
        // runner and the runtime are this server's children, of its uid, and may follow its
        // descriptors (the sandbox's init, another user namespace's and not dumpable, refuses
        // a rootless server its `/proc/PID/root`). The link names that very directory: nothing
        // is resolved by path on the host. The runtime opens it before it drops its
        // privileges and confines itself (cordon_wasm::confined).
        let SandboxModule {
            bytes, workspace, ..
        } = module;
        profile.workspace = Some(PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            workspace.as_raw_fd()
        )));
        profile.binds.clear();
        profile.hide.clear();
        profile.image = None;
        profile.root_image = None;
        let run = OneShot {
            profile,
            argv,
            cwd: None,
            env: req.env.clone(),
            stdin: req.stdin.clone(),
            wasm: Some(base64::engine::general_purpose::STANDARD.encode(&bytes)),
        };
        drop(bytes);
        let outcome = crate::oneshot::execute(self, run).await;
        drop(workspace);
        let outcome = outcome?;
        if let Some(tx) = events {
            // What the module printed, in one piece each: the runtime hands it back when the
            // module has ended.
            for (text, ev) in [
                (
                    &outcome.stdout,
                    ExecEvent::Stdout as fn(Vec<u8>) -> ExecEvent,
                ),
                (&outcome.stderr, ExecEvent::Stderr),
            ] {
                if !text.is_empty() {
                    let _ = tx.send(ev(text.clone().into_bytes())).await;
                }
            }
            let _ = tx.send(ExecEvent::Exit(Box::new(outcome.clone()))).await;
        }
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::candidate;

    #[test]
    fn only_paths_and_wasm_names_are_looked_at() {
        assert_eq!(
            candidate("/opt/t.wasm", None).as_deref(),
            Some("/opt/t.wasm")
        );
        assert_eq!(
            candidate("./t.wasm", None).as_deref(),
            Some("/workspace/./t.wasm")
        );
        assert_eq!(
            candidate("t.wasm", Some("/tmp/")).as_deref(),
            Some("/tmp/t.wasm")
        );
        assert_eq!(
            candidate("bin/tool", Some("/srv")).as_deref(),
            Some("/srv/bin/tool")
        );
        assert_eq!(candidate("python3", None), None);
        assert_eq!(candidate("/bin/sh", None), None);
        assert_eq!(
            candidate("/workspace/tool", None).as_deref(),
            Some("/workspace/tool")
        );
    }
}
