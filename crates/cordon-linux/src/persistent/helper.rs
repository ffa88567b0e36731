//! The helper process (`cordon __sandbox`): this sandbox's single-threaded supervisor. It
//! launches the sandbox, then routes requests from the server down to the init and events
//! (with their fds) back up, and keeps each command's kill and accounting domain. In learn
//! mode one thread of its own (started once the sandbox is up: nothing is forked after)
//! records the programs executed and the host files asked for (see `exec_learn`).

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

use super::{CommandUsage, FromHelper, ToHelper, CONTROL_FD, SETUP_TIMEOUT};
use crate::channel::{Channel, ToSandbox, ToSupervisor};
use crate::init::Stdio;
use crate::launcher::{prepare, spawn_init};
use crate::setup_heard::SetupHeard;
use crate::sys;

/// The helper's view of one running command.
struct HelperCommand {
    cgroup: Option<crate::cgroup::Cgroup>,
    /// The init said it started (until then, an exec failure is its end).
    started: bool,
    /// Without a cgroup: the init's latest samples (peak pids, samples at the limit).
    sampled: (u64, u64),
    cpu_time_exceeded: bool,
    /// A scratch filesystem was seen full (blocks, inodes) while the command ran.
    disk_full: bool,
    inodes_exhausted: bool,
    /// A usage question waits for the init's next sample.
    asked: bool,
}

impl HelperCommand {
    fn usage(&self) -> CommandUsage {
        match &self.cgroup {
            Some(cg) => CommandUsage {
                peak_memory_bytes: cg.peak_memory().unwrap_or(0),
                // The sub-init is the command's cgroup's first member, not the command's.
                peak_pids: cg.peak_pids().saturating_sub(1),
                oom_kills: cg.oom_kills(),
                pids_refused: cg.pids_refused(),
                cpu_time_exceeded: self.cpu_time_exceeded,
                disk_full: self.disk_full,
                inodes_exhausted: self.inodes_exhausted,
            },
            None => CommandUsage {
                peak_pids: self.sampled.0,
                pids_refused: self.sampled.1,
                cpu_time_exceeded: self.cpu_time_exceeded,
                disk_full: self.disk_full,
                inodes_exhausted: self.inodes_exhausted,
                ..CommandUsage::default()
            },
        }
    }
}

