//! The launcher, shared by one-shot runs (`supervisor`) and persistent sandboxes
//! (`persistent`): decides everything before the clone (`prepare`: plan, host identity,
//! cgroup plan, required layers), clones the init into fresh namespaces, writes its id maps
//! and creates its cgroup while it sets up (`spawn_init`).

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use cordon_policy::{Enforcement, Layer, Profile};

use crate::cgroup::{self, Cgroup, CgroupLimits};
use crate::channel::{Channel, ToSandbox, ToSupervisor};
use crate::error::EngineError;
use crate::idmap;
use crate::init::{self, Stdio};
use crate::plan::{self, PlanInput};
use crate::{detect, sys};

/// First host uid used for sandboxes when cordon runs as root; the supervisor's pid is added,
/// so concurrent sandboxes never share a uid and none is an account on the host.
const ROOT_MODE_UID_BASE: u32 = 2_000_000_000;

/// The layers that can be known missing before anything starts (a required cgroup is checked
/// when it is created).
fn check_required(profile: &Profile, abi: u32, seccomp: bool) -> Result<(), EngineError> {
    let mut missing = Vec::new();
    let mut hints = Vec::new();
    for layer in &profile.require {
        let ok = match layer {
            Layer::Landlock => abi > 0,
            Layer::Seccomp => seccomp,
            // Namespaces and rlimits are always set up; failing to is a setup error.
            _ => true,
        };
        if !ok {
            missing.push(layer.name());
            hints.push(match layer {
                Layer::Landlock => {
                    "the kernel has no Landlock (boot with lsm=...,landlock)".to_string()
                }
                Layer::Seccomp => "the kernel has no seccomp filter support".to_string(),
                _ => String::new(),
            });
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(EngineError::Required {
            missing: missing.join(","),
            hint: hints.join("; "),
        })
    }
}

/// The cgroup a sandbox is to get; found and created by `spawn_init` while the init sets up.
pub(crate) struct CgroupPlan {
    name: String,
    limits: CgroupLimits,
    required: bool,
    /// A persistent sandbox: each command gets a cgroup of its own below this one.
    nested: bool,
}

/// Everything decided before the fork: cgroup, host identity, the plan.
pub(crate) struct Prepared {
    /// The sandbox's cgroup once `spawn_init` has created it.
    pub cgroup: Option<Cgroup>,
    cgroup_plan: Option<CgroupPlan>,
    /// Held until the init has its copy (see `plan.workspace_tree`).
    workspace_tree: Option<OwnedFd>,
    /// Held until the init has its copies (see `plan.image`, and `RootEntry::Bind::tree`).
    layer_trees: Vec<OwnedFd>,
    /// The children that made the idmappings' user namespaces, reaped once the sandbox is on
    /// its way (they are gone by then; see `idmap::MappingChild`).
    mapping_children: Vec<idmap::MappingChild>,
    pub cgroup_name: String,
    pub plan: plan::Plan,
    pub host_uid: u32,
    pub notes: Vec<String>,
    /// Layers the caller required (namespace layers are checked when the clone is refused).
    require: Vec<Layer>,
    /// The caller accepts running without Landlock where there are no namespaces either.
    allow_no_landlock: bool,
    /// Set when the host refused namespaces and the sandbox runs without them: the per-run
    /// scratch directory, removed by [`Prepared::cleanup`].
    pub run_dir: Option<PathBuf>,
}

impl Prepared {
    /// The sandbox runs in the host's namespaces (see `degrade`).
    pub fn degraded(&self) -> bool {
        self.plan.no_namespaces
    }

    /// Removes what a sandbox without namespaces left on the host (its run directory).
    /// Called once nothing of the sandbox runs any more.
    pub fn cleanup(&mut self) {
        if let Some(dir) = self.run_dir.take() {
            remove_run_dir(&dir);
        }
    }

    /// The host refused the namespaces (`why`): go on without them where the caller allows
    /// it — no namespace layer required, Landlock there or explicitly waived, no image — with
    /// a per-run scratch directory owned by the sandbox's uid.
    fn degrade(&mut self, why: &std::io::Error) -> Result<(), EngineError> {
        let refused = format!("{why}; this host refuses user namespaces (see `cordon check`)");
        let ns: Vec<&str> = self
            .require
            .iter()
            .filter(|l| NAMESPACE_LAYERS.contains(l))
            .map(|l| l.name())
            .collect();
        if !ns.is_empty() {
            return Err(EngineError::Required {
                missing: ns.join(","),
                hint: refused,
            });
        }
        if self.plan.image.is_some() {
            // An image's root is an overlay mount: there is no root to swap without a mount
            // namespace, and running on the host's root instead would run something else.
            return Err(EngineError::Setup {
                step: "creating namespaces (clone)".into(),
                message: format!(
                    "{refused}; running from an image needs a mount namespace (its root                      replaces the host's), so --image cannot run on this host"
                ),
                errno: why.raw_os_error(),
            });
        }
        if self.plan.kernel_landlock_abi == 0 && !self.allow_no_landlock {
            return Err(EngineError::Required {
                missing: Layer::Landlock.name().to_string(),
                hint: format!(
                    "{refused}, and without namespaces Landlock is the only wall around the \
                     host's files, but this kernel has none; --allow-no-landlock runs anyway, \
                     with the host's files protected by their permissions only"
                ),
            });
        }
        let dir = make_run_dir(self.plan.host_uid, self.plan.host_gid, self.plan.drop_root)
            .map_err(|e| EngineError::io("creating the sandbox's scratch directory", e))?;
        self.plan.degrade(&dir);
        self.run_dir = Some(dir);
        // The tree stays below us even if the init dies first: we kill what is left.
        sys::set_child_subreaper().map_err(|e| EngineError::io("becoming a subreaper", e))?;
        self.notes.push(format!(
            "the host refused namespaces ({why}): the sandbox runs without them (see `cordon check`)"
        ));
        Ok(())
    }

    pub fn enforcement(&self) -> Enforcement {
        Enforcement {
            cgroup: self.cgroup_name.clone(),
            rlimits: true,
            landlock_abi: 0,
            host_uid: Some(self.host_uid),
            notes: self.notes.clone(),
            ..Enforcement::default()
        }
    }

    /// Finds where this host keeps cgroups and creates the planned one. Without one the
    /// sandbox runs on rlimits, and says so — unless the caller required a cgroup. (Done while
    /// the init builds its root, not before the clone: reading mountinfo and
    /// /proc/self/cgroup costs a fresh process ~0.1 ms.)
    fn create_cgroup(&mut self) -> Result<(), EngineError> {
        let Some(cp) = self.cgroup_plan.take() else {
            return Ok(());
        };
        let made = cgroup::detect().and_then(|layout| {
            if let Some(why) = cgroup::cannot_create(&layout) {
                return Err(why);
            }
            let mut cg =
                Cgroup::create(&layout, &cp.name, &cp.limits).map_err(|e| e.to_string())?;
            if cp.nested {
                cg.nest_for_commands().map_err(|e| e.to_string())?;
            }
            Ok((layout.version(), cg))
        });
        match made {
            Ok((version, c)) => {
                self.cgroup_name = version.name().to_string();
                self.cgroup = Some(c);
                Ok(())
            }
            Err(e) if cp.required => Err(EngineError::Required {
                missing: Layer::Cgroup.name().to_string(),
                hint: format!("no usable cgroup: {e}"),
            }),
            Err(e) => {
                self.notes.push(no_cgroup_note(&e));
                Ok(())
            }
        }
    }
}

/// The layers only a namespace gives.
pub const NAMESPACE_LAYERS: [Layer; 7] = [
    Layer::UserNs,
    Layer::PidNs,
    Layer::NetNs,
    Layer::MountNs,
    Layer::IpcNs,
    Layer::UtsNs,
    Layer::CgroupNs,
];

/// What a sandbox without namespaces does not have, one note each, for `enforcement.notes`.
pub fn degraded_notes(landlock_abi: u32, network: bool) -> Vec<String> {
    let mut notes = vec![
        "no pid namespace: the host's processes are visible in /proc (their command lines \
         too); signals to them are refused only by Landlock's scoping (ABI 6+)"
            .to_string(),
        "no mount namespace: the host's filesystem is fenced by Landlock alone; /tmp, HOME \
         and the scratch /workspace are a per-run host directory (TMPDIR, HOME and the working \
         directory point there; a command's cwd and the files API translate those names, a \
         program that names /workspace itself does not find it); --disk is watched, not \
         capped: the directory's usage is looked at every 100 ms or more, and what runs while \
         it grows past the limit is killed (limits_hit: disk); each file is capped by \
         RLIMIT_FSIZE; no /dev/shm; --ro/--rw paths are seen at their host path"
            .to_string(),
        "no network namespace: sockets other than AF_UNIX are refused by seccomp; connecting \
         to the host's AF_UNIX sockets by path is refused (connect) only without a network \
         policy"
            .to_string(),
        "no ipc or uts namespace: System V IPC and POSIX message queues are refused \
         (seccomp: their objects would be the host's); the hostname is the host's"
            .to_string(),
        "no user namespace: the sandbox runs as its host uid itself".to_string(),
    ];
    if landlock_abi == 0 {
        notes.push(
            "no Landlock: the host's files are protected by their permissions only".to_string(),
        );
    } else if landlock_abi < 4 && network {
        notes.push(format!(
            "Landlock ABI {landlock_abi} has no TCP rules: TCP is refused, the egress proxy \
             cannot be reached"
        ));
    } else if landlock_abi >= 4 && network {
        notes.push(
            "TCP: connect only to the egress proxy's port (Landlock); AF_UNIX sockets of the \
             host are reachable by path; the proxy listens on the host's loopback, where other \
             local processes can reach it (and this run's allowlist) while the run lasts"
                .to_string(),
        );
    }
    if landlock_abi < 6 {
        notes.push(
            "no Landlock signal/abstract-socket scoping (ABI < 6): the host's processes of the \
             same uid can be signalled"
                .to_string(),
        );
    }
    notes
}

/// A fresh per-run directory with `tmp`, `home/sandbox` (and `home/user`, a link to it) and
/// `workspace` in it, 0700, owned by the sandbox's uid (made by root, handed over). Its name
/// is not guessable ahead: a name taken by someone else fails rather than being reused.
fn make_run_dir(uid: u32, gid: u32, chown: bool) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!(
        "cordon-run-{}-{}-{nanos:x}",
        sys::getpid(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    ));
    let mut b = std::fs::DirBuilder::new();
    b.mode(0o700);
    b.create(&dir)?;
    let made = (|| {
        let parts = plan::run_dir_parts(&dir);
        let parents = parts
            .iter()
            .filter_map(|p| p.parent())
            .filter(|p| *p != dir);
        for d in parents.map(|p| p.to_path_buf()).chain(parts.clone()) {
            b.create(&d)?;
            if chown {
                std::os::unix::fs::chown(&d, Some(uid), Some(gid))?;
            }
        }
        // The home's other name, as in a sandbox's own root.
        std::os::unix::fs::symlink(
            "sandbox",
            dir.join(plan::HOME_ALIAS.trim_start_matches('/')),
        )?;
        if chown {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
        }
        Ok(())
    })();
    match made {
        Ok(()) => Ok(dir),
        Err(e) => {
            remove_run_dir(&dir);
            Err(e)
        }
    }
}

