//! Docker's `--user` resolved the way `docker run` does, inside an image: `uid[:gid]` as
//! numbers, or names looked up in the image's own `/etc/passwd` and `/etc/group` (the top-most
//! layer that has the file; a whiteout or an opaque `/etc` above hides lower ones).
//!
//! Threat model: the image is hostile. Its files are read beneath each layer's directory
//! through no symlink at all (a `/etc/passwd` that is a link is refused, never followed, so
//! nothing of the host's is ever read), at most 1 MiB each; the host's user database is never
//! consulted. What comes out are ids inside the sandbox's user namespace only.

use std::io::Read;
use std::path::PathBuf;

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};

/// The largest `/etc/passwd` or `/etc/group` read.
const MAX_DB: u64 = 1 << 20;

/// `(uid, gid)` for a Docker `User` (`name`, `uid`, `name:group`, `uid:gid`, …) in the image
/// whose layers are `layers` (top first). A numeric uid the image does not list gets gid 0, as
/// Docker gives it. The error says what could not be resolved.
pub fn resolve_user(layers: &[PathBuf], spec: &str) -> Result<(u32, u32), String> {
    let (user, group) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    if user.is_empty() || group.is_some_and(str::is_empty) {
        return Err(format!("'{spec}' is not user[:group]"));
    }
    let number = |s: &str| -> Option<Result<u32, String>> {
        s.bytes().all(|b| b.is_ascii_digit()).then(|| {
            s.parse::<u32>()
                .ok()
                .filter(|n| *n < u32::MAX)
                .ok_or_else(|| format!("'{s}' is not a valid id"))
        })
    };
    let passwd = || read_db(layers, "passwd");
    let (uid, user_gid) = match number(user) {
        Some(n) => {
            let n = n?;
            // The image's primary group for a listed uid, else 0 (Docker's default).
            let gid = passwd()?
                .as_deref()
                .and_then(|db| find(db, |f| f.get(2).and_then(|u| u.parse().ok()) == Some(n)))
                .and_then(|f| f.get(3).and_then(|g| g.parse().ok()))
                .unwrap_or(0);
            (n, gid)
        }
        None => {
            let db = passwd()?;
            let entry = db
                .as_deref()
                .and_then(|db| find(db, |f| f.first() == Some(&user)))
                .ok_or_else(|| {
                    format!("unable to find user {user}: no matching entries in the image's /etc/passwd")
                })?;
            let id = |i: usize| entry.get(i).and_then(|v| v.parse::<u32>().ok());
            match (id(2), id(3)) {
                (Some(u), Some(g)) if u < u32::MAX && g < u32::MAX => (u, g),
                _ => {
                    return Err(format!(
                        "the image's /etc/passwd entry for {user} has no valid ids"
                    ))
                }
            }
        }
    };
    let gid = match group {
        None => user_gid,
        Some(g) => match number(g) {
            Some(n) => n?,
            None => read_db(layers, "group")?
                .as_deref()
                .and_then(|db| find(db, |f| f.first() == Some(&g)))
                .and_then(|f| f.get(2).and_then(|v| v.parse::<u32>().ok()))
                .filter(|n| *n < u32::MAX)
                .ok_or_else(|| {
                    format!(
                        "unable to find group {g}: no matching entries in the image's /etc/group"
                    )
                })?,
        },
    };
    Ok((uid, gid))
}