/// Entry point of `cordon __sandbox`. Call before any thread is started.
pub fn helper_main() -> i32 {
    // SAFETY: the server starts us with the control socket on fd 3; nothing else owns it.
    let control = Channel::new(unsafe { OwnedFd::from_raw_fd(CONTROL_FD) });
    let (mut profile, env, learn) = match control.recv::<ToHelper>() {
        Ok(Some((
            ToHelper::Create {
                profile,
                env,
                learn,
            },
            _,
        ))) => (profile, env, learn),
        _ => return 2,
    };
    profile.learn_exec = learn;
    let failed = |control: &Channel, message: String, errno: Option<i32>| {
        let _ = control.send(&FromHelper::Failed { message, errno });
        1
    };
    let mut prepared = match prepare(&profile, &[], None, &env, true) {
        Ok(p) => p,
        Err(e) => return failed(&control, e.to_string(), e.errno()),
    };
    let null = |w: bool| {
        std::fs::OpenOptions::new()
            .read(!w)
            .write(w)
            .open("/dev/null")
            .map(OwnedFd::from)
    };
    let stdio = match (null(false), null(true), null(true)) {
        (Ok(stdin), Ok(stdout), Ok(stderr)) => Stdio {
            stdin,
            stdout,
            stderr,
        },
        _ => return failed(&control, "cannot open /dev/null".into(), None),
    };
    let (init_pid, chan) = match spawn_init(&mut prepared, stdio) {
        Ok(r) => r,
        Err(e) => return failed(&control, e.to_string(), e.errno()),
    };
    let mut enforcement = prepared.enforcement();
    let (host_uid, host_gid) = (prepared.plan.host_uid, prepared.plan.host_gid);
    let cgroup = prepared.cgroup.take();
    let mut domains = Domains {
        init_pid,
        reaped: false,
        cgroup,
        commands: HashMap::new(),
        command_pids: u64::from(profile.limits.pids) + 1,
        cpu_time: profile.limits.cpu_time,
        scratch: Vec::new(),
        degraded: prepared.degraded(),
        disk: None,
        volumes: Vec::new(),
        learn: profile.learn_exec,
        executed: None,
    };
    match watch_disks(&profile, prepared.run_dir.as_deref()) {
        Ok((disk, volumes)) => (domains.disk, domains.volumes) = (disk, volumes),
        Err(message) => {
            domains.kill();
            return failed(&control, message, None);
        }
    }
    let degraded = prepared.degraded().then_some(prepared.plan.network);
    let require_landlock = profile.require.contains(&cordon_policy::Layer::Landlock);

    let (mut root_fd, writable) = match await_setup(
        &chan,
        &control,
        &mut domains,
        &mut enforcement,
        degraded,
        require_landlock,
    ) {
        Ok(root) => root,
        Err(SetupEnd::ServerGone) => {
            domains.kill();
            return 1;
        }
        Err(SetupEnd::Failed(message, errno)) => {
            domains.kill();
            return failed(&control, message, errno);
        }
    };
    // Without a mount namespace the sandbox's own files are its run directory's (`/tmp`, the
    // home, `/workspace` below it, as `Plan::host_path` places them): that is the root the
    // files API resolves in. Opened here, not taken from the init.
    if let Some(dir) = &prepared.run_dir {
        root_fd = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(dir)
            .ok()
            .map(OwnedFd::from);
    }
    let Some(root_fd) = root_fd else {
        domains.kill();
        return failed(
            &control,
            "the sandbox did not hand over its root".into(),
            None,
        );
    };
    let ready = FromHelper::Ready {
        enforcement: Box::new(enforcement),
        init_pid,
        host_uid,
        host_gid,
    };
    let mut fds = vec![root_fd.as_raw_fd()];
    fds.extend(writable.as_ref().map(|w| w.as_raw_fd()));
    if control.send_with_fds(&ready, &fds).is_err() {
        domains.kill();
        return 1;
    }

    let reason = route(&control, &chan, &mut domains, init_pid);
    domains.kill();
    // Nothing of the sandbox runs any more: its run directory (no namespaces) goes before
    // the server hears that the sandbox ended.
    prepared.cleanup();
    let _ = control.send(&FromHelper::Ended { reason });
    0
}

/// The disk-watch step: each writable bind with a size cap (a volume), and without a tmpfs the
/// scratch directory against `--disk`, watched (see `DiskWatch`) while the sandbox lives.
fn watch_disks(
    profile: &cordon_policy::Profile,
    run_dir: Option<&std::path::Path>,
) -> Result<
    (
        Option<crate::watch::DiskWatch>,
        Vec<crate::watch::DiskWatch>,
    ),
    String,
> {
    let mut volumes = Vec::new();
    for b in profile.binds.iter().filter(|b| b.writable) {
        let Some(limit) = b.limit else { continue };
        let w = crate::watch::DiskWatch::open(&b.source, limit)
            .map_err(|e| format!("watching {}: {e}", b.dest.display()))?;
        volumes.push(w);
    }
    let disk = match run_dir {
        Some(dir) => Some(
            crate::watch::DiskWatch::open(dir, profile.limits.disk)
                .map_err(|e| format!("watching the scratch directory: {e}"))?,
        ),
        None => None,
    };
    Ok((disk, volumes))
}

/// Why setup did not end in a confined sandbox.
enum SetupEnd {
    /// The server hung up: nobody is left to tell.
    ServerGone,
    /// What to tell the server, and the errno of the failed call if there was one.
    Failed(String, Option<i32>),
}