/// Removes a run directory whatever the sandbox did to it (a directory it made unreadable is
/// made ours again first). Symlinks are removed, never followed.
fn remove_run_dir(dir: &std::path::Path) {
    if std::fs::remove_dir_all(dir).is_ok() {
        return;
    }
    fn open_up(p: &std::path::Path) {
        use std::os::unix::fs::PermissionsExt;
        let Ok(meta) = std::fs::symlink_metadata(p) else {
            return;
        };
        if meta.is_dir() {
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700));
            if let Ok(entries) = std::fs::read_dir(p) {
                for e in entries.flatten() {
                    open_up(&e.path());
                }
            }
        }
    }
    open_up(dir);
    let _ = std::fs::remove_dir_all(dir);
}

/// A run that ends early (a required layer found missing once the init was cloned, say)
/// leaves no scratch directory behind either; `supervisor::run` keeps its `Prepared` until
/// nothing of the sandbox runs.
impl Drop for Prepared {
    fn drop(&mut self) {
        self.cleanup();
    }
}

fn no_cgroup_note(why: &str) -> String {
    format!("no cgroup ({why}): memory and pids limited per process by rlimits only")
}

/// A unique name per sandbox of this process (one-shot runs use one; a helper uses one).
fn cgroup_name(pid: libc::pid_t) -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    format!("{pid}-{}", SEQ.fetch_add(1, Ordering::SeqCst))
}

