//! The persistent init: serves exec, signal and sample requests, each command under a
//! sub-init of its own (its kill and accounting domain).

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::proctree;
use super::{apply_cpu_rlimit, exec_command, fail, nproc_limit, Stdio, EXIT_SETUP_FAILED};
use crate::channel::{Channel, CommandEnd, ExecSpec, ToSandbox, ToSupervisor};
use crate::plan::Plan;
use crate::sys;

/// An unconnected, non-blocking TCP socket of this (the sandbox's) network namespace: the
/// supervisor connects it, and where it connects is this namespace's address.
fn tcp_socket() -> Result<OwnedFd, i32> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| e.raw_os_error())
}

/// Persistent sandbox: serve exec and signal requests until the supervisor goes away.
/// `in_cgroup`: the sandbox has a cgroup, and the supervisor gives each command one of its
/// own; without, the init samples `/proc` for what a cgroup would have counted.
pub(super) fn serve_loop(plan: &Plan, ch: Channel, in_cgroup: bool) -> ! {
    // Child exits arrive on a signalfd, so one poll covers requests and exits.
    let sigchld = match sys::signalfd_sigchld() {
        Ok(fd) => fd,
        Err(e) => fail(&ch, "signalfd", e),
    };
    let base_env: Vec<(Vec<u8>, Vec<u8>)> = plan
        .env
        .iter()
        .filter_map(|kv| {
            let b = kv.as_bytes();
            let eq = b.iter().position(|c| *c == b'=')?;
            Some((b[..eq].to_vec(), b[eq + 1..].to_vec()))
        })
        .collect();
    let mut cmds = Commands {
        running: HashMap::new(),
        sampling: !in_cgroup,
        nproc: nproc_limit(plan),
        last_sample: None,
    };
    loop {
        let mut pfds = [
            sys::pollfd(ch.raw(), libc::POLLIN),
            sys::pollfd(sigchld.as_raw_fd(), libc::POLLIN),
        ];
        if sys::poll(&mut pfds, cmds.poll_timeout_ms()).is_err() {
            sys::exit_now(EXIT_SETUP_FAILED);
        }
        if pfds[1].revents != 0 {
            sys::drain_signalfd(&sigchld);
            cmds.reap(&ch, &sigchld);
        }
        if cmds.sample_due() {
            cmds.sample(None);
            cmds.report(&ch, None);
        }
        if pfds[0].revents == 0 {
            continue;
        }
        let (msg, files) = match ch.recv::<ToSandbox>() {
            Ok(Some(m)) => m,
            // The supervisor is gone: our exit takes the whole sandbox with us.
            _ => sys::exit_now(0),
        };
        match msg {
            ToSandbox::Mapped | ToSandbox::Go { .. } => {}
            // Our exit takes every process of the sandbox with us.
            ToSandbox::Stop => sys::exit_now(0),
            ToSandbox::Signal { id, signal } => cmds.signal(id, signal),
            ToSandbox::Sample { id } => {
                cmds.sample(None);
                cmds.report(&ch, Some(id));
            }
            ToSandbox::Sockets { id, count } => {
                // Without a network namespace of its own, 127.0.0.1 here is the host's.
                let made = if plan.no_namespaces {
                    Err(libc::EPERM)
                } else {
                    (0..usize::from(count).min(sys::MAX_FDS))
                        .map(|_| tcp_socket())
                        .collect::<Result<Vec<OwnedFd>, i32>>()
                };
                let _ = match made {
                    Ok(fds) => {
                        let raw: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
                        ch.send_with_fds(&ToSupervisor::Sockets { id, errno: 0 }, &raw)
                    }
                    Err(errno) => ch.send(&ToSupervisor::Sockets { id, errno }),
                };
            }
            ToSandbox::Exec {
                id,
                spec:
                    ExecSpec {
                        argv,
                        env,
                        cwd,
                        pty,
                    },
                cgroup,
            } => {
                let to_c = |s: Vec<u8>| CString::new(s).ok();
                let argv: Option<Vec<CString>> =
                    argv.into_iter().map(|a| to_c(a.into_bytes())).collect();
                let mut merged = base_env.clone();
                for (k, v) in env {
                    merged.retain(|(bk, _)| *bk != k.as_bytes());
                    merged.push((k.into_bytes(), v.into_bytes()));
                }
                let envp: Option<Vec<CString>> = merged
                    .into_iter()
                    .map(|(mut k, v)| {
                        k.push(b'=');
                        k.extend(v);
                        to_c(k)
                    })
                    .collect();
                // Without a mount namespace, `/workspace` and the other scratch paths a caller
                // names are the run directory's (`plan.cwd` already is).
                let cwd = match cwd {
                    Some(c) => {
                        plan.host_path(Path::new(&std::ffi::OsString::from_vec(c.into_bytes())))
                    }
                    None => plan.cwd.clone(),
                };
                let exec_failed = |errno: i32, path: &str| {
                    let _ = ch.send(&ToSupervisor::ExecFailed {
                        id,
                        errno,
                        path: path.into(),
                        cwd: false,
                    });
                };
                let (Some(argv), Some(envp)) = (argv, envp) else {
                    exec_failed(libc::EINVAL, "argument with NUL byte");
                    continue;
                };
                if argv.is_empty() {
                    exec_failed(libc::ENOENT, "");
                    continue;
                }
                if cgroup && files.is_empty() {
                    exec_failed(libc::EIO, "no cgroup files came with the command");
                    continue;
                }
                let spec = CommandSpec {
                    id,
                    argv: &argv,
                    envp: &envp,
                    cwd: &cwd,
                    pty,
                };
                let nproc = fresh_nproc(plan, in_cgroup);
                match spawn_command(plan, &ch, &spec, files, nproc) {
                    Ok(started) => {
                        cmds.running.insert(
                            started.subinit,
                            Command {
                                id,
                                leader: started.leader,
                                started: Instant::now(),
                                peak_pids: 0,
                                pids_at_limit: 0,
                                reported: (0, 0),
                            },
                        );
                        let raw = started.pipes.each_ref().map(|f| f.as_raw_fd());
                        let _ = ch.send_with_fds(
                            &ToSupervisor::Started {
                                id,
                                pid: started.leader,
                            },
                            &raw,
                        );
                        drop(started.gate); // now the command may report an exec failure
                    }
                    Err(e) => exec_failed(e.raw_os_error().unwrap_or(libc::EIO), "spawning"),
                }
            }
        }
    }
}

