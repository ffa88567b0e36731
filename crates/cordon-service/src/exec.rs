//! Commands in a sandbox: run to completion or in the background, their output under the
//! cap, stdin, signals and the timeout.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_linux::persistent::{ExecSpec, ExitInfo};
use cordon_policy::{classify, Outcome, OutputCap};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use super::network::egress_during;
use super::requests::{at_most, duration};
use super::{unix_ms, Caller, Live, Service};
use crate::error::{ErrorKind, ServiceError};
use crate::types::*;

/// A streamed piece of a running command.
#[derive(Debug, Clone)]
pub enum ExecEvent {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exit(Box<Outcome>),
}

/// A command started with `background: true`.
pub struct BgCommand {
    pub id: String,
    pub exec_id: u64,
    /// Its process id inside the sandbox (as the sandbox's own `ps` and `kill` see it).
    pub pid: i32,
    pub argv: Vec<String>,
    pub started_at_ms: u64,
    stdin: tokio::sync::Mutex<Option<tokio::net::unix::pipe::Sender>>,
    output: Mutex<(OutputCap, OutputCap)>,
    done: watch::Receiver<Option<Outcome>>,
    /// Output as it comes, for front ends that attach to a running command (E2B's
    /// `commands.connect`); a subscriber sees what is produced after it subscribed.
    events: tokio::sync::broadcast::Sender<ExecEvent>,
    /// The command's own environment and working directory, as asked (for listings).
    pub env: std::collections::BTreeMap<String, String>,
    pub cwd: Option<String>,
    /// A front end's name for it (E2B's process tag).
    pub tag: Option<String>,
    /// Its terminal (the pty master), when it runs on one: for resizing.
    pty: Option<std::os::fd::OwnedFd>,
}

impl BgCommand {
    /// Output from now on, and the outcome if the command has already ended. Subscribe
    /// before looking at the outcome: an ending between the two is then seen by one of them.
    pub fn subscribe(
        &self,
    ) -> (
        tokio::sync::broadcast::Receiver<ExecEvent>,
        watch::Receiver<Option<Outcome>>,
    ) {
        (self.events.subscribe(), self.done.clone())
    }

    /// Whether the command runs on a terminal (its stdout is the terminal's output).
    pub fn is_pty(&self) -> bool {
        self.pty.is_some()
    }

    pub fn running(&self) -> bool {
        self.done.borrow().is_none()
    }

    pub fn info(&self) -> CommandInfo {
        let (out, err) = self
            .output
            .lock()
            .map(|o| (o.0.text().text, o.1.text().text))
            .unwrap_or_default();
        let outcome = self.done.borrow().clone();
        CommandInfo {
            command_id: self.id.clone(),
            cmd: self.argv.clone(),
            running: outcome.is_none(),
            started_at_ms: self.started_at_ms,
            stdout: out,
            stderr: err,
            outcome,
        }
    }
}

/// The last [`History::KEEP`] foreground commands of a sandbox, each with the last
/// [`History::TAIL`] bytes of its stdout and stderr and its Outcome (without the output it
/// already holds): bounded, so that a busy sandbox's log costs the server at most ~256 KiB.
#[derive(Default)]
pub struct History {
    entries: std::collections::VecDeque<CommandInfo>,
    next: u64,
}

impl History {
    const KEEP: usize = 32;
    const TAIL: usize = 4096;

    fn push(&mut self, argv: Vec<String>, started_at_ms: u64, outcome: &Outcome) {
        /// The last `TAIL` bytes, cut at a character boundary.
        fn tail(s: &str) -> String {
            let mut at = s.len().saturating_sub(History::TAIL);
            while !s.is_char_boundary(at) {
                at += 1;
            }
            s[at..].to_string()
        }
        self.next += 1;
        let mut ended = outcome.clone();
        (ended.stdout, ended.stderr) = (String::new(), String::new());
        (ended.stdout_b64, ended.stderr_b64) = (None, None);
        if self.entries.len() == Self::KEEP {
            self.entries.pop_front();
        }
        self.entries.push_back(CommandInfo {
            command_id: format!("exec-{}", self.next),
            cmd: argv,
            running: false,
            started_at_ms,
            stdout: tail(&outcome.stdout),
            stderr: tail(&outcome.stderr),
            outcome: Some(ended),
        });
    }
}

