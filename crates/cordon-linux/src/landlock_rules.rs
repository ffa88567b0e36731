//! Landlock rules that mirror the mount layout, so that a mount-namespace escape still finds
//! the filesystem fenced. Best effort above ABI 1; the status is reported, never assumed.
//!
//! With a programs allowlist (`exec_only`), the execute right is withheld from every rule and
//! granted on the allowed files alone: the kernel then refuses `execve` of anything else,
//! whatever its permissions — a binary copied into `/tmp`, a script's interpreter that is not
//! on the list, the dynamic loader of a program that names another one. Landlock checks the
//! opens an exec makes (the program, its `#!` interpreter, its ELF interpreter), not `mmap`:
//! what a running program maps executable is for the mount flags (`noexec` on the writable
//! mounts, see `mounts`) and what remains is said in the README.

use std::path::PathBuf;

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

/// Paths (inside the new root) and what may be done beneath them.
#[derive(Debug, Default, Clone)]
pub struct FsRules {
    /// Read and execute (system directories, `--ro` binds).
    pub read_exec: Vec<PathBuf>,
    /// Everything (`/tmp`, `/workspace`, `--rw` binds, `/dev/shm`).
    pub read_write: Vec<PathBuf>,
    /// Read and write one file each (`/dev/null`, …).
    pub files_rw: Vec<PathBuf>,
    /// Read only, no execute (`/proc`).
    pub read_only: Vec<PathBuf>,
    /// Directory listing only (`/`, `/dev`).
    pub list_only: Vec<PathBuf>,
    /// TCP: `None` leaves it to the network namespace; `Some(ports)` (a sandbox without one)
    /// refuses every TCP bind and every connect but to these ports (ABI 4+).
    pub tcp_connect: Option<Vec<u16>>,
    /// The programs allowlist resolved to files: `Some` withholds the execute right from
    /// every rule above and grants it on these files only (ABI 1: every Landlock has it).
    pub exec_only: Option<Vec<PathBuf>>,
}

/// What was enforced.
pub struct Applied {
    pub abi: u32,
    pub partial: bool,
}

/// The newest ABI cordon asks for; older kernels get what they support (best effort).
const TARGET: ABI = ABI::V6;

/// The ABI cordon's rules are written for. A kernel with a newer one enforces all of them
/// (what later ABIs add is not used); an older one enforces part (see [`missing_below`]).
pub const RULES_ABI: u32 = TARGET as u32;

/// What cordon's rules ask for that a kernel with Landlock ABI `kernel_abi` cannot enforce.
pub fn missing_below(kernel_abi: u32) -> Vec<&'static str> {
    [
        (
            2,
            "moving and linking files between directories (refused outright: ABI 2)",
        ),
        (3, "truncation rights (ABI 3)"),
        (4, "TCP port rules (ABI 4)"),
        (5, "device ioctl rights (ABI 5)"),
        (6, "scoping of signals and abstract unix sockets (ABI 6)"),
    ]
    .iter()
    .filter(|(abi, _)| kernel_abi < *abi)
    .map(|(_, what)| *what)
    .collect()
}

/// The note for a ruleset the kernel enforced only in part: which ABI each side has, and
/// what is missing. (`cordon check` says the same of the host.)
pub fn partial_note(kernel_abi: u32) -> String {
    let missing = missing_below(kernel_abi);
    format!(
        "Landlock partially enforced: the kernel has ABI {kernel_abi}, cordon's rules use ABI \
         {RULES_ABI}; missing: {}",
        if missing.is_empty() {
            "nothing cordon's rules ask for (the kernel refused part of a rule)".to_string()
        } else {
            missing.join(", ")
        }
    )
}

