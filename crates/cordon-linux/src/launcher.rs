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
    pub cgroup_name: String,
    pub plan: plan::Plan,
    pub host_uid: u32,
    pub notes: Vec<String>,
}

impl Prepared {
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

fn no_cgroup_note(why: &str) -> String {
    format!("no cgroup ({why}): memory and pids limited per process by rlimits only")
}

/// A unique name per sandbox of this process (one-shot runs use one; a helper uses one).
fn cgroup_name(pid: libc::pid_t) -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    format!("{pid}-{}", SEQ.fetch_add(1, Ordering::SeqCst))
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
    let root_owned_workspace = euid == 0 && host_uid >= ROOT_MODE_UID_BASE;
    if let Some(ws) = profile.workspace.as_ref().filter(|_| root_owned_workspace) {
        match idmap::workspace_tree(ws, host_uid, host_gid) {
            Ok(tree) => {
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
    Ok(Prepared {
        workspace_tree,
        cgroup: None,
        cgroup_plan,
        cgroup_name: "none".to_string(),
        plan,
        host_uid,
        notes,
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
    let plan = &prepared.plan;
    if plan.drop_root {
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
    // SAFETY: the caller guarantees this process is single-threaded (see the crate docs); the
    // child runs only `init_entry`, which keeps to what `clone_into` allows.
    let init = match unsafe { sys::clone_into(flags) } {
        Ok(sys::Fork::Child) => {
            drop(chan_parent);
            init::init_entry(plan, Channel::new(chan_child), stdio)
        }
        Ok(sys::Fork::Parent(p)) => p,
        Err(e) => {
            let who = if plan.drop_root { "" } else { "unprivileged " };
            return Err(EngineError::Setup {
                step: "creating namespaces (clone)".into(),
                message: format!(
                    "{e}; this host refuses {who}user namespaces (see `cordon check`)"
                ),
                errno: e.raw_os_error(),
            });
        }
    };
    // Close the child's ends at once, or we would never see EOF.
    drop((stdio, chan_child));
    prepared.workspace_tree = None;
    let chan = Channel::new(chan_parent);
    let started = write_id_maps(init, plan.host_uid, plan.host_gid)
        .map_err(io("writing the sandbox's uid/gid maps"))
        .and_then(|_| {
            chan.send(&ToSandbox::Mapped)
                .map_err(io("starting the sandbox"))
        })
        .and_then(|_| prepared.create_cgroup())
        .and_then(|_| {
            let join = match &prepared.cgroup {
                Some(cg) => cg.join_files().map_err(io("opening the cgroup to join"))?,
                None => Vec::new(),
            };
            let raw: Vec<_> = join.iter().map(|f| f.as_raw_fd()).collect();
            chan.send_with_fds(
                &ToSandbox::Go {
                    cgroup: prepared.cgroup.is_some(),
                },
                &raw,
            )
            .map_err(io("starting the sandbox"))
        });
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

/// Maps the sandbox's one user and group (`INNER_ID`) to `uid`/`gid` on the host, for the
/// freshly cloned `pid`. setgroups is denied first (CVE-2014-8989; required of an
/// unprivileged writer, kept for root too so the sandbox can never change its groups).
fn write_id_maps(pid: libc::pid_t, uid: u32, gid: u32) -> std::io::Result<()> {
    let proc_file = |name: &str| PathBuf::from(format!("/proc/{pid}/{name}"));
    sys::write_file(&proc_file("setgroups"), "deny")?;
    sys::write_file(
        &proc_file("uid_map"),
        &format!("{} {uid} 1\n", plan::INNER_ID),
    )?;
    sys::write_file(
        &proc_file("gid_map"),
        &format!("{} {gid} 1\n", plan::INNER_ID),
    )
}

/// Records what the init reported as confined.
pub(crate) fn apply_confined(enforcement: &mut Enforcement, msg: &ToSupervisor) {
    if let ToSupervisor::Confined {
        landlock_abi,
        landlock_partial,
        seccomp,
        rlimits,
        notes,
        ..
    } = msg
    {
        enforcement.user_ns = true;
        enforcement.pid_ns = true;
        enforcement.net_ns = true;
        enforcement.mount_ns = true;
        enforcement.ipc_ns = true;
        enforcement.uts_ns = true;
        enforcement.cgroup_ns = true;
        enforcement.seccomp = *seccomp;
        enforcement.rlimits = *rlimits;
        enforcement.landlock_abi = *landlock_abi;
        if *landlock_partial {
            enforcement.notes.push(format!(
                "Landlock partially enforced (kernel ABI {landlock_abi})"
            ));
        }
        enforcement
            .notes
            .extend(notes.iter().take(16).map(|n| n.chars().take(500).collect()));
    }
}