/// The process limit for a command starting now, where only `RLIMIT_NPROC` holds one (no
/// user namespace, no cgroup): the kernel counts every task of the uid, so the sandbox's
/// `nproc_limit` goes on top of what the uid runs *outside* the sandbox at this moment — not
/// at the init's start, which a long-lived sandbox's other-uid neighbours have long since
/// changed. Clamped to the init's own hard limit (which the sub-init cannot exceed).
fn fresh_nproc(plan: &Plan, in_cgroup: bool) -> Option<u64> {
    if !plan.no_namespaces || in_cgroup {
        return None;
    }
    let uid_tasks = sys::tasks_of_uid(sys::geteuid());
    let ours: u64 = proctree::below(proctree::scan(), sys::getpid())
        .values()
        .map(|p| p.tasks)
        .sum();
    let want = uid_tasks.saturating_sub(ours) + nproc_limit(plan);
    Some(match sys::hard_rlimit(libc::RLIMIT_NPROC) {
        Ok(hard) => want.min(hard),
        Err(_) => want,
    })
}

/// How long the init goes on killing what an ended command left behind before it reports
/// the end anyway (a process stuck in the kernel cannot be hurried).
const SWEEP_LIMIT: Duration = Duration::from_secs(2);

/// One running command of a persistent sandbox.
struct Command {
    id: u64,
    /// The command's own process. Its sub-init leaves it unreaped when it ends, so its pid
    /// (and process group id) names nothing else until the init has reaped it.
    leader: libc::pid_t,
    started: Instant,
    /// Without a cgroup: the most tasks the samples saw in the command's tree.
    peak_pids: u64,
    /// Without a cgroup: samples that found the sandbox at its process limit while this
    /// command had the most tasks.
    pids_at_limit: u64,
    /// What was last reported of the two above.
    reported: (u64, u64),
}

/// The init's running commands, keyed by the pid of each one's sub-init.
struct Commands {
    running: HashMap<libc::pid_t, Command>,
    sampling: bool,
    nproc: u64,
    last_sample: Option<Instant>,
}

impl Commands {
    /// How often to sample without a cgroup: often while a command is young (where fork
    /// bombs go off), then rarely — a long-lived code kernel must not cost the sandbox much.
    fn sample_every(&self) -> Duration {
        let young = self
            .running
            .values()
            .any(|c| c.started.elapsed() < Duration::from_secs(2));
        Duration::from_millis(if young { 100 } else { 500 })
    }

    fn poll_timeout_ms(&self) -> i32 {
        if !self.sampling || self.running.is_empty() {
            return -1;
        }
        let every = self.sample_every();
        let waited = self.last_sample.map_or(every, |t| t.elapsed());
        every.saturating_sub(waited).as_millis() as i32
    }

