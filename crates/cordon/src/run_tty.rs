//! `cordon run -t`: the payload on a terminal of the sandbox's own, relayed to the host's.
//!
//! The host terminal never enters the sandbox (a payload holding it could push keystrokes into
//! the host shell with TIOCSTI, CVE-2017-5226): the payload gets a pty of the sandbox's own
//! devpts, and cordon copies bytes between it and the host terminal, which it puts in raw mode
//! for the session (so ^C, ^Z and friends reach the payload's terminal as bytes) and restores
//! on every way out. The sandbox is a persistent one with a single command (the engine's path
//! for commands on a pty), ended with it.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use cordon_linux::persistent::{ExecSpec, ExitInfo, PtySize, Sandbox};
use cordon_linux::Egress;
use cordon_policy::{classify, Outcome, OutputCap, Profile};
use rustix::termios::{self, Termios};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The host terminal's settings as they were, put back when dropped (also on a panic's
/// unwinding): a terminal left raw is a broken shell for the person at it.
pub(crate) struct RawMode<'a> {
    fd: BorrowedFd<'a>,
    saved: Termios,
}

impl<'a> RawMode<'a> {
    pub(crate) fn enter(fd: BorrowedFd<'a>) -> anyhow::Result<Self> {
        let saved = termios::tcgetattr(fd).context("reading the terminal's settings")?;
        let mut raw = saved.clone();
        raw.make_raw();
        termios::tcsetattr(fd, termios::OptionalActions::Flush, &raw)
            .context("putting the terminal in raw mode")?;
        Ok(RawMode { fd, saved })
    }
}

impl Drop for RawMode<'_> {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(self.fd, termios::OptionalActions::Now, &self.saved);
    }
}

const KILL: i32 = rustix::process::Signal::KILL.as_raw();

/// What `--tty` says when stdin is not a terminal.
pub const NOT_A_TERMINAL: &str = "--tty needs a terminal on stdin (cordon relays it to the \
payload's own terminal inside the sandbox); run it from an interactive shell, or drop -t and \
pass input with --stdin FILE or --stdin -";

pub(crate) fn size_of(fd: BorrowedFd<'_>) -> PtySize {
    match termios::tcgetwinsize(fd) {
        Ok(w) if w.ws_row > 0 && w.ws_col > 0 => PtySize {
            rows: w.ws_row,
            cols: w.ws_col,
        },
        _ => PtySize { rows: 24, cols: 80 },
    }
}