pub fn apply(rules: &FsRules, kernel_abi: u32) -> Result<Applied, String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET))
        .map_err(|e| err(&e))?;
    if rules.tcp_connect.is_some() && kernel_abi >= 4 {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(TARGET))
            .map_err(|e| err(&e))?;
    }
    if kernel_abi >= 6 {
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(|e| err(&e))?;
    }
    let mut created = ruleset.create().map_err(|e| err(&e))?;
    let read = AccessFs::from_read(TARGET);
    let read_no_exec = read & !AccessFs::Execute;
    let file_rw = (AccessFs::from_file(TARGET)) & !AccessFs::Execute;
    // Without an allowlist, Execute goes wherever reading does; with one, nowhere but on the
    // allowed files (a rule's rights add up down the tree, so one Execute on a directory
    // would reach every file below it).
    let exec = if rules.exec_only.is_some() {
        AccessFs::Execute.into()
    } else {
        landlock::BitFlags::<AccessFs>::empty()
    };
    let allowed: &[PathBuf] = rules.exec_only.as_deref().unwrap_or(&[]);
    let groups: [(&[PathBuf], _); 6] = [
        (&rules.read_exec, read & !exec),
        (&rules.read_write, AccessFs::from_all(TARGET) & !exec),
        (&rules.files_rw, file_rw),
        (&rules.read_only, read_no_exec),
        (&rules.list_only, AccessFs::ReadDir.into()),
        (allowed, exec),
    ];
    for (paths, access) in groups {
        for p in paths {
            // A path that vanished (optional system dir) simply gets no rule.
            let Ok(fd) = PathFd::new(p) else { continue };
            // A file can only hold the rights of files: asked for a directory's too (listing,
            // creating, …), the crate grants the file's and reports the whole ruleset as
            // partially enforced — a loss that is none, reported as one.
            let is_dir = rustix::fs::fstat(&fd)
                .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir());
            let access = if is_dir {
                access
            } else {
                access & AccessFs::from_file(TARGET)
            };
            if access.is_empty() {
                continue;
            }
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| format!("rule for {}: {e}", p.display()))?;
        }
    }
    for port in rules.tcp_connect.iter().flatten() {
        if kernel_abi >= 4 {
            created = created
                .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
                .map_err(|e| format!("rule for TCP port {port}: {e}"))?;
        }
    }
    let status = created.restrict_self().map_err(|e| err(&e))?;
    let abi = kernel_abi.min(TARGET as u32);
    match status.ruleset {
        RulesetStatus::NotEnforced => Ok(Applied {
            abi: 0,
            partial: false,
        }),
        RulesetStatus::PartiallyEnforced => Ok(Applied { abi, partial: true }),
        RulesetStatus::FullyEnforced => Ok(Applied {
            abi,
            partial: false,
        }),
    }
}

/// Landlock attacked on its own. Every filesystem attack in the integration suites meets the
/// mount namespace first (the host's files are simply not in the sandbox's root), so those
/// tests would pass with Landlock broken. Here a process builds the sandbox's real root and
/// confines itself with the real rules, as the init does — but it kept a directory fd of the
/// host's root from before the pivot, exactly what a mount-namespace escape hands an attacker.
/// It runs as host root, with no user namespace and no seccomp filter: through that fd, only
/// Landlock stands between it and the host.
#[cfg(test)]
mod alone {
    use std::collections::BTreeMap;
    use std::io::{ErrorKind, Write};
    use std::os::fd::OwnedFd;
    use std::path::Path;
    use std::process::Command;

    use crate::plan::{self, PlanInput};

    const CHILD: &str = "CORDON_LANDLOCK_ALONE_CHILD";

    fn default_plan() -> plan::Plan {
        let profile = cordon_policy::Profile::builtin("default").expect("default profile");
        let argv = vec!["/bin/true".to_string()];
        plan::build(PlanInput {
            profile: &profile,
            argv: &argv,
            cwd: None,
            extra_env: &BTreeMap::new(),
            host_uid: 0,
            host_gid: 0,
            drop_root: false,
            kernel_landlock_abi: crate::detect::landlock_abi(),
            persistent_ok: false,
        })
        .expect("plan")
    }

    /// openat(2) relative to `dir`, no flags beyond `flags | O_CLOEXEC`.
    fn open_at(dir: &OwnedFd, path: &str, flags: i32) -> std::io::Result<OwnedFd> {
        let flags = rustix::fs::OFlags::from_bits_retain(flags as u32);
        let mode = rustix::fs::Mode::from_raw_mode(0o644);
        Ok(rustix::fs::openat(
            dir,
            path,
            flags | rustix::fs::OFlags::CLOEXEC,
            mode,
        )?)
    }

