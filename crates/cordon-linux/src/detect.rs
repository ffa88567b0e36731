//! What this host can enforce, found by asking the kernel (not by reading version numbers).

use serde::Serialize;

use crate::cgroup;
use crate::sys;

/// One capability of the host and what its absence costs.
#[derive(Debug, Clone, Serialize)]
pub struct Support {
    pub name: &'static str,
    pub available: bool,
    pub detail: String,
    /// What a sandbox loses when this is missing.
    pub cost_if_missing: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    pub kernel: String,
    pub running_as_root: bool,
    pub euid: u32,
    /// Landlock ABI version, 0 when Landlock is unavailable.
    pub landlock_abi: u32,
    /// `"v1"`, `"v2"` or `"none"`.
    pub cgroup: String,
    pub features: Vec<Support>,
}

impl HostReport {
    pub fn feature(&self, name: &str) -> Option<&Support> {
        self.features.iter().find(|f| f.name == name)
    }
}

/// Landlock ABI the running kernel offers (0 if none).
pub fn landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attr, size 0 and the VERSION flag, the call only returns a number.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if ret < 0 {
        0
    } else {
        ret as u32
    }
}

fn seccomp_filter_available() -> bool {
    // Seccomp filter mode is present when /proc/self/status reports a Seccomp field and the
    // kernel accepts SECCOMP_GET_ACTION_AVAIL for an action only filter mode has.
    const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;
    let action: u32 = libc::SECCOMP_RET_ERRNO;
    // SAFETY: the pointer refers to a live u32, as SECCOMP_GET_ACTION_AVAIL expects.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_ACTION_AVAIL,
            0,
            &action as *const u32,
        )
    };
    ret == 0
}

/// Tries to create a user namespace in a throw-away child.
fn user_ns_works() -> Result<(), String> {
    // SAFETY: the child only calls unshare and _exit, both async-signal-safe.
    match unsafe { sys::fork() } {
        Err(e) => Err(format!("fork failed: {e}")),
        Ok(sys::Fork::Child) => {
            // SAFETY: async-signal-safe syscall.
            let r = unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWNET) };
            sys::exit_now(if r == 0 { 0 } else { 1 })
        }
        Ok(sys::Fork::Parent(pid)) => match sys::wait4(pid, false) {
            Ok(Some((_, exit))) if libc::WIFEXITED(exit.status) && libc::WEXITSTATUS(exit.status) == 0 => Ok(()),
            Ok(_) => Err("unshare(CLONE_NEWUSER) was refused (AppArmor, sysctl or a container's seccomp profile)".into()),
            Err(e) => Err(format!("wait failed: {e}")),
        },
    }
}

/// Probes the host. Forks once (to try a user namespace); call from a single-threaded process.
pub fn probe() -> HostReport {
    let euid = sys::geteuid();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let abi = landlock_abi();
    let userns = user_ns_works();
    let cg = cgroup::detect();
    let cg_writable = match &cg {
        Ok(layout) => {
            let probe_name = format!("{}-probe", std::process::id());
            let limits = cgroup::CgroupLimits {
                memory: 64 << 20,
                pids: 8,
                cpus: 1.0,
                cpu_time: true,
            };
            match cgroup::Cgroup::create(layout, &probe_name, &limits) {
                Ok(mut c) => {
                    c.remove();
                    Ok((layout.version(), cgroup::time_move(layout)))
                }
                Err(e) => Err(format!(
                    "{} found but not writable by uid {euid}: {e}",
                    layout.version().name()
                )),
            }
        }
        Err(e) => Err(e.clone()),
    };
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    let overlay = filesystems
        .lines()
        .any(|l| l.trim_end().ends_with("overlay"));
    let seccomp = seccomp_filter_available();
    let features = vec![
        Support {
            name: "user_ns",
            available: userns.is_ok(),
            detail: userns.clone().err().unwrap_or_else(|| {
                if euid == 0 {
                    // cordon as root creates the namespace as root, then maps it to a nobody.
                    "user namespaces work (created by root: the unprivileged setting does not matter)".into()
                } else {
                    "unprivileged user namespaces work".into()
                }
            }),
            cost_if_missing: "no private root, pid, network, ipc or uts namespace: the sandbox would see the host's files and processes and reach its network; cordon refuses to run (exit 125)",
        },
        Support {
            name: "seccomp",
            available: seccomp,
            detail: if seccomp { "seccomp filter mode available".into() } else { "seccomp filters unavailable".into() },
            cost_if_missing: "dangerous syscalls (namespace creation, mount, ptrace, bpf, io_uring, keyring…) are only held back by the other layers",
        },
        Support {
            name: "landlock",
            available: abi > 0,
            detail: if abi > 0 { format!("Landlock ABI {abi}") } else { "Landlock not enabled in this kernel (lsm= boot option)".into() },
            cost_if_missing: "file access is limited only by the mount namespace; a mount-namespace escape would reach the host filesystem",
        },
        Support {
            name: "cgroup",
            available: cg_writable.is_ok(),
            detail: match &cg_writable {
                Ok((v, Some(moved))) if *moved > std::time::Duration::from_millis(2) => format!(
                    "cgroup {} usable (memory, pids, cpu); a sandbox joining its cgroup took {:.1} ms here: \
                     the kernel waits for an RCU grace period, and every sandbox start waits once. \
                     Linux 6.17+ skips the wait for the way cordon joins; on older kernels, mounting any \
                     cgroup hierarchy with the `favordynmods` option (Linux 6.0+) removes it at a small \
                     cost to fork and exit",
                    v.name(),
                    moved.as_secs_f64() * 1000.0
                ),
                Ok((v, _)) => format!("cgroup {} usable (memory, pids, cpu)", v.name()),
                Err(e) => e.clone(),
            },
            cost_if_missing: "memory and process limits fall back to per-process rlimits: no hard memory cap for the whole tree, no CPU quota, OOM and peak memory not measured",
        },
        Support {
            name: "overlayfs",
            available: overlay,
            detail: if overlay { "overlay filesystem available".into() } else { "no overlay in /proc/filesystems".into() },
            cost_if_missing: "nothing today (cordon binds read-only system directories instead of layering)",
        },
    ];
    HostReport {
        kernel,
        running_as_root: euid == 0,
        euid,
        landlock_abi: abi,
        cgroup: cg_writable
            .map(|(v, _)| v.name().to_string())
            .unwrap_or_else(|_| "none".into()),
        features,
    }
}
