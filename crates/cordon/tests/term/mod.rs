//! A terminal a test opens for cordon (a host pty whose slave is cordon's controlling
//! terminal, as in an interactive shell): what it shows, its modes, and cordon's exit.
#![allow(dead_code)] // each test crate uses a different part

use std::io::Read;
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::pty::OpenptFlags;
use rustix::termios::{self, LocalModes, Winsize};

pub struct HostTerm {
    pub master: std::fs::File,
    pub slave: OwnedFd,
}

pub fn host_term(rows: u16, cols: u16) -> HostTerm {
    let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
    rustix::pty::grantpt(&master).expect("grantpt");
    rustix::pty::unlockpt(&master).expect("unlockpt");
    let name = rustix::pty::ptsname(&master, Vec::new()).expect("ptsname");
    let slave: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(name.to_string_lossy().as_ref())
        .expect("open the slave")
        .into();
    termios::tcsetwinsize(
        &master,
        Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )
    .expect("size");
    HostTerm {
        master: master.into(),
        slave,
    }
}

impl HostTerm {
    /// `cordon run -t ARGS` with this terminal as its controlling one.
    pub fn spawn(&self, args: &[&str]) -> Child {
        let mut all = vec!["run", "-t"];
        all.extend_from_slice(args);
        self.spawn_cordon(&all, &[])
    }

    /// `cordon ARGS` (with `envs` added) with this terminal as its controlling one, on stdin,
    /// stdout and stderr (`setsid -c` makes it so, as a login shell's terminal is).
    pub fn spawn_cordon(&self, args: &[&str], envs: &[(&str, &str)]) -> Child {
        let fd = |f: &OwnedFd| Stdio::from(f.try_clone().expect("dup"));
        Command::new("setsid")
            .args(["-w", "-c", env!("CARGO_BIN_EXE_cordon")])
            .args(args)
            .envs(envs.iter().copied())
            .stdin(fd(&self.slave))
            .stdout(fd(&self.slave))
            .stderr(fd(&self.slave))
            .spawn()
            .expect("spawn cordon")
    }

    /// What the terminal shows, until `until` appears (or the terminal goes quiet at the end).
    pub fn read_until(&mut self, until: &str) -> String {
        let s = self.try_read_until(until, Duration::from_secs(30));
        assert!(
            s.contains(until),
            "{until:?} not seen on the terminal: {s:?}"
        );
        s
    }

    /// What the terminal shows within `wait`, stopping early once `until` appears.
    pub fn try_read_until(&mut self, until: &str, wait: Duration) -> String {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline && !String::from_utf8_lossy(&all).contains(until) {
            let mut p = [rustix::event::PollFd::new(
                &self.master,
                rustix::event::PollFlags::IN,
            )];
            let ready = rustix::event::poll(
                &mut p,
                Some(&rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 100_000_000,
                }),
            )
            .unwrap_or(0);
            if ready == 0 {
                continue;
            }
            match self.master.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&all).into_owned()
    }

    pub fn modes(&self) -> LocalModes {
        termios::tcgetattr(&self.slave)
            .expect("tcgetattr")
            .local_modes
    }
}

pub fn wait(mut c: Child) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = c.try_wait().expect("wait") {
            return s.code().unwrap_or(-1);
        }
        assert!(Instant::now() < deadline, "cordon did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
}
