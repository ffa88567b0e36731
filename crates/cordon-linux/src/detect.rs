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
    /// Where cordon runs (container, seccomp, AppArmor, the user-namespace sysctls).
    pub environment: Environment,
    /// Why each missing feature is missing here, and what the user can do.
    pub obstacles: Vec<Obstacle>,
    /// How a sandbox runs here: `"full"` (every layer), `"no_namespaces"` (the host refuses
    /// namespaces: Landlock, seccomp, rlimits and a delegated cgroup only, one-shot runs only;
    /// see `enforcement`), or `"none"` (cordon refuses, exit 125).
    pub mode: &'static str,
}

impl HostReport {
    pub fn feature(&self, name: &str) -> Option<&Support> {
        self.features.iter().find(|f| f.name == name)
    }
}

/// Landlock ABI the running kernel offers (0 if none).
pub fn landlock_abi() -> u32 {
    landlock_version().unwrap_or(0)
}

/// The Landlock ABI, or the errno that says why there is none: `ENOSYS` (not in this kernel),
/// `EOPNOTSUPP` (built, not enabled at boot), `EPERM` (a seccomp filter refuses it).
fn landlock_version() -> Result<u32, i32> {
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
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOSYS))
    } else {
        Ok(u32::try_from(ret).unwrap_or(0))
    }
}

fn seccomp_filter_available() -> bool {
    // Seccomp filter mode is present when the kernel accepts SECCOMP_GET_ACTION_AVAIL for an
    // action only filter mode has.
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

/// The namespaces cordon creates for a sandbox (the cgroup namespace comes later, from inside).
const SANDBOX_NAMESPACES: libc::c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS;

/// How a step of the probe went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Probe {
    Works,
    /// Refused with this errno.
    Refused(i32),
    /// Not tried (an earlier step failed).
    NotTried,
}

/// Tries, in a throw-away child, what a sandbox start needs from the kernel before anything
/// else: its namespaces (`unshare`, with cordon's flags), then — as the new pid namespace's
/// first process, in the new mount namespace — a /proc of its own. Returns how each went.
fn probe_namespaces() -> (Probe, Probe) {
    // The child's exit code: 0, the errno of a refused unshare (1-127), or 128 + the errno
    // of a refused /proc.
    const PROC_REFUSED: i32 = 128;
    // SAFETY: the child only makes async-signal-safe calls (unshare, mount, fork, wait4,
    // _exit) before it exits.
    match unsafe { sys::fork() } {
        Err(_) => (Probe::NotTried, Probe::NotTried),
        Ok(sys::Fork::Child) => {
            let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            // SAFETY: async-signal-safe syscall on this process only.
            if unsafe { libc::unshare(SANDBOX_NAMESPACES) } != 0 {
                sys::exit_now(errno().clamp(1, 127));
            }
            // SAFETY: the child is single-threaded (a fork of a single-threaded process).
            match unsafe { sys::fork() } {
                Err(_) => sys::exit_now(PROC_REFUSED + libc::EAGAIN),
                Ok(sys::Fork::Child) => {
                    let proc_ = std::path::Path::new("/proc");
                    let r = sys::mount(
                        None,
                        std::path::Path::new("/"),
                        None,
                        libc::MS_REC | libc::MS_PRIVATE,
                        None,
                    )
                    .and_then(|()| {
                        sys::mount(
                            Some(std::path::Path::new("proc")),
                            proc_,
                            Some("proc"),
                            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                            None,
                        )
                    });
                    sys::exit_now(match r {
                        Ok(()) => 0,
                        Err(e) => PROC_REFUSED + e.raw_os_error().unwrap_or(0).clamp(1, 126),
                    })
                }
                Ok(sys::Fork::Parent(pid)) => match sys::wait4(pid, false) {
                    Ok(Some((_, exit))) if libc::WIFEXITED(exit.status) => {
                        sys::exit_now(libc::WEXITSTATUS(exit.status))
                    }
                    _ => sys::exit_now(PROC_REFUSED + libc::ECHILD),
                },
            }
        }
        Ok(sys::Fork::Parent(pid)) => match sys::wait4(pid, false) {
            Ok(Some((_, exit))) if libc::WIFEXITED(exit.status) => {
                match libc::WEXITSTATUS(exit.status) {
                    0 => (Probe::Works, Probe::Works),
                    c if c < PROC_REFUSED => (Probe::Refused(c), Probe::NotTried),
                    c => (Probe::Works, Probe::Refused(c - PROC_REFUSED)),
                }
            }
            _ => (Probe::NotTried, Probe::NotTried),
        },
    }
}