/// Runs `argv` on a pty in a sandbox of `profile`, relaying the host terminal on stdin and
/// stdout; the Outcome has the terminal's output (capped) as stdout.
pub fn run(profile: &Profile, argv: Vec<String>, cwd: Option<String>) -> anyhow::Result<Outcome> {
    let stdin = std::io::stdin();
    let host = stdin.as_fd();
    if !termios::isatty(host) {
        bail!(NOT_A_TERMINAL);
    }
    if argv.is_empty() {
        bail!("--tty needs a command (cordon run -t -- bash)");
    }
    let exe = std::env::current_exe().context("finding cordon's own executable")?;
    // With a network policy the sandbox's listener comes to the egress proxy, run here.
    type Slot = Arc<Mutex<Option<Result<Box<dyn Egress>, String>>>>;
    let egress: Slot = Arc::default();
    // Always (a persistent sandbox always has its listener): with the network off the proxy
    // refuses everything and says what was tried.
    let start = cordon_service::runner::egress::starter(profile)
        .map_err(|e| anyhow!("--allow-net: {e}"))?;
    let slot = egress.clone();
    let on_proxy = Some(Box::new(move |listener: std::net::TcpListener| {
        if let Ok(mut s) = slot.lock() {
            *s = Some(start(listener));
        }
    }) as cordon_linux::persistent::OnProxyListener);
    let sb = Sandbox::create(&exe, profile, &BTreeMap::new(), on_proxy)
        .map_err(|e| anyhow!("cannot create the sandbox: {e}"))?;
    let proxy = match egress.lock().ok().and_then(|mut s| s.take()) {
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => bail!("starting the egress proxy: {e}"),
        None => bail!("the sandbox did not hand over its proxy listener"),
    };
    let mut env = Vec::new();
    // The terminal's type is what programs need to draw on it; it says nothing secret.
    if let Ok(term) = std::env::var("TERM") {
        env.push(("TERM".to_string(), term));
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let started = sb
        .exec(
            ExecSpec {
                argv,
                env,
                cwd,
                pty: Some(size_of(host)),
            },
            Box::new(move |e| {
                let _ = tx.send(e);
            }),
        )
        .map_err(|e| anyhow!("cannot start the command: {e}"))?;
    let t0 = Instant::now();
    let id = started.id;
    drop(started.stdout);
    drop(started.stderr);
    let master = started.stdin;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the relay")?;
    let raw = RawMode::enter(host)?;
    let relayed = rt.block_on(relay(&sb, id, master, rx, host, profile));
    drop(raw);
    let (exit, kept, timed_out) = relayed?;
    // Learn mode: the programs the sandbox's helper recorded, asked for while it still lives.
    let executed = if profile.learn_exec {
        sb.executed().unwrap_or_default()
    } else {
        Vec::new()
    };
    sb.shutdown();
    let network = proxy.map(|p| p.finish()).unwrap_or_default();
    let mut o = outcome(&sb, profile, exit, kept, timed_out, t0.elapsed(), network);
    o.executed = executed;
    Ok(o)
}

/// Copies host stdin → pty and pty → host stdout, follows the host terminal's size, and ends
/// the command on its timeout or when cordon is told to stop (SIGTERM, SIGHUP, SIGINT, SIGQUIT).
async fn relay(
    sb: &Sandbox,
    id: u64,
    master: OwnedFd,
    mut exit_rx: tokio::sync::oneshot::Receiver<ExitInfo>,
    host: BorrowedFd<'_>,
    profile: &Profile,
) -> anyhow::Result<(ExitInfo, OutputCap, bool)> {
    use tokio::net::unix::pipe::{Receiver, Sender};
    use tokio::signal::unix::{signal, SignalKind};
    let resize = master.try_clone().context("the terminal")?;
    rustix::io::ioctl_fionbio(&master, true).context("the terminal")?;
    let reader_fd = master.try_clone().context("the terminal")?;
    // A pty master is a character device: tokio's checked constructors want a FIFO.
    let mut to_pty = Sender::from_owned_fd_unchecked(master).context("the terminal")?;
    let mut from_pty = Receiver::from_owned_fd_unchecked(reader_fd).context("the terminal")?;
    // Host stdin is read on a thread of its own: making it non-blocking would change the
    // shell's terminal too (one open file), and a blocked read ends with the process.
    let (in_tx, mut in_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let host_in = host.try_clone_to_owned().context("stdin")?;
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            match rustix::io::read(&host_in, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if in_tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut winch = signal(SignalKind::window_change()).context("SIGWINCH")?;
    let mut term = signal(SignalKind::terminate()).context("SIGTERM")?;
    let mut hup = signal(SignalKind::hangup()).context("SIGHUP")?;
    // In raw mode ^C reaches the payload as a byte; a SIGINT or SIGQUIT sent to cordon
    // itself must not end it with the terminal left raw.
    let mut int = signal(SignalKind::interrupt()).context("SIGINT")?;
    let mut quit = signal(SignalKind::quit()).context("SIGQUIT")?;
    let mut kept = OutputCap::new(profile.limits.output_limit);
    let deadline = tokio::time::Instant::now() + profile.limits.timeout;
    let mut out = std::io::stdout().lock();
    let mut buf = [0u8; 16 * 1024];
    let mut open = true;
    let mut in_open = true;
    let mut exit: Option<ExitInfo> = None;
    let mut timed_out = false;
    let mut grace = deadline;
    while open || exit.is_none() {
        tokio::select! {
            r = from_pty.read(&mut buf), if open => match r {
                // EIO: every holder of the terminal's slave is gone.
                Ok(0) | Err(_) => open = false,
                Ok(n) => {
                    kept.push(&buf[..n]);
                    let _ = out.write_all(&buf[..n]).and_then(|_| out.flush());
                }
            },
            d = in_rx.recv(), if in_open => match d {
                Some(d) => { let _ = to_pty.write_all(&d).await; }
                None => in_open = false,
            },
            _ = winch.recv() => {
                let s = size_of(host);
                let _ = termios::tcsetwinsize(&resize, termios::Winsize {
                    ws_row: s.rows, ws_col: s.cols, ws_xpixel: 0, ws_ypixel: 0,
                });
            },
            _ = term.recv() => sb.signal(id, KILL),
            _ = hup.recv() => sb.signal(id, KILL),
            _ = int.recv() => sb.signal(id, KILL),
            _ = quit.recv() => sb.signal(id, KILL),
            r = &mut exit_rx, if exit.is_none() => {
                exit = Some(r.unwrap_or_else(|_| ExitInfo {
                    sandbox_ended: Some("the sandbox ended".into()),
                    ..ExitInfo::default()
                }));
                // Background children may hold the terminal: a moment for the last output.
                grace = (tokio::time::Instant::now() + Duration::from_millis(200)).min(deadline);
            },
            _ = tokio::time::sleep_until(grace), if exit.is_some() => open = false,
            _ = tokio::time::sleep_until(deadline), if !timed_out => {
                timed_out = true;
                sb.signal(id, KILL);
                if exit.is_none() {
                    exit = Some(
                        tokio::time::timeout(Duration::from_secs(5), &mut exit_rx)
                            .await
                            .ok()
                            .and_then(Result::ok)
                            .unwrap_or(ExitInfo { signal: Some(KILL), ..ExitInfo::default() }),
                    );
                }
                open = false;
            },
        }
    }
    Ok((exit.unwrap_or_default(), kept, timed_out))
}

fn outcome(
    sb: &Sandbox,
    profile: &Profile,
    exit: ExitInfo,
    kept: OutputCap,
    timed_out: bool,
    wall: Duration,
    network: Vec<cordon_policy::NetworkEvent>,
) -> Outcome {
    let facts = exit.end_facts(timed_out, kept.truncated());
    let usage = exit.usage(wall);
    let mut o = Outcome::from_ending(
        classify(&facts),
        kept.finish(),
        OutputCap::new(0).finish(),
        usage,
        sb.enforcement.clone(),
        network,
    );
    o.image = profile
        .root_image
        .as_ref()
        .map(|i| cordon_policy::ImageRef {
            reference: i.reference.clone(),
            digest: i.digest.clone(),
        });
    o
}