/// The supervisor's side of the handshake up to `Go`, step by step in the order
/// `channel.rs` lists: the init's id maps, `Mapped`, the cgroup, `Go` with its files.
fn handshake_to_go(
    prepared: &mut Prepared,
    init: libc::pid_t,
    chan: &Channel,
) -> Result<(), EngineError> {
    let io = |what: &'static str| move |e: std::io::Error| EngineError::io(what, e);
    // 1. The maps (none without a user namespace: the init runs as its host ids).
    if !prepared.plan.no_namespaces {
        write_id_maps(init, &prepared.plan).map_err(io("writing the sandbox's uid/gid maps"))?;
    }
    // 2. The init may take on its sandbox identity and build its root.
    chan.send(&ToSandbox::Mapped)
        .map_err(io("starting the sandbox"))?;
    // 3. Meanwhile, the cgroup (or the note that says why there is none).
    prepared.create_cgroup()?;
    // 4. Go, with what joins the cgroup.
    let join = match &prepared.cgroup {
        Some(cg) => cg.join_files().map_err(io("opening the cgroup to join"))?,
        None => Vec::new(),
    };
    let raw: Vec<_> = join.iter().map(|f| f.as_raw_fd()).collect();
    let go = ToSandbox::Go {
        cgroup: prepared.cgroup.is_some(),
        count_at_end: prepared
            .cgroup
            .as_ref()
            .is_none_or(|c| !c.keeps_peak_pids()),
    };
    chan.send_with_fds(&go, &raw)
        .map_err(io("starting the sandbox"))
}