/// One chunk of a command's output: kept under the cap (in the background command's copy
/// too), and streamed as far as it is kept — a stream never shows more than the Outcome.
async fn take_output(
    d: &[u8],
    keep: &mut OutputCap,
    bg: Option<&Mutex<(OutputCap, OutputCap)>>,
    is_stdout: bool,
    events: &Option<mpsc::Sender<ExecEvent>>,
) {
    let kept = keep.push(d);
    if let Some(Ok(mut o)) = bg.map(|m| m.lock()) {
        let _ = if is_stdout { o.0.push(d) } else { o.1.push(d) };
    }
    if let (Some(tx), false) = (events, kept.is_empty()) {
        let ev = if is_stdout {
            ExecEvent::Stdout(kept.to_vec())
        } else {
            ExecEvent::Stderr(kept.to_vec())
        };
        let _ = tx.send(ev).await;
    }
}

/// Reads what a pipe holds right now, without waiting for more.
async fn drain_now(
    pipe: &tokio::net::unix::pipe::Receiver,
    keep: &mut OutputCap,
    bg: Option<&Mutex<(OutputCap, OutputCap)>>,
    is_stdout: bool,
    events: &Option<mpsc::Sender<ExecEvent>>,
) {
    use std::os::fd::AsFd;
    let mut buf = [0u8; 32 * 1024];
    // Bounded: a writer that never stops must not keep us here. The read goes to the pipe
    // itself (it is non-blocking), not through tokio's readiness: on a loaded host the reactor
    // may not have seen the last write yet, and `try_read` would then report nothing.
    for _ in 0..64 {
        match rustix::io::read(pipe.as_fd(), &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => take_output(&buf[..n], keep, bg, is_stdout, events).await,
        }
    }
}

type StartedParts = (
    cordon_linux::persistent::Started,
    tokio::sync::oneshot::Receiver<ExitInfo>,
    Instant,
);

/// 409 while the sandbox is paused: it runs nothing until it is resumed.
pub(crate) fn refuse_if_paused(live: &Live) -> Result<(), ServiceError> {
    match live.sandbox.paused() {
        Some(_) => Err(ServiceError::new(
            ErrorKind::Conflict,
            "sandbox_paused",
            format!("sandbox '{}' is paused; resume it first", live.id),
        )),
        None => Ok(()),
    }
}

/// Starts a process in the sandbox (off the async threads: the helper's socket blocks) and
/// hands back its pipes and the receiver of its exit report. Commands and code kernels alike.
pub(crate) async fn spawn_exec(
    live: &Live,
    spec: ExecSpec,
) -> Result<
    (
        cordon_linux::persistent::Started,
        tokio::sync::oneshot::Receiver<ExitInfo>,
    ),
    ServiceError,
> {
    // Its init is frozen too: the command would wait for the resume, and time out first.
    refuse_if_paused(live)?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let sb = live.sandbox.clone();
    let started = tokio::task::spawn_blocking(move || {
        sb.exec(
            spec,
            Box::new(move |e| {
                let _ = tx.send(e);
            }),
        )
    })
    .await
    .map_err(|e| ServiceError::internal(e.to_string()))?
    .map_err(|e| ServiceError::new(ErrorKind::Conflict, "sandbox_unavailable", e.to_string()))?;
    Ok((started, rx))
}

async fn start(live: &Arc<Live>, spec: ExecSpec) -> Result<StartedParts, ServiceError> {
    let t0 = Instant::now();
    let (started, rx) = spawn_exec(live, spec).await?;
    Ok((started, rx, t0))
}

async fn run_in(
    live: &Arc<Live>,
    spec: ExecSpec,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
    events: Option<mpsc::Sender<ExecEvent>>,
) -> Result<Outcome, ServiceError> {
    let (stdin_pipe, output, _pty) = split(start(live, spec).await?)?;
    match stdin {
        Some(data) => {
            let mut w = stdin_pipe;
            tokio::spawn(async move {
                let _ = w.write_all(&data).await;
            });
        }
        None => drop(stdin_pipe),
    }
    // A caller that stops waiting (a cancelled MCP call, a dropped request) ends the command
    // as its timeout would: a foreground command nobody waits for must not run on unseen.
    let mut guard = KillOnDrop {
        live: live.clone(),
        exec_id: output.exec_id,
        armed: true,
    };
    let r = pump(live, output, timeout, events, None).await;
    guard.armed = false;
    r
}