    fn sample_due(&self) -> bool {
        self.sampling && !self.running.is_empty() && self.poll_timeout_ms() == 0
    }

    /// Counts every process of the sandbox and charges each to its command. `ending`: a
    /// command whose sub-init is gone; what it left behind (now the init's children) is its.
    fn sample(&mut self, ending: Option<&mut Command>) {
        self.last_sample = Some(Instant::now());
        // Without a pid namespace /proc shows the host's processes too: only ours count.
        let procs = proctree::below(proctree::scan(), sys::getpid());
        let total: u64 = procs.values().map(|p| p.tasks).sum();
        let roots: std::collections::HashSet<libc::pid_t> = self.running.keys().copied().collect();
        let by_root = proctree::tasks_by_root(&procs, &roots, sys::getpid());
        let mut counted: Vec<(&mut Command, u64)> = self
            .running
            .iter_mut()
            .map(|(sub, c)| (c, by_root.get(&Some(*sub)).copied().unwrap_or(0)))
            .collect();
        if let Some(e) = ending {
            counted.push((e, by_root.get(&None).copied().unwrap_or(0)));
        }
        let most = counted.iter().map(|(_, n)| *n).max().unwrap_or(0);
        for (c, n) in counted {
            c.peak_pids = c.peak_pids.max(n);
            // At the limit every fork fails; the likeliest to have tried is the largest.
            if total >= self.nproc && n == most && n > 0 {
                c.pids_at_limit += 1;
            }
        }
    }

    /// Sends what changed since the last report (and command `id`'s usage in any case).
    fn report(&mut self, ch: &Channel, id: Option<u64>) {
        for c in self.running.values_mut() {
            let now = (c.peak_pids, c.pids_at_limit);
            if now != c.reported || Some(c.id) == id {
                c.reported = now;
                let _ = ch.send(&ToSupervisor::CommandUsage {
                    id: c.id,
                    peak_pids: now.0,
                    pids_at_limit: now.1,
                });
            }
        }
    }

    /// Signals a command's process group; SIGKILL also ends its sub-init, so that nothing
    /// the command did to it (stopping it, say) keeps its tree alive.
    fn signal(&self, id: u64, signal: i32) {
        let Some((sub, c)) = self.running.iter().find(|(_, c)| c.id == id) else {
            return;
        };
        // The leader's pid is reserved until we reap it (see `Command::leader`), so the group
        // is the command's.
        let _ = sys::kill_group(c.leader, signal);
        let _ = sys::kill(c.leader, signal);
        if signal == libc::SIGKILL {
            let _ = sys::kill(*sub, libc::SIGKILL);
        }
    }

    /// Reaps ended sub-inits: ends what each command left behind, then reports its end.
    fn reap(&mut self, ch: &Channel, sigchld: &OwnedFd) {
        let mut queue: std::collections::VecDeque<(libc::pid_t, sys::Exit)> = Default::default();
        // Processes of an ended command that died with its sub-init (a SIGKILL for the command
        // ends both at once) come to us, and may be reaped here, before any sweep.
        let mut orphans = Leftovers::default();
        loop {
            // Asked again every round: a sweep may have consumed the wake-up of a later exit.
            while let Ok(Some((pid, exit))) = sys::wait4(-1, true) {
                if self.running.contains_key(&pid) {
                    queue.push_back((pid, exit));
                } else {
                    orphans.add(&exit);
                }
            }
            let Some((pid, exit)) = queue.pop_front() else {
                return;
            };
            let Some(mut cmd) = self.running.remove(&pid) else {
                continue;
            };
            if self.sampling {
                self.sample(Some(&mut cmd));
            }
            let mut left = self.sweep(sigchld, &mut queue);
            left.merge(std::mem::take(&mut orphans));
            let (user, system) = exit.cpu();
            let (code, signal) = if libc::WIFSIGNALED(exit.status) {
                (None, Some(libc::WTERMSIG(exit.status)))
            } else {
                (Some(libc::WEXITSTATUS(exit.status)), None)
            };
            let end = CommandEnd {
                code,
                signal,
                cpu_user_us: (user + left.user).as_micros() as u64,
                cpu_system_us: (system + left.system).as_micros() as u64,
                max_rss_kb: (exit.rusage.ru_maxrss.max(0) as u64).max(left.max_rss_kb),
            };
            let _ = ch.send(&ToSupervisor::ExecExit {
                id: cmd.id,
                end,
                // The samples may all have missed a short command; its own process it had.
                peak_pids: cmd.peak_pids.max(1),
                pids_at_limit: cmd.pids_at_limit,
            });
        }
    }