pub(crate) fn prepare(
    profile: &Profile,
    argv: &[String],
    cwd: Option<&str>,
    env: &BTreeMap<String, String>,
    persistent: bool,
) -> Result<Prepared, EngineError> {
    profile
        .validate()
        .map_err(|e| EngineError::Invalid(e.to_string()))?;
    let pid = sys::getpid();
    let euid = sys::geteuid();
    let abi = detect::landlock_abi();

    // The cgroup: without one, rlimits stand in (and say so). Whether this host offers one
    // is found out, and the cgroup created, once the init is cloned, in parallel with the
    // init's setup (see `create_cgroup`, which also enforces a required cgroup).
    let mut notes = Vec::new();
    let cgroup_plan = Some(CgroupPlan {
        name: cgroup_name(pid),
        limits: CgroupLimits {
            memory: profile.limits.memory,
            // The init is ours, not the payload's; so is a persistent sandbox's command's
            // sub-init.
            pids: u64::from(profile.limits.pids) + 1 + u64::from(persistent),
            cpus: profile.limits.cpus,
            cpu_time: profile.limits.cpu_time.is_some(),
        },
        required: profile.require.contains(&Layer::Cgroup),
        nested: persistent,
    });
    check_required(profile, abi, true)?;

    // Host identity of the sandbox: never host root.
    let unique = ROOT_MODE_UID_BASE + pid as u32;
    let (host_uid, host_gid, drop_root) = if euid == 0 {
        match profile.workspace.as_ref().map(std::fs::metadata) {
            // Run as the workspace's owner, so its files stay theirs and it is writable.
            Some(Ok(m)) if m.uid() != 0 => (m.uid(), m.gid(), true),
            _ => (unique, unique, true),
        }
    } else {
        (euid, sys::getegid(), false)
    };
    let mut plan = plan::build(PlanInput {
        profile,
        argv,
        cwd,
        extra_env: env,
        host_uid,
        host_gid,
        drop_root,
        kernel_landlock_abi: abi,
        persistent_ok: persistent,
    })?;
    plan.persistent = persistent;
    // A root-owned workspace, as root: idmap it so the sandbox user may write there.
    let mut workspace_tree = None;
    let mut mapping_children = Vec::new();
    let root_owned_workspace = euid == 0 && host_uid >= ROOT_MODE_UID_BASE;
    if let Some(ws) = profile.workspace.as_ref().filter(|_| root_owned_workspace) {
        match idmap::workspace_tree(ws, host_uid, host_gid) {
            Ok((tree, child)) => {
                mapping_children.push(child);
                plan.workspace_tree = Some(tree.as_raw_fd());
                workspace_tree = Some(tree);
                notes.push(
                    "the workspace is owned by root and mounted idmapped: root's files there are \
                     the sandbox user's, and what it creates belongs to root on the host"
                        .to_string(),
                );
            }
            Err(why) => notes.push(format!(
                "the workspace is owned by root and could not be idmapped ({why}); the sandbox \
                 runs as host uid {host_uid} and can write there only where permissions allow"
            )),
        }
    }
    // An image as root: its layers are host root's (and in a 0700 store); the sandbox gets
    // idmapped copies in which root's files are its own.
    let mut layer_trees = Vec::new();
    if let Some(img) = plan.image.as_mut().filter(|_| euid == 0) {
        let layers: Vec<&std::path::Path> = img.layers.iter().map(|l| l.as_path()).collect();
        let (trees, child) =
            idmap::layer_trees(&layers, host_uid, host_gid).map_err(|why| EngineError::Setup {
                step: "mounting the image's layers".into(),
                message: format!(
                    "{why} (an image run as root needs idmapped mounts: Linux 5.12+ and a \
                     filesystem that supports them)"
                ),
                errno: None,
            })?;
        layer_trees = trees;
        mapping_children.push(child);
        img.layer_trees = layer_trees.iter().map(|t| t.as_raw_fd()).collect();
        // A build's writable layer on the host (root's, like the store): idmapped the same
        // way, writable, so what the step creates is root's on disk and the sandbox's inside.
        if let Some(upper) = img.upper.clone() {
            let (mut trees, child) =
                idmap::bind_trees(&[(upper.as_path(), false)], host_uid, host_gid).map_err(
                    |why| EngineError::Setup {
                        step: "mounting the image's writable layer".into(),
                        message: format!("{why} (idmapped mounts: Linux 5.12+)"),
                        errno: None,
                    },
                )?;
            mapping_children.push(child);
            if let Some(t) = trees.pop() {
                img.upper_tree = Some(t.as_raw_fd());
                layer_trees.push(t);
            }
        }
    }
    // Binds the service asked to idmap (volumes), as root: files of host root's that every
    // sandbox sharing them, whatever its host uid, sees as its own.
    if euid == 0 {
        let wanted: Vec<(PathBuf, bool)> = plan
            .root
            .iter()
            .filter_map(|e| match e {
                plan::RootEntry::Bind {
                    src,
                    writable,
                    idmap: true,
                    ..
                } => Some((src.clone(), !*writable)),
                _ => None,
            })
            .collect();
        if !wanted.is_empty() {
            let dirs: Vec<(&std::path::Path, bool)> =
                wanted.iter().map(|(p, ro)| (p.as_path(), *ro)).collect();
            let (trees, child) =
                idmap::bind_trees(&dirs, host_uid, host_gid).map_err(|why| EngineError::Setup {
                    step: "idmapping a volume".into(),
                    message: format!("{why} (volumes as root need idmapped mounts: Linux 5.12+)"),
                    errno: None,
                })?;
            mapping_children.push(child);
            let mut fds = trees.iter().map(|t| t.as_raw_fd());
            for e in plan.root.iter_mut() {
                if let plan::RootEntry::Bind {
                    idmap: true, tree, ..
                } = e
                {
                    *tree = fds.next();
                }
            }
            layer_trees.extend(trees);
        }
    }
    Ok(Prepared {
        workspace_tree,
        layer_trees,
        mapping_children,
        cgroup: None,
        cgroup_plan,
        cgroup_name: "none".to_string(),
        plan,
        host_uid,
        notes,
        require: profile.require.clone(),
        allow_no_landlock: profile.allow_no_landlock,
        run_dir: None,
    })
}