/// Kills a foreground command's process group when the future running it is dropped first.
struct KillOnDrop {
    live: Arc<Live>,
    exec_id: u64,
    armed: bool,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.live.sandbox.signal(self.exec_id, libc::SIGKILL);
        }
    }
}

/// A started command's output side and exit, for `pump`.
struct Output {
    exec_id: u64,
    pid: i32,
    stdout: tokio::net::unix::pipe::Receiver,
    stderr: tokio::net::unix::pipe::Receiver,
    exit_rx: tokio::sync::oneshot::Receiver<ExitInfo>,
    t0: Instant,
    /// When it started, for the proxy's log (milliseconds since the epoch).
    started_ms: u64,
}

/// Splits a started command into the writer of its stdin, which the caller settles before
/// anything else sees the command (a background command's must be in place before its id is
/// handed out: a client may write to it at once), and the rest, for `pump`. A command on a
/// pty has the master as both its stdin and stdout end (the same code path from here on:
/// a pty master reads and writes like a pipe, and ends reading with EIO, which `pump` takes
/// for the end of the stream); a further copy of it comes back for resizing.
type Split = (
    tokio::net::unix::pipe::Sender,
    Output,
    Option<std::os::fd::OwnedFd>,
);

fn split(started: StartedParts) -> Result<Split, ServiceError> {
    use tokio::net::unix::pipe::{Receiver, Sender};
    let (st, exit_rx, t0) = started;
    let started_ms = unix_ms().saturating_sub(t0.elapsed().as_millis() as u64);
    let io = |e: std::io::Error| ServiceError::internal(format!("command pipes: {e}"));
    let is_pty = rustix::termios::isatty(&st.stdin);
    let (stdin, stdout, pty) = if is_pty {
        let resize = st.stdin.try_clone().map_err(io)?;
        // The master is a character device, not a FIFO: tokio's checked constructors refuse
        // it. Non-blocking it must be (one open file, so once is enough for both ends).
        rustix::io::ioctl_fionbio(&st.stdin, true).map_err(|e| io(e.into()))?;
        (
            Sender::from_owned_fd_unchecked(st.stdin).map_err(io)?,
            Receiver::from_owned_fd_unchecked(st.stdout).map_err(io)?,
            Some(resize),
        )
    } else {
        (
            Sender::from_owned_fd(st.stdin).map_err(io)?,
            Receiver::from_owned_fd(st.stdout).map_err(io)?,
            None,
        )
    };
    let output = Output {
        exec_id: st.id,
        pid: st.pid,
        stdout,
        stderr: Receiver::from_owned_fd(st.stderr).map_err(io)?,
        exit_rx,
        t0,
        started_ms,
    };
    Ok((stdin, output, pty))
}

