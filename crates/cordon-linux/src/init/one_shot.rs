//! The one-shot init's last job: wait for the payload, then end and reap everything else.

use std::os::fd::AsRawFd;

use super::{proctree, EXIT_SETUP_FAILED};
use crate::channel::{Channel, ToSandbox, ToSupervisor};
use crate::sys;

/// The message that reports how the payload ended.
fn end_message(exit: &sys::Exit) -> ToSupervisor {
    if libc::WIFSIGNALED(exit.status) {
        ToSupervisor::Signaled {
            signal: libc::WTERMSIG(exit.status),
        }
    } else {
        ToSupervisor::Exited {
            code: libc::WEXITSTATUS(exit.status),
        }
    }
}

/// One-shot: reaps orphans until the payload ends or the supervisor says stop; then ends
/// everything else in the sandbox itself, reaps it, reports the payload's end and exits.
///
/// Ending the rest here rather than leaving it to the kernel (which kills a pid namespace's
/// processes when its init exits) is what gets their CPU time counted: a process is counted
/// in its reaper's rusage, and the supervisor reads ours — the kernel's kill at our exit
/// leaves them reaped by no one.
/// `no_pid_ns`: the sandbox shares the host's pid namespace, where `kill(-1)` would reach
/// every process of our uid: the tree below us (we are its subreaper) is ended instead.
/// `count_at_end`: no kernel count keeps the peak of the sandbox's tasks; the init counts them
/// once when the payload ends (see [`ToSupervisor::TasksAtEnd`]).
pub(super) fn wait(ch: &Channel, payload: libc::pid_t, no_pid_ns: bool, count_at_end: bool) -> ! {
    let mut end: Option<ToSupervisor> = None;
    // Made after the payload is spawned, so the payload never starts with SIGCHLD blocked; an
    // exit before it is found by the first reaping pass.
    let sigchld = sys::signalfd_sigchld().ok();
    let reap = |end: &mut Option<ToSupervisor>| loop {
        match sys::wait4(-1, true) {
            Ok(Some((pid, exit))) => {
                if pid == payload && end.is_none() {
                    *end = Some(end_message(&exit));
                }
            }
            Ok(None) => return true,
            // ECHILD: nothing left to wait for.
            Err(_) => return false,
        }
    };
    loop {
        if count_at_end && end.is_none() && sys::has_ended(payload) {
            report_tasks_at_end(ch, payload);
        }
        reap(&mut end);
        if end.is_some() {
            break;
        }
        let mut pfds = [
            sys::pollfd(ch.raw(), libc::POLLIN),
            sys::pollfd(sigchld.as_ref().map_or(-1, |f| f.as_raw_fd()), libc::POLLIN),
        ];
        // Without a signalfd, look at the children every 10 ms.
        let timeout = if sigchld.is_some() { -1 } else { 10 };
        if sys::poll(&mut pfds, timeout).is_err() {
            continue;
        }
        if let Some(fd) = &sigchld {
            if pfds[1].revents != 0 {
                sys::drain_signalfd(fd);
            }
        }
        if pfds[0].revents != 0 {
            match ch.recv::<ToSandbox>() {
                Ok(Some((ToSandbox::Stop, _))) => break,
                Ok(Some(_)) => {}
                // The supervisor is gone (and our parent-death signal on its way).
                _ => sys::exit_now(EXIT_SETUP_FAILED),
            }
        }
    }
    // Everything else goes now. A process forking at this very moment is caught by the next
    // round: kill(-1) again whenever a child is reaped, until none is left.
    loop {
        if no_pid_ns {
            sys::kill_descendants(sys::getpid());
        } else {
            let _ = sys::kill_all_others(libc::SIGKILL);
        }
        if !reap(&mut end) {
            break;
        }
        let mut pfds = [sys::pollfd(
            sigchld.as_ref().map_or(-1, |f| f.as_raw_fd()),
            libc::POLLIN,
        )];
        let _ = sys::poll(&mut pfds, 10);
        if let Some(fd) = &sigchld {
            sys::drain_signalfd(fd);
        }
    }
    if let Some(msg) = end {
        let _ = ch.send(&msg);
    }
    sys::exit_now(0)
}

/// Counts the sandbox's tasks (the init not counted) while the payload's zombie is unreaped,
/// and sends the count. A payload that leaves nothing behind — the init has no other child,
/// since the payload's orphans became the init's at its exit — costs one read of the init's
/// `children` file and sends nothing: the supervisor counts the payload itself.
fn report_tasks_at_end(ch: &Channel, payload: libc::pid_t) {
    if proctree::own_children().iter().all(|&p| p == payload) {
        return;
    }
    let me = sys::getpid();
    let tasks = proctree::below(proctree::scan(), me)
        .into_iter()
        .filter(|(pid, _)| *pid != me)
        .map(|(_, p)| p.tasks)
        .sum();
    let _ = ch.send(&ToSupervisor::TasksAtEnd { tasks });
}