/// Clones the sandbox's init into fresh namespaces with the given stdio, writes its id maps,
/// and creates the cgroup while the init builds its root; then hands the init what it needs
/// to join the cgroup (see `cgroup::join`) and lets it go on. Returns (init pid, channel);
/// the cgroup is left in `prepared.cgroup`. The calling process must be single-threaded.
pub(crate) fn spawn_init(
    prepared: &mut Prepared,
    stdio: Stdio,
) -> Result<(libc::pid_t, Channel), EngineError> {
    let io = |what: &str| {
        let what = what.to_string();
        move |e: std::io::Error| EngineError::io(what, e)
    };
    let (chan_parent, chan_child) = sys::seqpacket_pair().map_err(io("channel"))?;
    if prepared.plan.drop_root {
        // The init starts with our credentials until its maps are written and it takes on
        // the sandbox's ids; host root's supplementary groups must not come along (inside, a
        // gid_map written with setgroups denied could never shed them). cordon as root needs
        // no group membership for anything it does.
        sys::setgroups_empty().map_err(io("dropping supplementary groups"))?;
    }
    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS;
    let mut cloned = if !prepared.plan.drop_root && detect::apparmor_denies_userns(sys::geteuid()) {
        Err(std::io::Error::other(
            "AppArmor gives cordon's user namespaces no capabilities here \
             (kernel.apparmor_restrict_unprivileged_userns = 1, and cordon runs unconfined)",
        ))
    } else {
        // SAFETY: the caller guarantees this process is single-threaded (see the crate docs);
        // the child runs only `init_entry`, which keeps to what `clone_into` allows.
        unsafe { sys::clone_into(flags) }
    };
    if let Err(e) = &cloned {
        // Refused namespaces (EPERM: AppArmor, a container's seccomp profile, the
        // unprivileged_userns_clone sysctl; ENOSPC: max_user_namespaces; EINVAL/EUSERS/
        // ENOSYS): the layers that need none, or a refusal the caller asked for.
        prepared.degrade(e)?;
        // SAFETY: as above; no namespace flags, so this is a plain fork.
        cloned = unsafe { sys::clone_into(0) };
    }
    let plan = &prepared.plan;
    let init = match cloned {
        Ok(sys::Fork::Child) => {
            drop(chan_parent);
            init::init_entry(plan, Channel::new(chan_child), stdio)
        }
        Ok(sys::Fork::Parent(p)) => p,
        Err(e) => {
            prepared.cleanup();
            return Err(EngineError::Setup {
                step: "starting the sandbox (clone)".into(),
                message: e.to_string(),
                errno: e.raw_os_error(),
            });
        }
    };
    // Close the child's ends at once, or we would never see EOF.
    drop((stdio, chan_child));
    prepared.workspace_tree = None;
    prepared.layer_trees.clear();
    let chan = Channel::new(chan_parent);
    let started = handshake_to_go(prepared, init, &chan);
    prepared.mapping_children.clear();
    // Clearing what dead cordons left behind waits until the sandbox is on its way.
    if let Some(cg) = &prepared.cgroup {
        cgroup::remove_stale(cg.layout());
    }
    match started {
        Ok(()) => Ok((init, chan)),
        Err(e) => {
            // An init that failed on its own said why before it went; that beats our
            // "broken pipe" or "no such process".
            let reported = reported_failure(&chan);
            // Killing a pid namespace's init takes the namespace with it.
            let _ = sys::kill(init, libc::SIGKILL);
            let _ = sys::wait4(init, false);
            Err(reported.unwrap_or(e))
        }
    }
}