/// Drains stdout/stderr under the cap, enforces the timeout, builds the Outcome.
async fn pump(
    live: &Arc<Live>,
    output: Output,
    timeout: Duration,
    events: Option<mpsc::Sender<ExecEvent>>,
    bg: Option<&BgCommand>,
) -> Result<Outcome, ServiceError> {
    let Output {
        exec_id,
        pid: _,
        stdout: mut out,
        stderr: mut err,
        exit_rx,
        t0,
        started_ms,
    } = output;
    let limit = live.profile.limits.output_limit;
    let mut so = OutputCap::new(limit);
    let mut se = OutputCap::new(limit);
    let deadline = tokio::time::Instant::now() + timeout;
    let mut timed_out = false;
    let (mut out_open, mut err_open) = (true, true);
    let mut bo = [0u8; 32 * 1024];
    let mut be = [0u8; 32 * 1024];
    let mut exit_rx = exit_rx;
    let mut exit: Option<ExitInfo> = None;
    let mut grace = deadline;
    // Read until both streams close and the command has exited (or time runs out).
    while out_open || err_open || exit.is_none() {
        tokio::select! {
            r = out.read(&mut bo), if out_open => match r {
                Ok(0) | Err(_) => out_open = false,
                Ok(n) => {
                    take_output(&bo[..n], &mut so, bg.map(|b| &b.output), true, &events).await;
                }
            },
            r = err.read(&mut be), if err_open => match r {
                Ok(0) | Err(_) => err_open = false,
                Ok(n) => {
                    take_output(&be[..n], &mut se, bg.map(|b| &b.output), false, &events).await;
                }
            },
            r = &mut exit_rx, if exit.is_none() => {
                exit = Some(r.unwrap_or_else(|_| ExitInfo { sandbox_ended: Some("the sandbox ended".into()), ..ExitInfo::default() }));
                // Background children may keep the pipes open: give output a moment, then stop.
                grace = (tokio::time::Instant::now() + Duration::from_millis(200)).min(deadline);
            },
            _ = tokio::time::sleep_until(grace), if exit.is_some() => {
                // Whatever is already in the pipes belongs to the command: take it without
                // waiting (under load the timer can win the race against ready pipes).
                if out_open {
                    drain_now(&out, &mut so, bg.map(|b| &b.output), true, &events).await;
                }
                if err_open {
                    drain_now(&err, &mut se, bg.map(|b| &b.output), false, &events).await;
                }
                out_open = false;
                err_open = false;
            },
            _ = tokio::time::sleep_until(deadline), if !timed_out => {
                timed_out = true;
                live.sandbox.signal(exec_id, libc::SIGKILL);
                // Wait briefly for the exit report, then give up on the streams.
                if exit.is_none() {
                    if let Ok(r) = tokio::time::timeout(Duration::from_secs(5), &mut exit_rx).await {
                        exit = Some(r.unwrap_or_default());
                    } else {
                        exit = Some(ExitInfo { signal: Some(libc::SIGKILL), ..ExitInfo::default() });
                    }
                }
                out_open = false;
                err_open = false;
            },
        }
    }
    let wall = t0.elapsed();
    let exit = exit.unwrap_or_default();
    let facts = exit.end_facts(timed_out, so.truncated() || se.truncated());
    let usage = exit.usage(wall);
    let network = egress_during(live, started_ms, unix_ms());
    let mut outcome = Outcome::from_ending(
        classify(&facts),
        so.finish(),
        se.finish(),
        usage,
        live.sandbox.enforcement.clone(),
        network,
    );
    outcome.image = live
        .profile
        .root_image
        .as_ref()
        .map(|i| cordon_policy::ImageRef {
            reference: i.reference.clone(),
            digest: i.digest.clone(),
        });
    if let Some(l) = &live.learning {
        l.observe(&outcome);
    }
    if let Some(tx) = &events {
        let _ = tx.send(ExecEvent::Exit(Box::new(outcome.clone()))).await;
    }
    Ok(outcome)
}

impl Service {
    fn exec_parts(
        &self,
        live: &Live,
        req: &ExecRequest,
    ) -> Result<(ExecSpec, Duration), ServiceError> {
        let argv = req.cmd.checked_argv()?;
        check_cwd(req.cwd.as_deref())?;
        check_env(&req.env)?;
        let timeout = match &req.timeout {
            Some(t) => duration(t, "timeout")?,
            None => live.profile.limits.timeout.min(
                self.cfg
                    .default_exec_timeout
                    .max(live.profile.limits.timeout),
            ),
        };
        at_most(timeout, self.cfg.max_exec_timeout, "timeout")?;
        if let Some(p) = &req.pty {
            p.check()?;
        }
        Ok((
            ExecSpec {
                argv,
                env: req.env.clone().into_iter().collect(),
                cwd: req.cwd.clone(),
                pty: req.pty.map(|p| cordon_linux::persistent::PtySize {
                    rows: p.rows,
                    cols: p.cols,
                }),
            },
            timeout,
        ))
    }