/// The setup step: waits for the init's setup messages (see `SetupHeard`), bounded by
/// `SETUP_TIMEOUT` and watching the server, whose hang-up ends the wait (a helper whose server
/// is gone must not wait on). The proxy's listener goes up to the server as it comes; the
/// result is the root the init handed over (`None` without a mount namespace) and, with an
/// image, the directory of its writable layer.
fn await_setup(
    chan: &Channel,
    control: &Channel,
    domains: &mut Domains,
    enforcement: &mut cordon_policy::Enforcement,
    degraded: Option<bool>,
    require_landlock: bool,
) -> Result<(Option<OwnedFd>, Option<OwnedFd>), SetupEnd> {
    let mut heard = SetupHeard::new(true);
    let deadline = Instant::now() + SETUP_TIMEOUT;
    while !heard.confined {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(SetupEnd::Failed(
                format!(
                    "the sandbox did not finish its setup within {}s",
                    SETUP_TIMEOUT.as_secs()
                ),
                None,
            ));
        }
        let mut pfds = [
            sys::pollfd(chan.raw(), libc::POLLIN),
            // Only hang-up and errors: the server sends nothing before Ready.
            sys::pollfd(control.raw(), 0),
        ];
        if sys::poll(&mut pfds, left.as_millis().min(1000) as i32).is_err() {
            continue;
        }
        if pfds[1].revents != 0 {
            return Err(SetupEnd::ServerGone);
        }
        if pfds[0].revents == 0 {
            continue;
        }
        let (msg, fds) = match chan.recv::<ToSupervisor>() {
            Ok(Some(m)) => m,
            Ok(None) | Err(_) => {
                return Err(SetupEnd::Failed(
                    "the sandbox died during setup".into(),
                    None,
                ))
            }
        };
        // Anything else before the report is not the init's to send: ignored.
        let _ = heard.take(msg, fds, enforcement, degraded, require_landlock);
        if let Some(listener) = heard.listener.take() {
            let up = FromHelper::Sandbox(ToSupervisor::ProxyListener);
            let _ = control.send_with_fds(&up, &[listener.as_raw_fd()]);
        }
        if let Some(failure) = heard.failure.take() {
            let message = match &failure.step {
                Some(step) => format!("sandbox setup failed at {step}: {}", failure.message),
                None => failure.message,
            };
            return Err(SetupEnd::Failed(message, failure.errno));
        }
    }
    if let Some((mut kinds, mut fds)) = heard.watched.take() {
        // Learn mode's listener is answered for as long as the sandbox lives (closed, the
        // kernel would fail every exec); one sent unasked is closed, as by the one-shot
        // supervisor.
        if let Some(i) = kinds
            .iter()
            .position(|k| *k == crate::channel::Watched::ExecNotify)
        {
            kinds.remove(i);
            if i < fds.len() {
                let fd = fds.remove(i);
                if domains.learn {
                    domains.executed = Some(crate::exec_learn::serve_shared(fd));
                }
            }
        }
        domains.scratch = scratch_fds(&kinds, fds);
    }
    Ok((heard.root.take(), heard.writable.take()))
}

/// The routing step: requests down, events (with their fds) up, until either side goes away.
/// Returns why it ended.
fn route(
    control: &Channel,
    chan: &Channel,
    domains: &mut Domains,
    init_pid: libc::pid_t,
) -> String {
    let init_fd = sys::pidfd_open(init_pid).ok();
    loop {
        let mut pfds = vec![
            sys::pollfd(control.raw(), libc::POLLIN),
            sys::pollfd(chan.raw(), libc::POLLIN),
        ];
        if let Some(fd) = &init_fd {
            pfds.push(sys::pollfd(fd.as_raw_fd(), libc::POLLIN));
        }
        if sys::poll(&mut pfds, domains.tick_ms()).is_err() {
            break "poll failed".to_string();
        }
        if init_fd.is_none() {
            if let Ok(Some(_)) = sys::wait4(init_pid, true) {
                domains.reaped = true;
                break "the sandbox's init exited".to_string();
            }
        }
        if pfds.get(2).is_some_and(|p| p.revents != 0) {
            break "the sandbox's init exited".to_string();
        }
        domains.tick(chan);
        if pfds[0].revents != 0 {
            match control.recv::<ToHelper>() {
                Ok(Some((ToHelper::Exec { id, spec }, _))) => {
                    let (files, cgroup) = domains.open(id);
                    let raw: Vec<RawFd> = files.iter().map(|f| f.as_raw_fd()).collect();
                    let msg = ToSandbox::Exec { id, spec, cgroup };
                    if chan.send_with_fds(&msg, &raw).is_err() {
                        break "the sandbox stopped answering".to_string();
                    }
                }
                Ok(Some((ToHelper::Signal { id, signal }, _))) => {
                    let _ = chan.send(&ToSandbox::Signal { id, signal });
                }
                Ok(Some((ToHelper::Usage { id }, _))) => {
                    if let Some(answer) = domains.ask(id, chan) {
                        let _ = control.send(&answer);
                    }
                }
                Ok(Some((ToHelper::Executed, _))) => {
                    let _ = control.send(&domains.executed());
                }
                Ok(Some((ToHelper::Sockets { id, count }, _))) => {
                    if chan.send(&ToSandbox::Sockets { id, count }).is_err() {
                        break "the sandbox stopped answering".to_string();
                    }
                }
                Ok(Some((ToHelper::Shutdown, _))) => break "shut down".to_string(),
                Ok(Some((ToHelper::Create { .. }, _))) => {}
                // A message we cannot read is the server's bug, not a reason to kill the sandbox.
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {}
                Ok(None) | Err(_) => break "the server went away".to_string(),
            }
        }
        if pfds[1].revents != 0 {
            match chan.recv::<ToSupervisor>() {
                Ok(Some((msg, fds))) => {
                    let up = domains.route(msg);
                    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
                    if up.iter().any(|m| control.send_with_fds(m, &raw).is_err()) {
                        break "the server went away".to_string();
                    }
                }
                Ok(None) | Err(_) => break "the sandbox's init exited".to_string(),
            }
        }
    }
}

