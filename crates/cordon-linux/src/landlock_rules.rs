//! Landlock rules that mirror the mount layout, so that a mount-namespace escape still finds
//! the filesystem fenced. Best effort above ABI 1; the status is reported, never assumed.

use std::path::PathBuf;

use landlock::{
    Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
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
}

/// What was enforced.
pub struct Applied {
    pub abi: u32,
    pub partial: bool,
}

/// The newest ABI cordon asks for; older kernels get what they support (best effort).
const TARGET: ABI = ABI::V6;

pub fn apply(rules: &FsRules, kernel_abi: u32) -> Result<Applied, String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET))
        .map_err(|e| err(&e))?;
    if kernel_abi >= 6 {
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(|e| err(&e))?;
    }
    let mut created = ruleset.create().map_err(|e| err(&e))?;
    let read = AccessFs::from_read(TARGET);
    let read_no_exec = read & !AccessFs::Execute;
    let file_rw = (AccessFs::from_file(TARGET)) & !AccessFs::Execute;
    let groups: [(&Vec<PathBuf>, _); 5] = [
        (&rules.read_exec, read),
        (&rules.read_write, AccessFs::from_all(TARGET)),
        (&rules.files_rw, file_rw),
        (&rules.read_only, read_no_exec),
        (&rules.list_only, AccessFs::ReadDir.into()),
    ];
    for (paths, access) in groups {
        for p in paths {
            // A path that vanished (optional system dir) simply gets no rule.
            let Ok(fd) = PathFd::new(p) else { continue };
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| format!("rule for {}: {e}", p.display()))?;
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