    /// Runs a command to completion; with `events`, streams its output as it comes.
    pub async fn exec(
        self: &Arc<Self>,
        caller: &Caller,
        id: &str,
        req: ExecRequest,
        events: Option<mpsc::Sender<ExecEvent>>,
    ) -> Result<Outcome, ServiceError> {
        let live = self.get_live(caller, id)?;
        let (spec, timeout) = self.exec_parts(&live, &req)?;
        if let Some(argv0) = spec.argv.first() {
            if let Some(module) = self
                .module_in_sandbox(&live, argv0, req.cwd.as_deref())
                .await?
            {
                return self
                    .exec_wasm(caller, &live, module, spec.argv, &req, timeout, events)
                    .await;
            }
        }
        self.audit.record(
            "sandbox.exec",
            &caller.key_id,
            Some(id),
            json!({"argv0": spec.argv.first(), "args": spec.argv.len(), "env_keys": req.env.keys().collect::<Vec<_>>(), "timeout_ms": timeout.as_millis() as u64}),
        );
        let argv = spec.argv.clone();
        let started_at_ms = crate::unix_ms();
        let outcome = run_in(
            &live,
            spec,
            req.stdin.map(String::into_bytes),
            timeout,
            events,
        )
        .await?;
        self.metrics.observe_exec(outcome.usage.wall_ms as f64);
        if let Ok(mut h) = live.history.lock() {
            h.push(argv, started_at_ms, &outcome);
        }
        Ok(outcome)
    }

    /// The sandbox's command log: its last foreground commands (see [`History`]) and its
    /// background commands, oldest first.
    pub fn command_log(&self, caller: &Caller, id: &str) -> Result<CommandList, ServiceError> {
        let live = self.get_live(caller, id)?;
        let mut commands = live
            .history
            .lock()
            .map(|h| h.entries.iter().cloned().collect::<Vec<_>>())
            .unwrap_or_default();
        commands.extend(self.list_commands(caller, id)?.commands);
        commands.sort_by_key(|c| c.started_at_ms);
        Ok(CommandList { commands })
    }

    pub async fn exec_background(
        self: &Arc<Self>,
        caller: &Caller,
        id: &str,
        req: ExecRequest,
    ) -> Result<CommandInfo, ServiceError> {
        if let Some(argv0) = req.cmd.checked_argv()?.first() {
            let live = self.get_live(caller, id)?;
            if self
                .module_in_sandbox(&live, argv0, req.cwd.as_deref())
                .await?
                .is_some()
            {
                return Err(ServiceError::bad_request(format!(
                    "background: {argv0} is a WebAssembly module, which runs to completion in \
                     a runtime of its own; run it without background"
                )));
            }
        }
        Ok(self.exec_attached(caller, id, req, true).await?.0.info())
    }