/// Learn mode's record of the programs executed and the files needed, filled by its own
/// thread.
type Executed = std::sync::Arc<std::sync::Mutex<crate::exec_learn::Learned>>;

/// The helper's side of the sandbox's kill and accounting domains: the sandbox's cgroup, and
/// one child cgroup per running command where there is a cgroup.
struct Domains {
    init_pid: libc::pid_t,
    /// Once the init is reaped its pid may be anyone's: never signal it again.
    reaped: bool,
    cgroup: Option<crate::cgroup::Cgroup>,
    commands: HashMap<u64, HelperCommand>,
    /// Learn mode was asked for, and then the programs executed (see `exec_learn`).
    learn: bool,
    executed: Option<Executed>,
    /// A command's own process limit (its sub-init is the `+ 1`).
    command_pids: u64,
    cpu_time: Option<Duration>,
    /// The sandbox's scratch tmpfs (`/tmp`, a workspace tmpfs, `/dev/shm`), opened by the
    /// init: looked at while commands run, for whether one filled up.
    scratch: Vec<OwnedFd>,
    /// No pid namespace: the init's death leaves its tree to us, the subreaper, to end.
    degraded: bool,
    /// No tmpfs: the scratch directory's usage against `--disk` (see `DiskWatch`).
    disk: Option<crate::watch::DiskWatch>,
    /// Writable binds with a size cap (volumes): their usage against it, the same way.
    volumes: Vec<crate::watch::DiskWatch>,
}

/// The scratch filesystems among the descriptors the init handed over with `Confined`, each
/// checked to be a tmpfs (what the init says is not trusted).
fn scratch_fds(kinds: &[crate::channel::Watched], fds: Vec<OwnedFd>) -> Vec<OwnedFd> {
    kinds
        .iter()
        .zip(fds)
        .filter(|(kind, fd)| {
            **kind == crate::channel::Watched::Scratch
                && rustix::fs::fstatfs(fd).is_ok_and(|st| st.f_type == libc::TMPFS_MAGIC)
        })
        .map(|(_, fd)| fd)
        .collect()
}

/// Whether any of the scratch filesystems is out of blocks, and whether any is out of
/// inodes, right now.
fn scratch_full(scratch: &[OwnedFd]) -> (bool, bool) {
    let mut full = (false, false);
    for fd in scratch {
        if let Ok(st) = rustix::fs::fstatfs(fd) {
            full.0 |= st.f_blocks > 0 && st.f_bavail == 0;
            full.1 |= st.f_files > 0 && st.f_ffree == 0;
        }
    }
    full
}