/// A setup failure the init already reported, if one is waiting on the channel.
fn reported_failure(chan: &Channel) -> Option<EngineError> {
    if chan.poll_now(libc::POLLIN) & libc::POLLIN == 0 {
        return None;
    }
    match chan.recv::<ToSupervisor>() {
        Ok(Some((
            ToSupervisor::SetupFailed {
                step,
                message,
                errno,
            },
            _,
        ))) => Some(EngineError::Setup {
            step,
            message,
            errno,
        }),
        _ => None,
    }
}

/// Maps the sandbox's one user and group (the plan's inner ids: `INNER_ID`, or an image
/// run's `--user`) to the plan's host ids, for the freshly cloned `pid`: one id each, so
/// whatever the id inside, outside it is the one unprivileged host id. setgroups is denied
/// first (CVE-2014-8989; required of an unprivileged writer, kept for root too so the
/// sandbox can never change its groups).
fn write_id_maps(pid: libc::pid_t, plan: &plan::Plan) -> std::io::Result<()> {
    let proc_file = |name: &str| PathBuf::from(format!("/proc/{pid}/{name}"));
    sys::write_file(&proc_file("setgroups"), "deny")?;
    sys::write_file(
        &proc_file("uid_map"),
        &format!("{} {} 1\n", plan.inner_uid, plan.host_uid),
    )?;
    sys::write_file(
        &proc_file("gid_map"),
        &format!("{} {} 1\n", plan.inner_gid, plan.host_gid),
    )
}