    /// Starts a background command and subscribes to its output before any of it is read,
    /// so the subscriber misses nothing. With `keep_stdin: false` its stdin is closed at once
    /// (a command that reads it sees end of file instead of waiting).
    pub async fn exec_attached(
        self: &Arc<Self>,
        caller: &Caller,
        id: &str,
        req: ExecRequest,
        keep_stdin: bool,
    ) -> Result<(Arc<BgCommand>, tokio::sync::broadcast::Receiver<ExecEvent>), ServiceError> {
        let live = self.get_live(caller, id)?;
        let (spec, timeout) = self.exec_parts(&live, &req)?;
        let argv = spec.argv.clone();
        let (done_tx, done_rx) = watch::channel(None);
        let cid = format!("cmd-{}", crate::keys::random_hex(6));
        let (stdin, output, pty) = split(start(&live, spec).await?)?;
        // A terminal's input is never closed: the command would see no end of file, and
        // the master is its output too.
        let keep_stdin = keep_stdin || pty.is_some();
        let limit = live.profile.limits.output_limit;
        let (events, first) = tokio::sync::broadcast::channel(1024);
        let cmd = Arc::new(BgCommand {
            id: cid.clone(),
            exec_id: output.exec_id,
            pid: output.pid,
            argv,
            started_at_ms: unix_ms(),
            stdin: tokio::sync::Mutex::new(keep_stdin.then_some(stdin)),
            output: Mutex::new((OutputCap::new(limit), OutputCap::new(limit))),
            done: done_rx,
            events,
            env: req.env.clone(),
            cwd: req.cwd.clone(),
            tag: req.tag.clone(),
            pty,
        });
        if let Ok(mut c) = live.commands.lock() {
            // Keep the table bounded: forget finished commands beyond 100.
            if c.len() >= 100 {
                let finished: Vec<String> = c
                    .iter()
                    .filter(|(_, v)| v.done.borrow().is_some())
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in finished {
                    c.remove(&k);
                }
            }
            c.insert(cid.clone(), cmd.clone());
        }
        self.audit.record(
            "sandbox.exec",
            &caller.key_id,
            Some(id),
            json!({"argv0": cmd.argv.first(), "background": true, "command_id": cid, "pty": req.pty.is_some()}),
        );
        let svc = self.clone();
        let live2 = live.clone();
        let cmd2 = cmd.clone();
        // The pump streams into a channel; a forwarder fans it out to whoever subscribed.
        let (tx, mut rx) = mpsc::channel::<ExecEvent>(64);
        let fan_out = cmd.events.clone();
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let _ = fan_out.send(ev);
            }
        });
        tokio::spawn(async move {
            let outcome = pump(&live2, output, timeout, Some(tx), Some(&cmd2)).await;
            let outcome = outcome
                .unwrap_or_else(|e| Outcome::error(e.message, live2.sandbox.enforcement.clone()));
            svc.metrics.observe_exec(outcome.usage.wall_ms as f64);
            let _ = done_tx.send(Some(outcome));
        });
        Ok((cmd, first))
    }

    /// The background commands of a sandbox, oldest first.
    pub fn background_commands(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<Vec<Arc<BgCommand>>, ServiceError> {
        let live = self.get_live(caller, id)?;
        let c = live
            .commands
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        let mut v: Vec<Arc<BgCommand>> = c.values().cloned().collect();
        v.sort_by_key(|c| (c.started_at_ms, c.exec_id));
        Ok(v)
    }

    fn command(
        &self,
        caller: &Caller,
        id: &str,
        cid: &str,
    ) -> Result<Arc<BgCommand>, ServiceError> {
        let live = self.get_live(caller, id)?;
        let c = live
            .commands
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        c.get(cid)
            .cloned()
            .ok_or_else(|| ServiceError::not_found(format!("no command '{cid}' in sandbox '{id}'")))
    }

    pub fn list_commands(&self, caller: &Caller, id: &str) -> Result<CommandList, ServiceError> {
        let live = self.get_live(caller, id)?;
        let c = live
            .commands
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        let mut commands: Vec<CommandInfo> = c.values().map(|c| c.info()).collect();
        commands.sort_by_key(|c| c.started_at_ms);
        Ok(CommandList { commands })
    }

    pub fn get_command(
        &self,
        caller: &Caller,
        id: &str,
        cid: &str,
    ) -> Result<CommandInfo, ServiceError> {
        Ok(self.command(caller, id, cid)?.info())
    }

    pub async fn wait_command(
        &self,
        caller: &Caller,
        id: &str,
        cid: &str,
        timeout: Duration,
    ) -> Result<CommandInfo, ServiceError> {
        let cmd = self.command(caller, id, cid)?;
        let mut rx = cmd.done.clone();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|o| o.is_some())).await;
        Ok(cmd.info())
    }

    pub async fn command_stdin(
        &self,
        caller: &Caller,
        id: &str,
        cid: &str,
        req: StdinRequest,
    ) -> Result<(), ServiceError> {
        self.command_input(caller, id, cid, req.data.as_bytes(), req.close)
            .await
    }

    /// Writes bytes to a background command's stdin, then closes it if `close`.
    pub async fn command_input(
        &self,
        caller: &Caller,
        id: &str,
        cid: &str,
        data: &[u8],
        close: bool,
    ) -> Result<(), ServiceError> {
        let cmd = self.command(caller, id, cid)?;
        let mut guard = cmd.stdin.lock().await;
        if let Some(w) = guard.as_mut() {
            if !data.is_empty() {
                w.write_all(data)
                    .await
                    .map_err(|e| ServiceError::conflict(format!("stdin: {e}")))?;
            }
        } else if !data.is_empty() {
            return Err(ServiceError::conflict("stdin of this command is closed"));
        }
        if close {
            *guard = None;
        }
        Ok(())
    }

    /// Resizes the terminal of a background command that runs on one (the command gets
    /// SIGWINCH from its terminal, as on a host).
    pub fn command_resize(
        &self,
        caller: &Caller,
        id: &str,
        cid: &str,
        size: PtySize,
    ) -> Result<(), ServiceError> {
        size.check()?;
        let cmd = self.command(caller, id, cid)?;
        let Some(pty) = &cmd.pty else {
            return Err(ServiceError::conflict(format!(
                "command '{cid}' does not run on a terminal (start it with a pty to resize it)"
            )));
        };
        let ws = rustix::termios::Winsize {
            ws_row: size.rows,
            ws_col: size.cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        rustix::termios::tcsetwinsize(pty, ws)
            .map_err(|e| ServiceError::conflict(format!("resizing the terminal: {e}")))?;
        Ok(())
    }

    pub fn command_signal(
        &self,
        caller: &Caller,
        id: &str,
        cid: &str,
        signal: i32,
    ) -> Result<(), ServiceError> {
        let live = self.get_live(caller, id)?;
        let cmd = self.command(caller, id, cid)?;
        live.sandbox.signal(cmd.exec_id, signal);
        self.audit.record(
            "sandbox.signal",
            &caller.key_id,
            Some(id),
            json!({"command_id": cid, "signal": signal}),
        );
        Ok(())
    }
}