/// What keeps a layer from this host, and what the user can do about it.
#[derive(Debug, Clone, Serialize)]
pub struct Obstacle {
    /// A stable name (`apparmor_userns_restriction`, `max_user_namespaces_zero`, …).
    pub id: &'static str,
    /// The feature it takes away (`user_ns`, `proc`, `landlock`, `seccomp`, `cgroup`).
    pub layer: &'static str,
    /// What was found on this host.
    pub found: String,
    /// What the user can do, each with what it costs; the first is the one to try first.
    pub fixes: Vec<Fix>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Fix {
    pub how: String,
    pub cost: String,
}

fn fix(how: impl Into<String>, cost: impl Into<String>) -> Fix {
    Fix {
        how: how.into(),
        cost: cost.into(),
    }
}

/// Where cordon runs: what `cordon check` found out about its surroundings.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Environment {
    /// `docker`, `podman`, `kubernetes`, `lxc`, `systemd-nspawn`, `container` (some runtime),
    /// or none.
    pub container: Option<String>,
    /// What gave the container away (`/.dockerenv`, `/proc/1/cgroup: …`).
    pub container_evidence: Vec<String>,
    /// `Seccomp:` of /proc/self/status: 0 none, 1 strict, 2 a filter (a container runtime's
    /// or a service manager's) that cordon and everything it starts inherit.
    pub seccomp_mode: Option<u32>,
    /// This process's AppArmor label (`unconfined`, `cordon (unconfined)`,
    /// `docker-default (enforce)`…).
    pub apparmor_label: Option<String>,
    /// The sysctls that decide user namespaces, as read (absent: not on this kernel).
    pub sysctls: std::collections::BTreeMap<String, String>,
    /// Mounts over parts of /proc (a container runtime's masks): with them, the kernel refuses
    /// a new /proc inside a user namespace.
    pub proc_covered: Vec<String>,
    /// uid 0 here, but inside a user namespace mapping fewer ids than the whole range.
    pub root_in_user_namespace: bool,
}

/// Everything the explanations are decided from: gathered by [`probe`], or written by a test.
#[derive(Debug, Clone)]
pub struct HostFacts {
    pub euid: u32,
    pub user_ns: Probe,
    pub proc_mount: Probe,
    /// Landlock's ABI, or the errno of its version query.
    pub landlock: Result<u32, i32>,
    pub seccomp_available: bool,
    pub cgroup: Result<(), String>,
    /// The cgroup layout found, usable or not (`v1`, `v2`).
    pub cgroup_found: Option<&'static str>,
    pub env: Environment,
}

impl HostFacts {
    fn sysctl(&self, name: &str) -> Option<u64> {
        self.env.sysctls.get(name)?.trim().parse().ok()
    }
}

const MAX_USERNS: &str = "user.max_user_namespaces";
const USERNS_CLONE: &str = "kernel.unprivileged_userns_clone";
const APPARMOR_RESTRICT: &str = "kernel.apparmor_restrict_unprivileged_userns";

/// Where the AppArmor profile goes and how it is loaded (what scripts/install.sh does).
const APPARMOR_FIX: &str = "install cordon's AppArmor profile, which lets it (and only it) create user namespaces: \
     sudo install -m 0644 packaging/apparmor/cordon /etc/apparmor.d/cordon && sudo apparmor_parser -r /etc/apparmor.d/cordon \
     (scripts/install.sh does this when it installs cordon as root); the profile names the paths it applies to \
     (/usr/local/bin/cordon, /usr/bin/cordon): edit it if cordon lives elsewhere";

fn errno_text(errno: i32) -> String {
    format!(
        "{} ({})",
        std::io::Error::from_raw_os_error(errno),
        errno_name(errno)
    )
}

fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::ENOSPC => "ENOSPC",
        libc::EINVAL => "EINVAL",
        libc::EUSERS => "EUSERS",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENOMEM => "ENOMEM",
        _ => "errno",
    }
}

/// The fixes for a seccomp filter that refuses namespace creation, the detected runtime's
/// first. Docker's default profile refuses `unshare`, `clone` with namespace flags and
/// `mount`; its AppArmor profile (on hosts that run AppArmor) refuses mounts; and the /proc
/// it masks makes the kernel refuse a sandbox its own /proc.
fn container_fixes(container: Option<&str>) -> Vec<Fix> {
    let docker = fix(
        "Docker: docker run --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
         --security-opt systempaths=unconfined …",
        "seccomp=unconfined drops Docker's syscall filter for everything in the container (cordon's \
         own filter still confines what cordon runs); a narrower way is Docker's default profile with \
         unshare, clone's namespace flags, setns and mount allowed (--security-opt seccomp=FILE). \
         apparmor=unconfined (only on hosts running AppArmor) drops docker-default's mount and /proc \
         rules. systempaths=unconfined unmasks /proc/kcore, /proc/keys, /proc/timer_list, \
         /sys/firmware… for the container: without it the kernel refuses a sandbox a /proc of its own. \
         Not needed: --privileged, which gives the container every capability and device",
    );
    let podman = fix(
        "Podman: podman run --security-opt seccomp=unconfined --security-opt unmask=ALL …",
        "the container loses Podman's syscall filter, and the /proc and /sys paths Podman masks become \
         visible in it (cordon's own filter and masks still apply to what cordon runs)",
    );
    let kubernetes = fix(
        "Kubernetes: in the container's securityContext, seccompProfile: {type: Unconfined}, \
         appArmorProfile: {type: Unconfined} (on AppArmor nodes) and procMount: Unmasked \
         (ProcMountType; needs hostUsers: false)",
        "the pod loses the runtime's syscall filter and /proc masks, as with Docker's flags",
    );
    let systemd = fix(
        "a systemd service: remove RestrictNamespaces= (or allow user, mnt, pid, net, ipc, uts) \
         and namespace syscalls from SystemCallFilter= in its unit",
        "the service's other processes may create namespaces too",
    );
    let mut fixes = vec![docker, podman, kubernetes, systemd];
    let first = match container {
        Some("podman") => 1,
        Some("kubernetes") => 2,
        _ => 0,
    };
    fixes.swap(0, first);
    fixes
}