    /// Kills and reaps every child of the init that is not a running command's sub-init:
    /// what an ended command left behind (its sub-init is gone, so its orphans came to us).
    /// Each kill hands the victim's own children to us for the next round. Returns what the
    /// reaped processes used; sub-inits that end meanwhile go to `ended`.
    fn sweep(
        &self,
        sigchld: &OwnedFd,
        ended: &mut std::collections::VecDeque<(libc::pid_t, sys::Exit)>,
    ) -> Leftovers {
        let mut used = Leftovers::default();
        let deadline = Instant::now() + SWEEP_LIMIT;
        loop {
            let strays: Vec<libc::pid_t> = proctree::own_children()
                .into_iter()
                .filter(|p| !self.running.contains_key(p))
                .collect();
            if strays.is_empty() {
                return used;
            }
            for p in &strays {
                let _ = sys::kill(*p, libc::SIGKILL);
            }
            let mut reaped = false;
            while let Ok(Some((pid, exit))) = sys::wait4(-1, true) {
                reaped = true;
                if self.running.contains_key(&pid) {
                    ended.push_back((pid, exit));
                } else {
                    used.add(&exit);
                }
            }
            if Instant::now() >= deadline {
                return used;
            }
            if !reaped {
                let mut p = [sys::pollfd(sigchld.as_raw_fd(), libc::POLLIN)];
                let _ = sys::poll(&mut p, 10);
                sys::drain_signalfd(sigchld);
            }
        }
    }
}

/// What the processes an ended command left behind used (see `Commands::sweep`).
#[derive(Default)]
struct Leftovers {
    user: Duration,
    system: Duration,
    max_rss_kb: u64,
}

impl Leftovers {
    /// A reaped process: its CPU and that of the children it reaped.
    fn add(&mut self, exit: &sys::Exit) {
        let (u, s) = exit.cpu();
        self.user += u;
        self.system += s;
        self.max_rss_kb = self.max_rss_kb.max(exit.rusage.ru_maxrss.max(0) as u64);
    }

    fn merge(&mut self, other: Leftovers) {
        self.user += other.user;
        self.system += other.system;
        self.max_rss_kb = self.max_rss_kb.max(other.max_rss_kb);
    }
}

struct CommandSpec<'a> {
    id: u64,
    argv: &'a [CString],
    envp: &'a [CString],
    cwd: &'a Path,
    pty: Option<crate::channel::PtySize>,
}

/// A command just started: its sub-init and leader, our pipe ends (stdin write, stdout read,
/// stderr read), and the gate to drop once it is reported started.
struct StartedCommand {
    subinit: libc::pid_t,
    leader: libc::pid_t,
    pipes: [OwnedFd; 3],
    gate: OwnedFd,
}

/// Starts one command of a persistent sandbox under a sub-init of its own (see `subinit`).
/// `cgroup_files`: where the sub-init joins the command's cgroup, if it has one.
fn spawn_command(
    plan: &Plan,
    ch: &Channel,
    spec: &CommandSpec,
    cgroup_files: Vec<OwnedFd>,
    nproc: Option<u64>,
) -> std::io::Result<StartedCommand> {
    let (gate_r, gate_w) = sys::pipe()?;
    // On a pty the command's fds 0-2 are the slave, and the master goes back as both our
    // stdin and stdout end; stderr is then an empty pipe, at EOF once the command's end of it
    // (which it never gets) is closed below.
    let ((in_r, in_w), (out_r, out_w), (err_r, err_w)) = match spec.pty {
        None => (sys::pipe()?, sys::pipe()?, sys::pipe()?),
        // Without a mount namespace of its own, /dev/ptmx is the host's: its ptys would be
        // the host's, visible to the host's users. No terminal there.
        Some(_) if plan.no_namespaces => {
            return Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP))
        }
        Some(size) => {
            let (master, slave) = sys::open_pty(size.rows, size.cols)?;
            let slave2 = slave.try_clone()?;
            let slave3 = slave.try_clone()?;
            let master2 = master.try_clone()?;
            let (err_r, err_w) = sys::pipe()?;
            drop(err_w);
            ((slave, master), (master2, slave2), (err_r, slave3))
        }
    };
    let (pid_r, pid_w) = sys::pipe()?;
    // SAFETY: the init is single-threaded.
    match unsafe { sys::fork_retrying() }? {
        sys::Fork::Child => {
            drop((in_w, out_r, err_r, pid_r));
            let stdio = Stdio {
                stdin: in_r,
                stdout: out_w,
                stderr: err_w,
            };
            subinit(
                plan,
                ch,
                spec,
                cgroup_files,
                nproc,
                stdio,
                gate_r,
                gate_w,
                pid_w,
            )
        }
        sys::Fork::Parent(sub) => {
            // Only the sub-init may hold these: the cgroup files carry cordon's authority,
            // and a pipe end left open here would keep the command from seeing EOF.
            drop((cgroup_files, in_r, out_w, err_w, pid_w, gate_r));
            let mut b = [0u8; 4];
            let said = sys::read_exact(pid_r.as_raw_fd(), &mut b);
            let leader = i32::from_ne_bytes(b);
            if !said || leader == 0 {
                let _ = sys::kill(sub, libc::SIGKILL);
                return Err(std::io::Error::from_raw_os_error(libc::EIO));
            }
            if leader < 0 {
                // The sub-init could not start the command and exits; it is reaped as a
                // stranger (it is in no table).
                return Err(std::io::Error::from_raw_os_error(-leader));
            }
            Ok(StartedCommand {
                subinit: sub,
                leader,
                pipes: [in_w, out_r, err_r],
                gate: gate_w,
            })
        }
    }
}

