//! One rule, enforced twice: a path rule's denied globs shape the mounts of the sandbox an
//! upstream server runs in, whatever brought each mount in — the gateway's `ro`/`rw` keys,
//! the server's profile file (`[filesystem] ro/rw`, `workspace`), the system view every
//! sandbox gets. The caller resolves the server's final profile first and carves it here, in
//! one place. Pure data: the caller passes the host paths its engine mounts for the system
//! view.
//!
//! Threat: hostile or confused server code (or a file a user dropped in a shared directory)
//! plants a symlink, a hard link or a `..` behind a link in a mounted tree; the gateway's
//! lexical check on the argument sees an allowed path, the kernel resolves it into a denied
//! one. What is not mounted, or is hidden under an empty mount with Landlock granting the
//! tree minus it, the kernel cannot reach. A mount that cannot be carved that way is refused,
//! naming the mount and the rule: the server does not start weaker than its rule says.

use std::path::{Path, PathBuf};

use cordon_policy::Profile;

use crate::paths::{is_within, normalise, PathGlob};

/// A deny glob and the rule it comes from (for messages).
#[derive(Debug, Clone)]
pub struct DeniedPath {
    /// e.g. `rules[1] (tool = "files.delete_file"): paths.path.deny`.
    pub rule: String,
    pub glob: PathGlob,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{mount} cannot be carved for {rule} (\"{glob}\"): {why}")]
pub struct CarveError {
    /// The mount, as the operator would recognise it (`bind /srv/files:/files (rw)`).
    pub mount: String,
    pub rule: String,
    pub glob: String,
    pub why: String,
}

fn bind_name(source: &Path, dest: &Path, writable: bool) -> String {
    format!(
        "bind {}:{} ({})",
        source.display(),
        dest.display(),
        if writable { "rw" } else { "ro" }
    )
}

/// `rel` of `path` below `dir` (both lexically clean), if it is strictly below.
fn strictly_below(path: &Path, dir: &Path) -> Option<PathBuf> {
    path.strip_prefix(dir)
        .ok()
        .filter(|r| !r.as_os_str().is_empty())
        .map(Path::to_path_buf)
}