    /// Reads the first entry of `dir`: whether listing it is allowed.
    fn list(dir: OwnedFd) -> std::io::Result<()> {
        let mut d = rustix::fs::Dir::new(dir)?;
        match d.next() {
            Some(Err(e)) => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Runs in a fresh single-threaded test process (see `holds_without_the_mount_namespace`).
    #[test]
    fn attack_from_inside() {
        let Some(secret_dir) = std::env::var(CHILD).ok() else {
            return; // Only meaningful as the child of the test below.
        };
        let rel = secret_dir.trim_start_matches('/').to_string();
        // The leak: the host's root, opened before the sandbox's root replaces it.
        let host: OwnedFd = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
                .open("/")
                .expect("host root")
                .into()
        };
        let plan = default_plan();
        crate::sys::unshare(libc::CLONE_NEWNS).expect("mount namespace");
        crate::mounts::build_root(&plan).expect("build the sandbox root");
        // The root really is the sandbox's now: the secret is not in it.
        assert!(!Path::new(&secret_dir).exists());
        crate::sys::set_no_new_privs().expect("no_new_privs");
        super::apply(&plan.landlock, plan.kernel_landlock_abi).expect("landlock");

        println!(); // the harness's "test … " prefix ends the line before ours
        let report = |what: &str, r: std::io::Result<()>| match r {
            Ok(()) => println!("{what}: allowed"),
            Err(e) => println!("{what}: {:?}", e.kind()),
        };
        let rd = libc::O_RDONLY;
        let wr = libc::O_WRONLY | libc::O_CREAT;
        let secret = format!("{rel}/secret");
        report("read secret", open_at(&host, &secret, rd).map(|_| ()));
        report(
            "overwrite secret",
            open_at(&host, &secret, libc::O_WRONLY).map(|_| ()),
        );
        report(
            "plant file",
            open_at(&host, &format!("{rel}/planted"), wr).map(|_| ()),
        );
        report(
            "list secret dir",
            open_at(&host, &rel, rd | libc::O_DIRECTORY).and_then(list),
        );
        report(
            "list host root",
            open_at(&host, ".", rd | libc::O_DIRECTORY).and_then(list),
        );
        report(
            "read /root",
            open_at(&host, "root", rd | libc::O_DIRECTORY).and_then(list),
        );
        report(
            "write host /etc",
            open_at(&host, "etc/cordon-landlock-alone", wr).map(|_| ()),
        );
        report(
            "write host /usr/bin",
            open_at(&host, "usr/bin/cordon-landlock-alone", wr).map(|_| ()),
        );
        report(
            "write host /tmp",
            open_at(&host, "tmp/cordon-landlock-alone", wr).map(|_| ()),
        );
        report(
            "write host /proc/sys",
            open_at(&host, "proc/sys/kernel/hostname", libc::O_WRONLY).map(|_| ()),
        );
        // Controls: inside the sandbox's own root, the same rules let a program work.
        report("read /etc/passwd", std::fs::read("/etc/passwd").map(|_| ()));
        report(
            "run /bin/true",
            Command::new("/bin/true").status().map(|_| ()),
        );
        report("write /tmp", std::fs::write("/tmp/x", b"x"));
        report("list /", std::fs::read_dir("/").map(|_| ()));
        std::io::stdout().flush().expect("flush");
    }

    #[test]
    fn holds_without_the_mount_namespace() {
        if crate::detect::landlock_abi() == 0 {
            eprintln!("Landlock is not enabled in this kernel; nothing to attack");
            return;
        }
        if crate::sys::geteuid() != 0 {
            eprintln!("needs root (builds a root in a mount namespace without a user namespace)");
            return;
        }
        let base = if Path::new("/var/tmp").is_dir() {
            "/var/tmp"
        } else {
            "/root"
        };
        let dir = Path::new(base).join(format!("cordon-landlock-alone-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("secret"), b"host secret").expect("secret");

        let out = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "landlock_rules::alone::attack_from_inside",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, &dir)
            .output()
            .expect("run child");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let _cleanup = scopeguard(&dir);
        assert!(
            out.status.success(),
            "child failed: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let verdict = |what: &str| -> String {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{what}: ")))
                .unwrap_or_else(|| panic!("no verdict for {what:?} in:\n{text}"))
                .to_string()
        };
        let denied = format!("{:?}", ErrorKind::PermissionDenied);
        for attack in [
            "read secret",
            "overwrite secret",
            "plant file",
            "list secret dir",
            "list host root",
            "read /root",
            "write host /etc",
            "write host /usr/bin",
            "write host /tmp",
            "write host /proc/sys",
        ] {
            assert_eq!(verdict(attack), denied, "{attack}");
        }
        for control in ["read /etc/passwd", "run /bin/true", "write /tmp", "list /"] {
            assert_eq!(verdict(control), "allowed", "{control}");
        }
        // From outside: the host is as it was.
        assert_eq!(
            std::fs::read(dir.join("secret")).expect("secret"),
            b"host secret"
        );
        assert!(!dir.join("planted").exists());
        assert!(!Path::new("/etc/cordon-landlock-alone").exists());
        assert!(!Path::new("/usr/bin/cordon-landlock-alone").exists());
        assert!(!Path::new("/tmp/cordon-landlock-alone").exists());
    }

    /// Removes the test's directory (and whatever a failed attack planted) when dropped.
    fn scopeguard(dir: &Path) -> impl Drop + '_ {
        struct Guard<'a>(&'a Path);
        impl Drop for Guard<'_> {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(self.0);
                for planted in [
                    "/etc/cordon-landlock-alone",
                    "/usr/bin/cordon-landlock-alone",
                    "/tmp/cordon-landlock-alone",
                ] {
                    let _ = std::fs::remove_file(planted);
                }
            }
        }
        Guard(dir)
    }
}