/// The sub-init of one command: a subreaper, so everything the command starts stays in its
/// tree however it daemonizes, and the tree is the command's kill and accounting domain. It
/// joins the command's cgroup, starts the command, reaps whatever else ends, and when the
/// command itself ends, ends the same way at once — leaving the command unreaped, so that its
/// pid still names it — and what is left of the tree falls to the init, which kills it
/// (`Commands::sweep`). Its confinement is the init's, which the command gets unchanged.
#[allow(clippy::too_many_arguments)]
fn subinit(
    plan: &Plan,
    ch: &Channel,
    spec: &CommandSpec,
    cgroup_files: Vec<OwnedFd>,
    nproc: Option<u64>,
    stdio: Stdio,
    gate_r: OwnedFd,
    gate_w: OwnedFd,
    pid_w: OwnedFd,
) -> ! {
    let refuse = |e: std::io::Error| -> ! {
        let errno = e.raw_os_error().unwrap_or(libc::EIO).max(1);
        let _ = sys::write_all(pid_w.as_raw_fd(), &(-errno).to_ne_bytes());
        sys::exit_now(EXIT_SETUP_FAILED)
    };
    if let Err(e) = sys::set_child_subreaper() {
        refuse(e);
    }
    if let Err(e) = crate::cgroup::join(&cgroup_files) {
        refuse(e);
    }
    drop(cgroup_files);
    if let Err(e) = apply_cpu_rlimit(plan) {
        refuse(e);
    }
    if let Some(n) = nproc {
        if let Err(e) = sys::setrlimit(libc::RLIMIT_NPROC, n, n) {
            refuse(e);
        }
    }
    // SAFETY: the sub-init is single-threaded (a fork of the single-threaded init).
    let leader = match unsafe { sys::fork_retrying() } {
        Err(e) => refuse(e),
        Ok(sys::Fork::Child) => {
            // The command reports its own pid, before it can run anything: were the sub-init
            // to write it after the fork, a command that kills everything it can see
            // (`kill -9 -1`) could kill its sub-init first on a loaded host, and the init
            // would take a started command for one that failed to start.
            if sys::write_all(pid_w.as_raw_fd(), &sys::getpid().to_ne_bytes()).is_err()
                || sys::unblock_all_signals().is_err()
                || sys::dup2(stdio.stdin.as_raw_fd(), 0).is_err()
                || sys::dup2(stdio.stdout.as_raw_fd(), 1).is_err()
                || sys::dup2(stdio.stderr.as_raw_fd(), 2).is_err()
            {
                sys::exit_now(EXIT_SETUP_FAILED);
            }
            drop((stdio, gate_w, pid_w));
            exec_command(
                plan,
                ch,
                spec.id,
                spec.argv,
                spec.envp,
                spec.cwd,
                Some(gate_r),
                spec.pty.is_some(),
            )
        }
        Ok(sys::Fork::Parent(pid)) => pid,
    };
    drop((stdio, gate_r, gate_w));
    // The channel is the init's; nothing here speaks on it.
    // SAFETY: our copy of the init's fd; this process never uses it again.
    unsafe { sys::close_raw(ch.raw()) };
    // The command itself wrote its pid (above).
    drop(pid_w);
    loop {
        match sys::wait_peek() {
            Ok((pid, end)) if pid == leader => sys::exit_like(end),
            Ok((pid, _)) => {
                let _ = sys::wait4(pid, false);
            }
            // Only if the leader were not our child; it is.
            Err(_) => sys::exit_now(EXIT_SETUP_FAILED),
        }
    }
}