/// Why the host refuses what it refuses, and what the user can do: one [`Obstacle`] per cause
/// found (a refusal with no known cause gets a generic one, never silence).
pub fn explain(f: &HostFacts) -> Vec<Obstacle> {
    let mut out = Vec::new();
    let root = f.euid == 0;
    let container = f.env.container.as_deref();
    // Under the restriction an unconfined, unprivileged program's new user namespace gets no
    // capabilities (AppArmor's unprivileged_userns profile), so what fails may be the
    // namespaces or, after them, the /proc mount.
    let apparmor_suspect = !root
        && f.sysctl(APPARMOR_RESTRICT) == Some(1)
        && !f
            .env
            .apparmor_label
            .as_deref()
            .is_some_and(|l| l.starts_with("cordon"));
    if f.env.root_in_user_namespace {
        out.push(Obstacle {
            id: "root_in_user_namespace",
            layer: "user_ns",
            found: "cordon runs as uid 0 of a user namespace that maps only part of the uid range \
                    (a rootless Podman or unprivileged LXC container, or unshare -r): as root, cordon \
                    maps each sandbox to an unused host uid, which this namespace cannot map"
                .into(),
            fixes: vec![fix(
                "run cordon as an ordinary user inside it (e.g. setpriv --reuid=1000 --regid=1000 \
                 --init-groups cordon …, or su to a user): rootless cordon maps only its own uid",
                "none for the sandbox: rootless mode has the same layers (without a cgroup unless \
                 one is delegated)",
            )],
        });
    }
    match f.user_ns {
        Probe::Works | Probe::NotTried => {}
        Probe::Refused(errno) => {
            let seen = format!(
                "unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWNET|…) was refused: {}",
                errno_text(errno)
            );
            let mut causes = Vec::new();
            match errno {
                libc::ENOSPC if f.sysctl(MAX_USERNS) == Some(0) => causes.push(Obstacle {
                    id: "max_user_namespaces_zero",
                    layer: "user_ns",
                    found: format!("{seen}; {MAX_USERNS} = 0 here: no user namespace may be created (a hardening setting)"),
                    fixes: vec![
                        fix(
                            format!("sudo sysctl -w {MAX_USERNS}=15000, and the same line in /etc/sysctl.d/90-cordon.conf to keep it \
                             (inside a container: the value is its user namespace's, set by whoever made it)"),
                            "every user of this host may create user namespaces again: more of the kernel (namespaced \
                             mounts, netfilter…) is reachable by unprivileged code, the attack surface this setting removed",
                        ),
                    ],
                }),
                libc::ENOSPC => causes.push(Obstacle {
                    id: "user_namespace_limit_reached",
                    layer: "user_ns",
                    found: format!(
                        "{seen}; {MAX_USERNS} = {}: the limit is reached (by this user, or in an enclosing namespace)",
                        f.env.sysctls.get(MAX_USERNS).map_or("unknown", |v| v.trim())
                    ),
                    fixes: vec![fix(
                        format!("raise {MAX_USERNS} (sudo sysctl -w {MAX_USERNS}=15000), or end what holds the namespaces"),
                        "more user namespaces may exist at once",
                    )],
                }),
                libc::EUSERS => causes.push(Obstacle {
                    id: "user_namespace_nesting",
                    layer: "user_ns",
                    found: format!("{seen}: user namespaces nest at most 32 deep, and this one is at the limit"),
                    fixes: vec![fix("run cordon fewer namespaces deep (on the host, or in a less nested container)", "none")],
                }),
                libc::EINVAL => causes.push(Obstacle {
                    id: "namespaces_not_in_kernel",
                    layer: "user_ns",
                    found: format!("{seen}: this kernel was built without user, pid, network, ipc or uts namespaces"),
                    fixes: vec![fix("a kernel built with CONFIG_USER_NS, CONFIG_PID_NS, CONFIG_NET_NS, CONFIG_IPC_NS and CONFIG_UTS_NS (every distribution kernel has them)", "none")],
                }),
                _ => {
                    if apparmor_suspect {
                        causes.push(apparmor_obstacle(f, &seen));
                    }
                    if !root && f.sysctl(USERNS_CLONE) == Some(0) {
                        causes.push(Obstacle {
                            id: "unprivileged_userns_clone_off",
                            layer: "user_ns",
                            found: format!("{seen}; {USERNS_CLONE} = 0: only root may create user namespaces on this kernel"),
                            fixes: vec![
                                fix(
                                    format!("sudo sysctl -w {USERNS_CLONE}=1, and in /etc/sysctl.d/90-cordon.conf to keep it"),
                                    "every user may create user namespaces (the attack surface this setting removed)",
                                ),
                                fix("run cordon as root (sudo cordon …): it maps each sandbox to an unprivileged uid", "cordon itself runs with root's rights"),
                            ],
                        });
                    }
                    if f.env.seccomp_mode == Some(2) {
                        causes.push(Obstacle {
                            id: "seccomp_filter_refuses_namespaces",
                            layer: "user_ns",
                            found: format!(
                                "{seen}; cordon runs under a seccomp filter it inherited (Seccomp: 2 in /proc/self/status){}: \
                                 container runtimes' default profiles refuse namespace creation this way",
                                match container {
                                    Some(c) => format!(", inside a {c} container ({})", f.env.container_evidence.join(", ")),
                                    None => String::new(),
                                }
                            ),
                            fixes: container_fixes(container),
                        });
                    }
                    if causes.is_empty() {
                        causes.push(Obstacle {
                            id: "user_namespaces_refused",
                            layer: "user_ns",
                            found: format!(
                                "{seen}, and none of the usual causes was found ({MAX_USERNS}, {USERNS_CLONE}, \
                                 {APPARMOR_RESTRICT}, a seccomp filter): an LSM policy (SELinux, AppArmor) or the \
                                 kernel's configuration refuses it"
                            ),
                            fixes: vec![fix(
                                "check the audit log (journalctl -k, /var/log/audit/audit.log) for the denial, or run cordon as root",
                                "depends on the policy",
                            )],
                        });
                    }
                }
            }
            out.extend(causes);
        }
    }
    if let Probe::Refused(errno) = f.proc_mount {
        if apparmor_suspect && f.env.proc_covered.is_empty() {
            let seen = format!(
                "the namespaces were created, but mounting a /proc in them was refused: {}",
                errno_text(errno)
            );
            out.push(apparmor_obstacle(f, &seen));
            return finish(f, out);
        }
        let covered = if f.env.proc_covered.is_empty() {
            "no covered part of /proc was found in /proc/self/mountinfo".to_string()
        } else {
            format!("covered here: {}", f.env.proc_covered.join(", "))
        };
        out.push(Obstacle {
            id: "proc_masked",
            layer: "proc",
            found: format!(
                "a sandbox cannot mount its own /proc: {} — the kernel refuses a new /proc inside a user \
                 namespace while parts of the existing one are covered or read-only, as container runtimes \
                 mask them ({covered})",
                errno_text(errno)
            ),
            fixes: vec![
                fix(
                    "Docker: docker run --security-opt systempaths=unconfined …; Podman: --security-opt unmask=ALL; \
                     Kubernetes: securityContext.procMount: Unmasked",
                    "the container sees the /proc and /sys files its runtime masks (kcore, keys, timer_list, \
                     sched_debug, /sys/firmware…) and may write /proc/sys where its capabilities allow",
                ),
            ],
        });
    }
    finish(f, out)
}