/// Carves `p` for `denied`: binds a deny covers are left out, denied subtrees and files
/// inside a bind are hidden, and the same host directories reached through another bind are
/// hidden there too. `system` is what the engine mounts from the host for the profile's
/// system view (none with an image). Returns notes for the operator; an error names the
/// first mount that cannot be carved.
pub fn carve(
    p: &mut Profile,
    denied: &[DeniedPath],
    system: &[&str],
) -> Result<Vec<String>, CarveError> {
    let mut notes = Vec::new();
    if denied.is_empty() {
        return Ok(notes);
    }
    let err = |mount: String, d: &DeniedPath, why: &str| CarveError {
        mount,
        rule: d.rule.clone(),
        glob: d.glob.text().to_string(),
        why: why.to_string(),
    };
    // Host paths whose content a rule denies, as (host path, rule): a left-out bind's
    // source, a hidden path's source. Another bind reaching them is carved the same way.
    let mut denied_host: Vec<(PathBuf, &DeniedPath)> = Vec::new();
    let mut kept = Vec::new();
    for b in std::mem::take(&mut p.binds) {
        let name = bind_name(&b.source, &b.dest, b.writable);
        let dest = normalise(&b.dest.to_string_lossy()).map_err(|e| CarveError {
            mount: name.clone(),
            rule: String::new(),
            glob: String::new(),
            why: format!("its destination {e}"),
        })?;
        if let Some(d) = denied.iter().find(|d| d.glob.matches(&dest)) {
            notes.push(format!(
                "{name} is not mounted: {} denies {dest} and the sandbox must not see it",
                d.rule
            ));
            denied_host.push((b.source.clone(), d));
            continue;
        }
        for d in denied {
            // A denied subtree or file inside the bind: hidden (mounted over, and left out of
            // the bind's Landlock grant).
            if let Some(sub) = d
                .glob
                .subtree()
                .filter(|s| is_within(s, &dest) && *s != dest)
            {
                let h = PathBuf::from(&sub);
                if let Some(rel) = strictly_below(&h, Path::new(&dest)) {
                    denied_host.push((b.source.join(rel), d));
                }
                if !p.hide.contains(&h) {
                    p.hide.push(h);
                }
                continue;
            }
            if d.glob.reaches_below(&dest) {
                return Err(err(
                    name,
                    d,
                    "the glob is not one subtree or file, so no mount can hide what it matches inside the bind from a symlink; deny a literal path or DIR/** instead, or leave the bind out",
                ));
            }
        }
        kept.push(b);
    }
    // The same host directory through another bind: `/srv/system` denied at `/system` is
    // still `/data/system` in a bind of `/srv` at `/data`.
    for b in &kept {
        for (host, d) in &denied_host {
            if let Some(rel) = strictly_below(host, &b.source) {
                let h = b.dest.join(rel);
                if !p.hide.contains(&h) {
                    p.hide.push(h);
                }
            } else if b.source.starts_with(host) {
                return Err(err(
                    bind_name(&b.source, &b.dest, b.writable),
                    d,
                    &format!(
                        "it brings in {}, whose content the rule denies at another path",
                        host.display()
                    ),
                ));
            }
        }
    }
    p.binds = kept;
    if let Some(ws) = p.workspace.clone() {
        let name = format!("the workspace {} at /workspace", ws.display());
        if let Some(d) = denied.iter().find(|d| d.glob.matches("/workspace")) {
            notes.push(format!(
                "{name} is not mounted (a fresh tmpfs instead): {} denies /workspace",
                d.rule
            ));
            p.workspace = None;
        } else {
            for d in denied {
                let inside = d
                    .glob
                    .subtree()
                    .is_some_and(|s| is_within(&s, "/workspace"));
                if inside || d.glob.reaches_below("/workspace") {
                    return Err(err(
                        name,
                        d,
                        "a path inside the workspace cannot be hidden; deny /workspace/** as a whole, or mount the directory as a bind instead (ro/rw), where denied subtrees are hidden",
                    ));
                }
            }
            for (host, d) in &denied_host {
                if strictly_below(host, &ws).is_some() || ws.starts_with(host) {
                    return Err(err(
                        name.clone(),
                        d,
                        &format!(
                            "it brings in {}, whose content the rule denies at another path",
                            host.display()
                        ),
                    ));
                }
            }
        }
    }
    if p.image.is_none() && p.root_image.is_none() {
        for sys in system {
            for d in denied {
                let inside = d.glob.subtree().is_some_and(|s| is_within(&s, sys));
                if inside || d.glob.matches(sys) || d.glob.reaches_below(sys) {
                    return Err(err(
                        format!("the system view's {sys} (the host's, read-only)"),
                        d,
                        "cordon mounts it from the host into every sandbox and cannot hide a path in it; give the server an image (image = \"…\" in its profile), whose files are the sandbox's own",
                    ));
                }
            }
        }
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_policy::profile::Bind;

    fn deny(globs: &[&str]) -> Vec<DeniedPath> {
        globs
            .iter()
            .map(|g| DeniedPath {
                rule: "rules[0] (tool = \"files.delete_file\"): paths.path.deny".into(),
                glob: PathGlob::new(g).unwrap(),
            })
            .collect()
    }

    fn profile(binds: &[(&str, bool)]) -> Profile {
        let mut p = Profile::builtin("default").unwrap();
        for (spec, rw) in binds {
            p.binds.push(Bind::parse(spec, *rw).unwrap());
        }
        p
    }

    const SYSTEM: &[&str] = &["/usr", "/bin", "/lib", "/etc"];

    #[test]
    fn a_bind_the_profile_brings_is_carved_like_the_gateways_own() {
        let mut p = profile(&[("/srv/system:/system", true), ("/srv/files:/files", true)]);
        let notes = carve(&mut p, &deny(&["/system/**"]), SYSTEM).unwrap();
        assert_eq!(p.binds.len(), 1);
        assert_eq!(p.binds[0].dest, Path::new("/files"));
        assert!(notes[0].contains("/srv/system:/system"), "{notes:?}");
        p.validate().unwrap();
    }

    #[test]
    fn a_denied_host_directory_is_hidden_in_every_bind_that_reaches_it() {
        let mut p = profile(&[("/srv/system:/system", true), ("/srv:/data", false)]);
        carve(&mut p, &deny(&["/system/**"]), SYSTEM).unwrap();
        assert_eq!(p.hide, vec![PathBuf::from("/data/system")]);
        let mut p = profile(&[("/srv:/data", true), ("/srv/data/secret:/s", false)]);
        let e = carve(&mut p, &deny(&["/data/data/**"]), SYSTEM).unwrap_err();
        assert!(e.mount.contains("/srv/data/secret:/s"), "{e}");
        let mut p = profile(&[("/srv:/data", true)]);
        carve(&mut p, &deny(&["/data/system/**"]), SYSTEM).unwrap();
        assert_eq!(p.hide, vec![PathBuf::from("/data/system")]);
    }

    #[test]
    fn what_cannot_be_carved_is_refused_naming_the_mount_and_the_rule() {
        let mut p = profile(&[("/srv/files:/files", true)]);
        let e = carve(&mut p, &deny(&["/files/*.key"]), SYSTEM).unwrap_err();
        assert!(e.mount.contains("/srv/files:/files"), "{e}");
        assert!(e.to_string().contains("files.delete_file"), "{e}");
        assert!(e.to_string().contains("/files/*.key"), "{e}");
        let mut p = profile(&[]);
        let e = carve(&mut p, &deny(&["/etc/shadow"]), SYSTEM).unwrap_err();
        assert!(e.mount.contains("/etc"), "{e}");
        let mut p = profile(&[]);
        p.workspace = Some("/home/me/project".into());
        let e = carve(&mut p, &deny(&["/workspace/secret/**"]), SYSTEM).unwrap_err();
        assert!(e.mount.contains("/home/me/project"), "{e}");
        let mut p = profile(&[]);
        p.workspace = Some("/home/me/project".into());
        carve(&mut p, &deny(&["/workspace/**"]), SYSTEM).unwrap();
        assert_eq!(p.workspace, None);
        // With an image, the system dirs are the sandbox's own.
        let mut p = profile(&[]);
        p.image = Some("python:3.12-slim".into());
        carve(&mut p, &deny(&["/etc/shadow"]), SYSTEM).unwrap();
    }
}