/// The fields of the first line of `db` (colon-separated) that `pick` accepts.
fn find<'a>(db: &'a str, pick: impl Fn(&[&'a str]) -> bool) -> Option<Vec<&'a str>> {
    db.lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 3 && pick(f))
}

/// `/etc/<name>` of the image, as its root shows it: `None` when no layer has it.
fn read_db(layers: &[PathBuf], name: &str) -> Result<Option<String>, String> {
    let beneath = ResolveFlags::BENEATH
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_XDEV;
    for layer in layers {
        let Ok(root) = crate::fsutil::open_dir(layer) else {
            continue;
        };
        let rel = format!("etc/{name}");
        match rustix::fs::openat2(
            &root,
            rel.as_str(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
            beneath,
        ) {
            Ok(fd) => {
                let st = rustix::fs::fstat(&fd).map_err(|e| format!("/etc/{name}: {e}"))?;
                if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                    return Err(format!("the image's /etc/{name} is not a regular file"));
                }
                let mut buf = [0u8; 8];
                if st.st_size == 0
                    && rustix::fs::fgetxattr(&fd, "user.overlay.whiteout", &mut buf).is_ok()
                {
                    return Ok(None);
                }
                let mut text = Vec::new();
                std::fs::File::from(fd)
                    .take(MAX_DB)
                    .read_to_end(&mut text)
                    .map_err(|e| format!("/etc/{name}: {e}"))?;
                return Ok(Some(String::from_utf8_lossy(&text).into_owned()));
            }
            Err(rustix::io::Errno::LOOP) | Err(rustix::io::Errno::XDEV) => {
                return Err(format!(
                    "the image's /etc/{name} is reached through a symlink: not followed"
                ))
            }
            Err(_) => {}
        }
        // An opaque /etc in this layer hides every lower layer's.
        if let Ok(etc) = rustix::fs::openat2(
            &root,
            "etc",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            beneath,
        ) {
            let mut buf = [0u8; 8];
            if let Ok(n) = rustix::fs::fgetxattr(&etc, "user.overlay.opaque", &mut buf) {
                if buf[..n].starts_with(b"y") {
                    return Ok(None);
                }
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(dir: &std::path::Path, passwd: &str, group: &str) -> PathBuf {
        std::fs::create_dir_all(dir.join("etc")).unwrap();
        std::fs::write(dir.join("etc/passwd"), passwd).unwrap();
        std::fs::write(dir.join("etc/group"), group).unwrap();
        dir.to_path_buf()
    }

    #[test]
    fn names_and_numbers_resolve_in_the_images_own_files_as_docker_does() {
        let t = tempfile::tempdir().unwrap();
        let top = layer(
            &t.path().join("top"),
            "root:x:0:0::/root:/bin/sh\napp:x:1234:2345::/home/app:/bin/sh\n",
            "root:x:0:\nstaff:x:50:\n",
        );
        let layers = vec![top];
        assert_eq!(resolve_user(&layers, "app"), Ok((1234, 2345)));
        assert_eq!(resolve_user(&layers, "app:staff"), Ok((1234, 50)));
        assert_eq!(resolve_user(&layers, "1234"), Ok((1234, 2345)));
        assert_eq!(resolve_user(&layers, "4321"), Ok((4321, 0)));
        assert_eq!(resolve_user(&layers, "4321:77"), Ok((4321, 77)));
        assert_eq!(resolve_user(&layers, "root"), Ok((0, 0)));
        for bad in [
            "nobody-here",
            "app:nogroup",
            ":1",
            "1:",
            "4294967295",
            "99999999999",
        ] {
            assert!(resolve_user(&layers, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_passwd_that_is_a_symlink_to_the_hosts_is_refused_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("top");
        std::fs::create_dir_all(top.join("etc")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", top.join("etc/passwd")).unwrap();
        // `root` is in every host's /etc/passwd: found only if the link were followed.
        let err = resolve_user(&[top], "root").unwrap_err();
        assert!(err.contains("symlink"), "{err}");
    }

    #[test]
    fn the_top_most_layer_with_the_file_wins() {
        let t = tempfile::tempdir().unwrap();
        let top = layer(&t.path().join("top"), "app:x:10:10:::\n", "");
        let low = layer(
            &t.path().join("low"),
            "app:x:20:20:::\nold:x:30:30:::\n",
            "",
        );
        let layers = vec![top, low];
        assert_eq!(resolve_user(&layers, "app"), Ok((10, 10)));
        assert!(resolve_user(&layers, "old").is_err());
    }
}
