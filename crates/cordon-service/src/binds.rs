//! Host directories a create request asks to bind into a sandbox (the Docker door's `Binds`),
//! allowed only under the roots the operator named (`cordon serve --docker-bind-root`).
//!
//! Threat model: the request is hostile. It may name `/`, `/etc`, a path with `..`, or a
//! symlink under an allowed root that points out of it; the source is resolved (symlinks
//! followed) before it is compared with the roots, so what gets bound is the resolved
//! directory, and nothing outside the roots is ever bound. The destination must be a plain
//! absolute path outside the system directories (the same rule as volumes); a writable bind
//! at `/workspace` is the sandbox's workspace (as root, a sandbox then runs as the directory's
//! owner, or idmapped when root owns it: never as host root).

use std::path::{Path, PathBuf};

use crate::error::ServiceError;

/// A bind a request asks for: a host path, where it goes, and whether it is writable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostBind {
    pub source: String,
    pub dest: String,
    pub writable: bool,
}

/// A bind there is the sandbox's workspace, not a mount of its own.
const WORKSPACE: &str = "/workspace";

/// Host paths never bound, whatever the roots: the host's system.
const NEVER: &[&str] = &[
    "/", "/etc", "/proc", "/sys", "/dev", "/boot", "/run", "/root",
];

/// Checks each bind against `roots` and adds it to the profile; the first refusal names the
/// bind and why. `field` is the request's name for the list (e.g. `HostConfig.Binds`).
pub(crate) fn add(
    roots: &[PathBuf],
    binds: &[HostBind],
    profile: &mut cordon_policy::Profile,
    field: &str,
) -> Result<(), ServiceError> {
    for b in binds {
        let refuse = |why: &str| {
            ServiceError::forbidden(format!(
                "{field}: bind of '{}' refused: {why}",
                b.source.chars().take(200).collect::<String>()
            ))
        };
        let source = Path::new(&b.source);
        if !source.is_absolute() {
            return Err(ServiceError::bad_request(format!(
                "{field}: '{}' is not an absolute host path (named volumes are not supported)",
                b.source.chars().take(200).collect::<String>()
            )));
        }
        let lexical = cordon_policy::lexical::resolve("/", &b.source);
        if NEVER
            .iter()
            .any(|n| *n == lexical || (*n != "/" && Path::new(&lexical).starts_with(n)))
        {
            return Err(refuse("the host's system directories are never bound"));
        }
        if roots.is_empty() {
            return Err(refuse(
                "this server allows no host binds (cordon serve --docker-bind-root DIR allows some)",
            ));
        }
        let real = std::fs::canonicalize(source)
            .map_err(|e| refuse(&format!("cannot resolve it on the host: {e}")))?;
        let real_str = real.to_string_lossy();
        if NEVER
            .iter()
            .any(|n| *n == real_str || (*n != "/" && real.starts_with(n)))
        {
            return Err(refuse("the host's system directories are never bound"));
        }
        let inside = roots.iter().any(|r| {
            std::fs::canonicalize(r)
                .is_ok_and(|root| real.starts_with(&root) && root != Path::new("/"))
        });
        if !inside {
            return Err(refuse("it is outside the server's allowed bind roots"));
        }
        let dest = crate::volumes::valid_mount_path(&b.dest)
            .map_err(|e| ServiceError::bad_request(format!("{field}: {}", e.message)))?;
        if dest == Path::new(WORKSPACE) {
            // Docker code binds its work dir there (AutoGen's executor does): it becomes the
            // sandbox's workspace, as `cordon run --workspace` makes one.
            if !b.writable {
                return Err(ServiceError::bad_request(format!(
                    "{field}: a read-only bind at {WORKSPACE} is not supported (bind it \
                     writable, or read-only elsewhere)"
                )));
            }
            if profile.workspace.is_some() {
                return Err(ServiceError::bad_request(format!(
                    "{field}: only one bind can be {WORKSPACE}"
                )));
            }
            profile.workspace = Some(real);
            continue;
        }
        profile.binds.push(cordon_policy::profile::Bind {
            source: real,
            dest,
            writable: b.writable,
            idmap: true,
            limit: None,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(source: &str) -> HostBind {
        HostBind {
            source: source.into(),
            dest: "/data".into(),
            writable: true,
        }
    }

    #[test]
    fn root_etc_and_paths_outside_the_roots_are_refused_and_nothing_is_added() {
        let root = std::env::temp_dir().join(format!("cordon-binds-{}", std::process::id()));
        std::fs::create_dir_all(root.join("ok")).unwrap();
        let _ = std::os::unix::fs::symlink("/etc", root.join("escape"));
        let roots = vec![root.clone()];
        let mut p = cordon_policy::Profile::builtin("default").unwrap();
        let before = p.binds.len();
        for s in ["/", "/etc", "/etc/../etc", "/tmp/..", "/usr"] {
            assert!(add(&roots, &[bind(s)], &mut p, "Binds").is_err(), "{s}");
        }
        let escape = root.join("escape").to_string_lossy().to_string();
        assert!(add(&roots, &[bind(&escape)], &mut p, "Binds").is_err());
        assert_eq!(p.binds.len(), before);
        let ok = root.join("ok").to_string_lossy().to_string();
        add(&roots, &[bind(&ok)], &mut p, "Binds").unwrap();
        assert_eq!(p.binds.len(), before + 1);
        assert!(add(&[], &[bind(&ok)], &mut p, "Binds").is_err());
        let _ = std::fs::remove_dir_all(&root);
    }
}