impl Domains {
    /// Kills the sandbox: the init's death takes its pid namespace along (without one, we
    /// end what it left); then the cgroups go, the commands' before the sandbox's.
    fn kill(&mut self) {
        if !std::mem::replace(&mut self.reaped, true) {
            // A paused sandbox (its server died, or stopped without thawing it) is frozen: its
            // init would never die of the kill, and the wait below would hang for ever. The
            // init is our unreaped child, so its pid is still its own.
            crate::freeze::end_frozen_of(self.init_pid);
            let _ = sys::kill(self.init_pid, libc::SIGKILL);
            let _ = sys::wait4(self.init_pid, false);
        }
        if self.degraded {
            sys::end_descendants();
        }
        for (_, mut c) in self.commands.drain() {
            if let Some(cg) = c.cgroup.as_mut() {
                cg.kill_all();
                cg.remove();
            }
        }
        if let Some(cg) = self.cgroup.as_mut() {
            cg.kill_all();
            cg.remove();
        }
    }

    /// A new command's domain: its cgroup's join files, and whether it has one. Without a
    /// cgroup for it (none on this host, or creating it failed) the command still runs; its
    /// usage then comes from the init's rusage and samples.
    fn open(&mut self, id: u64) -> (Vec<OwnedFd>, bool) {
        let cgroup = self.cgroup.as_ref().and_then(|parent| {
            let cg = parent
                .command(&format!("cmd-{id}"), self.command_pids)
                .ok()?;
            let files = cg.join_files().ok()?;
            Some((cg, files))
        });
        let (cgroup, files) = match cgroup {
            Some((cg, files)) => (Some(cg), files),
            None => (None, Vec::new()),
        };
        let has = cgroup.is_some();
        self.commands.insert(
            id,
            HelperCommand {
                cgroup,
                started: false,
                sampled: (0, 0),
                cpu_time_exceeded: false,
                disk_full: false,
                inodes_exhausted: false,
                asked: false,
            },
        );
        (files, has)
    }

    /// How long to wait for messages before the next `tick`: often while a command's cgroup
    /// needs watching (a CPU-time limit; pids peaks on kernels that keep none), else rarely.
    fn tick_ms(&self) -> i32 {
        let watch = self.commands.values().any(|c| {
            c.cgroup
                .as_ref()
                .is_some_and(|cg| self.cpu_time.is_some() || !cg.keeps_peak_pids())
        });
        if watch {
            20
        } else if !self.commands.is_empty() {
            // The scratch filesystems, while something may be filling them.
            100
        } else {
            1000
        }
    }

    /// Samples the commands' cgroups and the scratch filesystems; kills a command whose CPU
    /// time passed the limit.
    fn tick(&mut self, chan: &Channel) {
        if !self.commands.is_empty() {
            let (disk, inodes) = scratch_full(&self.scratch);
            // Without a tmpfs to fill, what runs while the usage grows past the limit ends.
            let mut over = self.disk.as_mut().is_some_and(|w| w.grew_over(false));
            for v in self.volumes.iter_mut() {
                over |= v.grew_over(false);
            }
            for (id, c) in self.commands.iter_mut() {
                c.disk_full |= disk || over;
                c.inodes_exhausted |= inodes;
                if over {
                    let _ = chan.send(&ToSandbox::Signal {
                        id: *id,
                        signal: libc::SIGKILL,
                    });
                }
            }
        }
        for (id, c) in self.commands.iter_mut() {
            let Some(cg) = c.cgroup.as_mut() else {
                continue;
            };
            cg.sample();
            let Some(limit) = self.cpu_time else {
                continue;
            };
            if c.cpu_time_exceeded {
                continue;
            }
            if let Some((u, s)) = cg.cpu_usage() {
                if Duration::from_nanos(u.saturating_add(s)) > limit {
                    c.cpu_time_exceeded = true;
                    let _ = chan.send(&ToSandbox::Signal {
                        id: *id,
                        signal: libc::SIGKILL,
                    });
                }
            }
        }
    }