/// Records what the init reported as confined.
/// `degraded`: `None` when the sandbox has its namespaces; else whether it has a network
/// policy (the namespaces are then reported missing, with what that leaves open: see
/// `degraded_notes`).
pub(crate) fn apply_confined(
    enforcement: &mut Enforcement,
    msg: &ToSupervisor,
    degraded: Option<bool>,
) {
    let namespaces = degraded.is_none();
    if let ToSupervisor::Confined {
        landlock_abi,
        landlock_partial,
        seccomp,
        rlimits,
        notes,
        ..
    } = msg
    {
        enforcement.user_ns = namespaces;
        enforcement.pid_ns = namespaces;
        enforcement.net_ns = namespaces;
        enforcement.mount_ns = namespaces;
        enforcement.ipc_ns = namespaces;
        enforcement.uts_ns = namespaces;
        enforcement.cgroup_ns = namespaces;
        enforcement.seccomp = *seccomp;
        enforcement.rlimits = *rlimits;
        enforcement.landlock_abi = *landlock_abi;
        if *landlock_partial {
            enforcement.notes.push(crate::landlock_rules::partial_note(
                crate::detect::landlock_abi(),
            ));
        }
        if let Some(network) = degraded {
            enforcement
                .notes
                .extend(degraded_notes(*landlock_abi, network));
        }
        enforcement
            .notes
            .extend(notes.iter().take(16).map(|n| n.chars().take(500).collect()));
    }
}