/// The layers that do not depend on the namespaces: Landlock, seccomp, the cgroup.
fn finish(f: &HostFacts, mut out: Vec<Obstacle>) -> Vec<Obstacle> {
    let root = f.euid == 0;
    match f.landlock {
        Ok(abi) if abi > 0 => {}
        Ok(_) | Err(libc::ENOSYS) => out.push(Obstacle {
            id: "landlock_not_in_kernel",
            layer: "landlock",
            found: "this kernel has no Landlock (Linux before 5.13, or built without CONFIG_SECURITY_LANDLOCK)".into(),
            fixes: vec![fix(
                "a kernel of 5.13 or later with CONFIG_SECURITY_LANDLOCK=y (6.7+ for network rules, 6.12+ for signal and abstract-socket scoping)",
                "none",
            )],
        }),
        Err(libc::EOPNOTSUPP) => out.push(Obstacle {
            id: "landlock_not_enabled",
            layer: "landlock",
            found: "Landlock is built into this kernel but not enabled at boot (it is not in the lsm= list)".into(),
            fixes: vec![fix(
                "add landlock to the kernel's lsm= parameter, e.g. GRUB_CMDLINE_LINUX=\"lsm=landlock,lockdown,yama,integrity,apparmor,bpf\" \
                 in /etc/default/grub (keep the LSMs /sys/kernel/security/lsm lists), then update-grub and reboot",
                "a reboot",
            )],
        }),
        Err(errno) => out.push(Obstacle {
            id: "landlock_refused",
            layer: "landlock",
            found: format!(
                "Landlock's syscalls are refused: {}{}",
                errno_text(errno),
                if f.env.seccomp_mode == Some(2) {
                    " — by an inherited seccomp filter (older container runtimes' default profiles do not know them)"
                } else {
                    ""
                }
            ),
            fixes: vec![fix(
                "allow landlock_create_ruleset, landlock_add_rule and landlock_restrict_self in the container's \
                 seccomp profile (Docker 23.0 and later allow them by default)",
                "none: Landlock only ever takes rights away",
            )],
        }),
    }
    if !f.seccomp_available {
        out.push(Obstacle {
            id: "seccomp_not_in_kernel",
            layer: "seccomp",
            found: "this kernel offers no seccomp filters (built without CONFIG_SECCOMP_FILTER)"
                .into(),
            fixes: vec![fix(
                "a kernel built with CONFIG_SECCOMP_FILTER=y (every distribution kernel has it)",
                "none",
            )],
        });
    }
    if let Err(why) = &f.cgroup {
        let delegated = fix(
            "run cordon in a delegated systemd scope: systemd-run --user --scope -p Delegate=yes cordon …",
            "none",
        );
        let (found, first) = match f.cgroup_found {
            Some("v1") if !root => (
                format!("{why}: cgroup v1 cannot be handed to an unprivileged user"),
                fix(
                    "boot with the unified hierarchy (systemd.unified_cgroup_hierarchy=1 on the kernel command line), \
                     then run cordon in a delegated scope: systemd-run --user --scope -p Delegate=yes cordon …",
                    "a reboot; programs that need cgroup v1 stop working",
                ),
            ),
            _ => (why.clone(), delegated),
        };
        out.push(Obstacle {
            id: "no_cgroup",
            layer: "cgroup",
            found,
            fixes: vec![
                first,
                fix(
                    "run cordon as root",
                    "cordon itself runs with root's rights",
                ),
            ],
        });
    }
    out
}