    /// The programs executed and the files needed so far, as many as fit one message (a
    /// sandbox's own long paths and names must not make the answer too large to send): the
    /// programs in the first half of it, the files in a quarter.
    fn executed(&self) -> FromHelper {
        let mut paths = Vec::new();
        let mut files = Vec::new();
        if let Some(seen) = self.executed.as_ref().and_then(|s| s.lock().ok()) {
            let mut size = 0usize;
            // A name that is not UTF-8 cannot be encoded (nor be an `[exec] allow` entry).
            for p in seen.executed.iter().filter(|p| p.to_str().is_some()) {
                // Its JSON: the bytes, escapes at most x6, quotes and a comma.
                size += p.as_os_str().len() * 6 + 3;
                if size > crate::channel::MAX_MESSAGE / 2 {
                    break;
                }
                paths.push(p.clone());
            }
            let mut size = 0usize;
            for f in seen.files.values() {
                size += f.path.as_os_str().len() * 6 + f.program.len() * 6 + 64;
                if size > crate::channel::MAX_MESSAGE / 4 {
                    break;
                }
                let mut f = f.clone();
                // A path that is not UTF-8 cannot be encoded: sent as `?` (no absolute path),
                // which the learned profile counts as left out in its note.
                if f.path.to_str().is_none() {
                    f.path = "?".into();
                }
                files.push(f);
            }
        }
        FromHelper::Executed { paths, files }
    }

    /// The answer to a usage question now, or `None` when it must wait for the init's sample
    /// (no cgroup: the init counts).
    fn ask(&mut self, id: u64, chan: &Channel) -> Option<FromHelper> {
        let Some(c) = self.commands.get_mut(&id) else {
            return Some(FromHelper::Usage { id, usage: None });
        };
        if c.cgroup.is_some() {
            return Some(FromHelper::Usage {
                id,
                usage: Some(c.usage()),
            });
        }
        if chan.send(&ToSandbox::Sample { id }).is_err() {
            return Some(FromHelper::Usage {
                id,
                usage: Some(c.usage()),
            });
        }
        c.asked = true;
        None
    }

    /// What the server hears of a message from the init.
    fn route(&mut self, msg: ToSupervisor) -> Vec<FromHelper> {
        match msg {
            ToSupervisor::Started { id, .. } => {
                if let Some(c) = self.commands.get_mut(&id) {
                    c.started = true;
                }
            }
            // Refused before it started: there will be no exit report.
            ToSupervisor::ExecFailed { id, .. }
                if self.commands.get(&id).is_some_and(|c| !c.started) =>
            {
                self.commands.remove(&id);
            }
            ToSupervisor::CommandUsage {
                id,
                peak_pids,
                pids_at_limit,
            } => {
                let Some(c) = self.commands.get_mut(&id) else {
                    return Vec::new();
                };
                c.sampled = (peak_pids, pids_at_limit);
                if std::mem::take(&mut c.asked) {
                    return vec![FromHelper::Usage {
                        id,
                        usage: Some(c.usage()),
                    }];
                }
                return Vec::new();
            }
            ToSupervisor::ExecExit {
                id,
                end,
                peak_pids,
                pids_at_limit,
            } => {
                let Some(mut c) = self.commands.remove(&id) else {
                    return Vec::new();
                };
                c.sampled = (c.sampled.0.max(peak_pids), c.sampled.1.max(pids_at_limit));
                let (disk, inodes) = scratch_full(&self.scratch);
                // A short command may have grown the scratch directory past the limit
                // between two looks.
                let mut over = self.disk.as_mut().is_some_and(|w| w.grew_over(true));
                for v in self.volumes.iter_mut() {
                    over |= v.grew_over(true);
                }
                c.disk_full |= disk || over;
                c.inodes_exhausted |= inodes;
                let usage = c.usage();
                if let Some(cg) = c.cgroup.as_mut() {
                    // The init ended the command's tree; anything still in its cgroup is
                    // ended here, before the cgroup goes.
                    cg.kill_all();
                    cg.remove();
                }
                let mut up = Vec::new();
                if c.asked {
                    up.push(FromHelper::Usage {
                        id,
                        usage: Some(usage.clone()),
                    });
                }
                up.push(FromHelper::Exit { id, end, usage });
                return up;
            }
            _ => {}
        }
        vec![FromHelper::Sandbox(msg)]
    }
}