/// A long-running process in a sandbox whose stdin and stdout are the caller's to speak a
/// protocol over (the gateway's upstream MCP servers). Its stderr is kept, capped, for
/// diagnostics; it lives until it exits, is signalled, or its sandbox is deleted — no timeout.
pub struct PipedProcess {
    pub exec_id: u64,
    pub stdin: tokio::net::unix::pipe::Sender,
    pub stdout: tokio::net::unix::pipe::Receiver,
    /// The last bytes it wrote to stderr (up to the profile's output limit).
    pub stderr: Arc<Mutex<OutputCap>>,
    /// Its exit, once it happens.
    pub exit: tokio::sync::oneshot::Receiver<ExitInfo>,
}

impl Service {
    /// Starts `argv` in sandbox `id` with its stdin and stdout piped to the caller.
    pub async fn exec_piped(
        self: &Arc<Self>,
        caller: &Caller,
        id: &str,
        argv: Vec<String>,
        env: std::collections::BTreeMap<String, String>,
        cwd: Option<String>,
    ) -> Result<PipedProcess, ServiceError> {
        let live = self.get_live(caller, id)?;
        let req = ExecRequest {
            cmd: Cmd::Argv(argv),
            cwd,
            env,
            stdin: None,
            timeout: None,
            background: true,
            pty: None,
            tag: None,
        };
        let (spec, _timeout) = self.exec_parts(&live, &req)?;
        self.audit.record(
            "sandbox.exec",
            &caller.key_id,
            Some(id),
            json!({"argv0": spec.argv.first(), "args": spec.argv.len(), "env_keys": req.env.keys().collect::<Vec<_>>(), "piped": true}),
        );
        let (started, exit) = spawn_exec(&live, spec).await?;
        let io = |e: std::io::Error| ServiceError::internal(format!("command pipes: {e}"));
        let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(started.stdin).map_err(io)?;
        let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(started.stdout).map_err(io)?;
        let stderr_pipe =
            tokio::net::unix::pipe::Receiver::from_owned_fd(started.stderr).map_err(io)?;
        let stderr = Arc::new(Mutex::new(OutputCap::new(live.profile.limits.output_limit)));
        let keep = stderr.clone();
        // Drained always: a server that logs to stderr must never block on a full pipe.
        tokio::spawn(async move {
            let mut pipe = stderr_pipe;
            let mut buf = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                if let Ok(mut k) = keep.lock() {
                    k.push(&buf[..n]);
                }
            }
        });
        Ok(PipedProcess {
            exec_id: started.id,
            stdin,
            stdout,
            stderr,
            exit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_keeps_the_last_commands_and_the_tail_of_their_output() {
        let mut h = History::default();
        for i in 0..(History::KEEP + 3) {
            let mut o = Outcome::error(String::new(), Default::default());
            o.stdout = format!("{i}:{}", "é".repeat(History::TAIL));
            h.push(vec![format!("cmd{i}")], i as u64, &o);
        }
        assert_eq!(h.entries.len(), History::KEEP);
        let first = &h.entries[0];
        assert_eq!(first.cmd, ["cmd3"], "the oldest went first");
        assert!(first.stdout.len() <= History::TAIL && first.stdout.ends_with('é'));
        let ended = first.outcome.as_ref().map(|o| o.stdout.len());
        assert_eq!(
            ended,
            Some(0),
            "the output is held once, not again in the Outcome"
        );
        assert_eq!(
            h.entries.back().map(|e| e.command_id.as_str()),
            Some("exec-35")
        );
    }
}