fn apparmor_obstacle(f: &HostFacts, seen: &str) -> Obstacle {
    Obstacle {
        id: "apparmor_userns_restriction",
        layer: "user_ns",
        found: format!(
            "{seen}; {APPARMOR_RESTRICT} = 1: AppArmor lets unprivileged programs use user namespaces \
             only under a profile that allows it (Ubuntu 23.10 and later); cordon runs as {}",
            f.env.apparmor_label.as_deref().unwrap_or("an unknown label")
        ),
        fixes: vec![
            fix(APPARMOR_FIX, "cordon (and nothing else) may create user namespaces without root"),
            fix(
                format!("sudo sysctl -w {APPARMOR_RESTRICT}=0 (and in /etc/sysctl.d/ to keep it)"),
                "every program may create user namespaces again, host-wide",
            ),
            fix(
                "run cordon as root (sudo cordon …): it maps each sandbox to an unprivileged uid",
                "cordon itself runs with root's rights",
            ),
        ],
    }
}

/// Whether AppArmor gives a user namespace this process makes no capabilities (Ubuntu 23.10
/// and later: `kernel.apparmor_restrict_unprivileged_userns = 1`, and cordon unconfined, that
/// is without its profile): the namespace would be made, but nothing could be mounted in it,
/// so a sandbox goes on without namespaces rather than fail. Two small reads per run, only
/// where the sysctl exists.
pub fn apparmor_denies_userns(euid: u32) -> bool {
    if euid == 0 {
        return false;
    }
    let Some(restrict) = read_trimmed("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
    else {
        return false;
    };
    let label = read_trimmed("/proc/self/attr/apparmor/current")
        .or_else(|| read_trimmed("/proc/self/attr/current"));
    restricted_for(&restrict, label.as_deref())
}

/// See [`apparmor_denies_userns`]: the sysctl's value and this process's AppArmor label.
fn restricted_for(restrict: &str, label: Option<&str>) -> bool {
    restrict == "1" && label.is_none_or(|l| l.trim_end_matches('\0').trim() == "unconfined")
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The `Seccomp:` line of /proc/self/status.
fn seccomp_mode(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Which container runtime (if any) cordon runs in, and the evidence.
fn container(
    exists: impl Fn(&str) -> bool,
    pid1_cgroup: &str,
    pid1_environ: &[u8],
    kube_env: bool,
) -> (Option<String>, Vec<String>) {
    let mut kinds: Vec<&str> = Vec::new();
    let mut evidence = Vec::new();
    let mut add = |kind: &'static str, why: String| {
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
        evidence.push(why);
    };
    if kube_env || exists("/var/run/secrets/kubernetes.io/serviceaccount") {
        add(
            "kubernetes",
            "a Kubernetes service account or KUBERNETES_SERVICE_HOST".into(),
        );
    }
    if exists("/run/.containerenv") {
        add("podman", "/run/.containerenv".into());
    }
    if exists("/.dockerenv") {
        add("docker", "/.dockerenv".into());
    }
    for (needle, kind) in [
        ("kubepods", "kubernetes"),
        ("libpod", "podman"),
        ("docker", "docker"),
        ("lxc", "lxc"),
        ("containerd", "container"),
    ] {
        if let Some(line) = pid1_cgroup.lines().find(|l| l.contains(needle)) {
            add(
                kind,
                format!(
                    "/proc/1/cgroup: {}",
                    line.chars().take(120).collect::<String>()
                ),
            );
        }
    }
    for var in pid1_environ.split(|b| *b == 0) {
        if let Some(v) = var.strip_prefix(b"container=") {
            let v = String::from_utf8_lossy(v).to_string();
            let kind = match v.as_str() {
                "podman" => "podman",
                "docker" => "docker",
                "lxc" | "lxc-libvirt" => "lxc",
                "systemd-nspawn" => "systemd-nspawn",
                _ => "container",
            };
            add(kind, format!("container={v} in pid 1's environment"));
        }
    }
    (kinds.first().map(|k| k.to_string()), evidence)
}

/// Mount points under /proc in a mountinfo table (binfmt_misc on its own empty directory is
/// no mask: the kernel allows that one).
fn proc_covered(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.starts_with("/proc/") && *p != "/proc/sys/fs/binfmt_misc")
        .map(str::to_string)
        .collect()
}

/// uid 0 inside a user namespace that does not map the whole range.
fn root_in_user_namespace(euid: u32, uid_map: &str) -> bool {
    let full = uid_map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"];
    euid == 0 && !uid_map.trim().is_empty() && !full
}

fn environment() -> Environment {
    let mut sysctls = std::collections::BTreeMap::new();
    for (name, path) in [
        (MAX_USERNS, "/proc/sys/user/max_user_namespaces"),
        (USERNS_CLONE, "/proc/sys/kernel/unprivileged_userns_clone"),
        (
            APPARMOR_RESTRICT,
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        ),
    ] {
        if let Some(v) = read_trimmed(path) {
            sysctls.insert(name.to_string(), v);
        }
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let (container, container_evidence) = container(
        |p| std::path::Path::new(p).exists(),
        &std::fs::read_to_string("/proc/1/cgroup").unwrap_or_default(),
        &std::fs::read("/proc/1/environ").unwrap_or_default(),
        std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
    );
    let apparmor_label = read_trimmed("/proc/self/attr/apparmor/current")
        .or_else(|| read_trimmed("/proc/self/attr/current"))
        .map(|l| l.trim_end_matches('\0').to_string())
        .filter(|l| !l.is_empty());
    Environment {
        container,
        container_evidence,
        seccomp_mode: seccomp_mode(&status),
        apparmor_label,
        sysctls,
        proc_covered: proc_covered(
            &std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default(),
        ),
        root_in_user_namespace: root_in_user_namespace(
            sys::geteuid(),
            &std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default(),
        ),
    }
}

/// Probes the host. Forks (to try a sandbox's namespaces and its /proc); call from a
/// single-threaded process.
pub fn probe() -> HostReport {
    let euid = sys::geteuid();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let landlock = landlock_version();
    let abi = landlock.unwrap_or(0);
    let (userns, proc_mount) = probe_namespaces();
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
            available: userns == Probe::Works,
            detail: match userns {
                // cordon as root creates the namespace as root, then maps it to a nobody.
                Probe::Works if euid == 0 => "user namespaces work (created by root: the unprivileged setting does not matter)".into(),
                Probe::Works => "unprivileged user namespaces work".into(),
                Probe::Refused(e) => format!("creating a sandbox's namespaces was refused: {}", errno_text(e)),
                Probe::NotTried => "could not be tried (fork failed)".into(),
            },
            cost_if_missing: "no private root, pid, network, ipc or uts namespace: one-shot runs go on without them (Landlock fences the host's files and TCP, seccomp the socket families, a per-run host dir holds /tmp and HOME; the host's processes are visible in /proc; ipc and hostname are shared) and say so in enforcement; `--require user_ns` (or any namespace) refuses instead (exit 125); persistent sandboxes and `cordon serve` without --allow-degraded refuse",
        },
        Support {
            name: "proc",
            available: proc_mount == Probe::Works,
            detail: match proc_mount {
                Probe::Works => "a sandbox can mount a /proc of its own".into(),
                Probe::Refused(e) => format!("mounting a sandbox's own /proc was refused: {}", errno_text(e)),
                Probe::NotTried => "not tried: the namespaces it needs were refused".into(),
            },
            cost_if_missing: "no /proc that shows only the sandbox's processes; cordon refuses to run (exit 125)",
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
            detail: match landlock {
                Ok(abi) if abi > 0 => {
                    let rules = crate::landlock_rules::RULES_ABI;
                    let missing = crate::landlock_rules::missing_below(abi);
                    if missing.is_empty() {
                        format!("Landlock ABI {abi}; cordon's rules use ABI {rules}: all enforced here")
                    } else {
                        format!(
                            "Landlock ABI {abi}; cordon's rules use ABI {rules}: partially enforced here, missing: {}",
                            missing.join(", ")
                        )
                    }
                }
                Ok(_) | Err(libc::ENOSYS) => "no Landlock in this kernel".into(),
                Err(libc::EOPNOTSUPP) => "Landlock built in but not enabled at boot (lsm=)".into(),
                Err(e) => format!("Landlock refused: {}", errno_text(e)),
            },
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
    let facts = HostFacts {
        euid,
        user_ns: userns,
        proc_mount,
        landlock,
        seccomp_available: seccomp,
        cgroup: cg_writable.as_ref().map(drop).map_err(Clone::clone),
        cgroup_found: cg.as_ref().ok().map(|l| l.version().name()),
        env: environment(),
    };
    let obstacles = explain(&facts);
    let mode = if facts.env.root_in_user_namespace {
        "none"
    } else if userns == Probe::Works {
        if proc_mount == Probe::Works {
            "full"
        } else if abi > 0 && apparmor_denies_userns(euid) {
            // cordon run sees the restriction and does not try (see `apparmor_denies_userns`).
            "no_namespaces"
        } else {
            "none"
        }
    } else if abi > 0 {
        "no_namespaces"
    } else {
        "none"
    };
    HostReport {
        mode,
        kernel,
        running_as_root: euid == 0,
        euid,
        landlock_abi: abi,
        cgroup: cg_writable
            .map(|(v, _)| v.name().to_string())
            .unwrap_or_else(|_| "none".into()),
        features,
        obstacles,
        environment: facts.env,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host where everything works; each test breaks one thing.
    fn healthy(euid: u32) -> HostFacts {
        HostFacts {
            euid,
            user_ns: Probe::Works,
            proc_mount: Probe::Works,
            landlock: Ok(6),
            seccomp_available: true,
            cgroup: Ok(()),
            cgroup_found: Some("v2"),
            env: Environment::default(),
        }
    }

    fn ids(f: &HostFacts) -> Vec<&'static str> {
        explain(f).iter().map(|o| o.id).collect()
    }

    fn with_sysctl(mut f: HostFacts, k: &str, v: &str) -> HostFacts {
        f.env.sysctls.insert(k.into(), v.into());
        f
    }

    #[test]
    fn a_healthy_host_has_nothing_to_explain() {
        assert!(explain(&healthy(1000)).is_empty());
        assert!(explain(&healthy(0)).is_empty());
    }

    /// Ubuntu 23.10+: the sysctl is on and cordon has no profile. The fix names the profile
    /// shipped in packaging/apparmor and how to load it.
    /// Restricted and unconfined: a sandbox skips the namespaces; under a profile (cordon's,
    /// which grants `userns`) or without the restriction, it tries them.
    #[test]
    fn apparmor_restriction_decides_for_unconfined_only() {
        assert!(restricted_for("1", Some("unconfined")));
        assert!(restricted_for("1", Some("unconfined\0")));
        assert!(restricted_for("1", None));
        assert!(!restricted_for("1", Some("cordon (enforce)")));
        assert!(!restricted_for("0", Some("unconfined")));
    }

    #[test]
    fn apparmor_restriction_is_named_with_the_profile_to_install() {
        let mut f = with_sysctl(healthy(1000), APPARMOR_RESTRICT, "1");
        f.user_ns = Probe::Refused(libc::EPERM);
        f.proc_mount = Probe::NotTried;
        f.env.apparmor_label = Some("unconfined".into());
        let o = explain(&f);
        assert_eq!(o.len(), 1, "{o:?}");
        assert_eq!(o[0].id, "apparmor_userns_restriction");
        assert!(o[0].found.contains("= 1"), "{o:?}");
        assert!(o[0].fixes[0].how.contains("packaging/apparmor/cordon"));
        assert!(o[0].fixes[0].how.contains("apparmor_parser -r"));
        assert!(o[0]
            .fixes
            .iter()
            .any(|x| x.how.contains(&format!("{APPARMOR_RESTRICT}=0"))));
        // Root is not restricted by it: a refusal as root has another cause.
        let mut r = f.clone();
        r.euid = 0;
        assert_eq!(ids(&r), ["user_namespaces_refused"]);
        // Off: not blamed.
        let off = with_sysctl(f.clone(), APPARMOR_RESTRICT, "0");
        assert_eq!(ids(&off), ["user_namespaces_refused"]);
        // Under cordon's own profile: not blamed either.
        let mut profiled = f.clone();
        profiled.env.apparmor_label = Some("cordon (unconfined)".into());
        assert_eq!(ids(&profiled), ["user_namespaces_refused"]);
        // Where the namespaces are made but have no capabilities (AppArmor 4's
        // unprivileged_userns profile), what fails is the /proc mount: still AppArmor's doing,
        // not a mask.
        let mut late = f;
        late.user_ns = Probe::Works;
        late.proc_mount = Probe::Refused(libc::EPERM);
        assert_eq!(ids(&late), ["apparmor_userns_restriction"]);
        assert!(explain(&late)[0].found.contains("were created"));
    }

    #[test]
    fn debian_unprivileged_userns_clone_is_named() {
        let mut f = with_sysctl(healthy(1000), USERNS_CLONE, "0");
        f.user_ns = Probe::Refused(libc::EPERM);
        assert_eq!(ids(&f), ["unprivileged_userns_clone_off"]);
        assert!(explain(&f)[0].fixes[0]
            .how
            .contains("kernel.unprivileged_userns_clone=1"));
        let on = with_sysctl(f, USERNS_CLONE, "1");
        assert_eq!(ids(&on), ["user_namespaces_refused"]);
    }

    /// ENOSPC with the sysctl at 0 is the hardening setting; with a positive value, the limit.
    #[test]
    fn max_user_namespaces() {
        let mut f = with_sysctl(healthy(1000), MAX_USERNS, "0");
        f.user_ns = Probe::Refused(libc::ENOSPC);
        assert_eq!(ids(&f), ["max_user_namespaces_zero"]);
        let full = with_sysctl(f, MAX_USERNS, "3");
        assert_eq!(ids(&full), ["user_namespace_limit_reached"]);
        assert!(explain(&full)[0].found.contains("= 3"));
    }

    #[test]
    fn a_seccomp_filter_gets_the_runtime_flags_with_their_costs_detected_runtime_first() {
        let mut f = healthy(1000);
        f.user_ns = Probe::Refused(libc::EPERM);
        f.env.seccomp_mode = Some(2);
        let o = explain(&f);
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].id, "seccomp_filter_refuses_namespaces");
        let hows: Vec<&str> = o[0].fixes.iter().map(|x| x.how.as_str()).collect();
        assert!(hows[0].starts_with("Docker:"), "{hows:?}");
        for flag in [
            "seccomp=unconfined",
            "apparmor=unconfined",
            "systempaths=unconfined",
        ] {
            assert!(hows[0].contains(flag), "{flag}");
        }
        assert!(o[0].fixes.iter().all(|x| !x.cost.is_empty()));
        assert!(o[0].fixes[0].cost.contains("--privileged"));
        f.env.container = Some("kubernetes".into());
        assert!(explain(&f)[0].fixes[0].how.starts_with("Kubernetes:"));
        f.env.container = Some("podman".into());
        assert!(explain(&f)[0].fixes[0].how.starts_with("Podman:"));
    }

    /// Several causes at once are all named (the user has to lift each).
    #[test]
    fn every_cause_found_is_named() {
        let mut f = with_sysctl(healthy(1000), APPARMOR_RESTRICT, "1");
        f = with_sysctl(f, USERNS_CLONE, "0");
        f.user_ns = Probe::Refused(libc::EPERM);
        f.env.seccomp_mode = Some(2);
        assert_eq!(
            ids(&f),
            [
                "apparmor_userns_restriction",
                "unprivileged_userns_clone_off",
                "seccomp_filter_refuses_namespaces"
            ]
        );
    }

    #[test]
    fn other_refusals_and_missing_layers() {
        let mut f = healthy(1000);
        f.user_ns = Probe::Refused(libc::EINVAL);
        assert_eq!(ids(&f), ["namespaces_not_in_kernel"]);
        f.user_ns = Probe::Refused(libc::EUSERS);
        assert_eq!(ids(&f), ["user_namespace_nesting"]);
        let mut f = healthy(1000);
        f.proc_mount = Probe::Refused(libc::EPERM);
        f.env.proc_covered = vec!["/proc/kcore".into(), "/proc/sys".into()];
        let o = explain(&f);
        assert_eq!(o[0].id, "proc_masked");
        assert!(o[0].found.contains("/proc/kcore, /proc/sys"));
        assert!(o[0].fixes[0].how.contains("systempaths=unconfined"));
        for (landlock, id) in [
            (Err(libc::ENOSYS), "landlock_not_in_kernel"),
            (Ok(0), "landlock_not_in_kernel"),
            (Err(libc::EOPNOTSUPP), "landlock_not_enabled"),
            (Err(libc::EPERM), "landlock_refused"),
        ] {
            let mut f = healthy(1000);
            f.landlock = landlock;
            assert_eq!(ids(&f), [id]);
        }
        let mut f = healthy(1000);
        f.seccomp_available = false;
        assert_eq!(ids(&f), ["seccomp_not_in_kernel"]);
        let mut f = healthy(1000);
        f.cgroup = Err("v1 found but not writable by uid 1000".into());
        f.cgroup_found = Some("v1");
        let o = explain(&f);
        assert_eq!(o[0].id, "no_cgroup");
        assert!(o[0].fixes[0]
            .how
            .contains("systemd.unified_cgroup_hierarchy=1"));
        let mut f = healthy(0);
        f.env.root_in_user_namespace = true;
        assert_eq!(ids(&f), ["root_in_user_namespace"]);
    }

    #[test]
    fn what_the_surroundings_say() {
        assert_eq!(
            seccomp_mode("Name:\tx\nSeccomp:\t2\nSeccomp_filters:\t1\n"),
            Some(2)
        );
        assert_eq!(seccomp_mode("Name:\tx\n"), None);
        let none = |_: &str| false;
        assert_eq!(container(none, "0::/\n", b"", false), (None, vec![]));
        let (kind, why) = container(
            |p| p == "/.dockerenv",
            "0::/system.slice/docker-0123.scope\n",
            b"PATH=/bin\0container=podman\0",
            false,
        );
        assert_eq!(kind.as_deref(), Some("docker"));
        assert_eq!(why.len(), 3, "{why:?}");
        let (kind, _) = container(none, "12:pids:/kubepods/burstable/pod1/abc\n", b"", false);
        assert_eq!(kind.as_deref(), Some("kubernetes"));
        let (kind, _) = container(none, "", b"", true);
        assert_eq!(kind.as_deref(), Some("kubernetes"));
        let table = "\
1 0 0:1 / / rw - ext4 /dev/vda rw
2 1 0:2 / /proc rw - proc proc rw
3 2 0:2 /sys /proc/sys ro - proc proc rw
4 2 0:3 / /proc/sys/fs/binfmt_misc rw - autofs x rw
5 2 0:4 /null /proc/kcore rw - devtmpfs udev rw
";
        assert_eq!(proc_covered(table), ["/proc/sys", "/proc/kcore"]);
        assert!(!root_in_user_namespace(
            0,
            "         0          0 4294967295\n"
        ));
        assert!(root_in_user_namespace(
            0,
            "         0       1000          1\n"
        ));
        assert!(!root_in_user_namespace(
            1000,
            "      1000       1000          1\n"
        ));
    }
}
