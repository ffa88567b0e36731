//! Tar archives in and out of a sandbox (the Docker door's `put_archive` / `get_archive`):
//! a tar's files and directories written under a directory of the sandbox, and a path of the
//! sandbox read back as a tar.
//!
//! Threat model: the archive is hostile. Its entry names may be absolute, hold `..`, or try
//! to plant a symlink or hard link pointing out and then write through it. Names are folded
//! lexically under the destination (never above the sandbox's `/`), every write goes through
//! the sandbox's own root (`openat2` with `RESOLVE_IN_ROOT`, as the sandbox's user, see
//! `files`), so a symlink the archive made is followed inside that root only. Symlinks whose
//! target climbs above `/` or leads into /proc, /sys or /dev, hard links, devices and fifos
//! are refused before anything is written: the host is never reached, and a refused archive
//! changes nothing. Sizes are capped by the server's `--max-upload` / `--max-download`.

use std::io::Read;

use cordon_linux::fsview::{EntryType, FsError};

use crate::error::ServiceError;
use crate::{Caller, Service};

/// Entries one archive may hold.
const MAX_ENTRIES: usize = 100_000;

enum Item {
    Dir {
        path: String,
        mode: u32,
    },
    File {
        path: String,
        mode: u32,
        data: Vec<u8>,
    },
    Symlink {
        path: String,
        target: String,
    },
}

/// Where a symlink's target may not lead: the kernel's interfaces, where magic links live
/// and the server never acts.
const KERNEL_DIRS: &[&str] = &["/proc", "/sys", "/dev"];

/// Why a symlink at `path` (a folded sandbox path) with text `target` would lead out of the
/// container's root, if it would: its `..` climb above `/` from the link's directory, or it
/// ends in a kernel interface. Absolute targets are the container's own paths (every
/// operation resolves links inside its root), and so are relative ones that stay below `/`.
fn link_escapes(path: &str, target: &str) -> Option<&'static str> {
    if target.is_empty() || target.contains('\0') {
        return Some("its target is empty or holds a NUL byte");
    }
    let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
    let mut depth: usize = if target.starts_with('/') {
        0
    } else {
        dir.split('/').filter(|c| !c.is_empty()).count()
    };
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return Some("its target climbs above the container's root"),
            },
            _ => depth += 1,
        }
    }
    let resolved = cordon_policy::lexical::resolve(if dir.is_empty() { "/" } else { dir }, target);
    let into_kernel = KERNEL_DIRS
        .iter()
        .any(|k| resolved == *k || resolved.starts_with(&format!("{k}/")));
    into_kernel.then_some("its target is in /proc, /sys or /dev")
}

/// Reads the whole archive first: a refused entry anywhere means nothing is written.
fn parse(dest: &str, data: &[u8], max: u64) -> Result<Vec<Item>, ServiceError> {
    let bad = |m: String| ServiceError::bad_request(format!("archive: {m}"));
    let mut ar = tar::Archive::new(data);
    let mut items = Vec::new();
    let mut total = 0u64;
    for entry in ar
        .entries()
        .map_err(|e| bad(format!("not a tar archive: {e}")))?
    {
        let mut entry = entry.map_err(|e| bad(format!("not a tar archive: {e}")))?;
        if items.len() >= MAX_ENTRIES {
            return Err(bad(format!("more than {MAX_ENTRIES} entries")));
        }
        let raw = entry.path_bytes();
        let name = String::from_utf8_lossy(&raw).to_string();
        if name.contains('\0') {
            return Err(bad("an entry name holds a NUL byte".into()));
        }
        // Absolute names and `..` fold under the destination, the way Docker extracts them.
        let path = cordon_policy::lexical::resolve(dest, name.trim_start_matches('/'));
        let mode = entry.header().mode().unwrap_or(0o644) & 0o7777;
        let shown: String = name.chars().take(200).collect();
        match entry.header().entry_type() {
            tar::EntryType::Directory => items.push(Item::Dir { path, mode }),
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.header().size().unwrap_or(u64::MAX);
                total = total.saturating_add(size);
                if total > max {
                    return Err(ServiceError::too_large("the archive's files", max));
                }
                let mut buf = Vec::with_capacity(size.min(1 << 20) as usize);
                entry
                    .read_to_end(&mut buf)
                    .map_err(|e| bad(format!("{shown}: {e}")))?;
                items.push(Item::File {
                    path,
                    mode,
                    data: buf,
                });
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .map(|t| String::from_utf8_lossy(&t).to_string())
                    .unwrap_or_default();
                if let Some(why) = link_escapes(&path, &target) {
                    let t: String = target.chars().take(200).collect();
                    return Err(bad(format!("symlink '{shown}' -> '{t}' is refused: {why}")));
                }
                items.push(Item::Symlink { path, target });
            }
            // pax and GNU long-name headers are folded into the next entry by the reader.
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader => {}
            other => {
                return Err(bad(format!(
                    "entry '{shown}' is a {other:?}: only files and directories are extracted \
                     with symlinks that stay inside (hard links, devices and fifos are refused)"
                )))
            }
        }
    }
    Ok(items)
}

/// Extracts a tar under `dest` (a directory of the sandbox, which must exist).
pub async fn put_archive(
    svc: &Service,
    caller: &Caller,
    id: &str,
    dest: &str,
    data: Vec<u8>,
) -> Result<usize, ServiceError> {
    let max = svc.config().max_upload;
    if data.len() as u64 > max.saturating_mul(2) {
        return Err(ServiceError::too_large("the archive", max));
    }
    if !dest.starts_with('/') || dest.contains('\0') {
        return Err(ServiceError::bad_request(
            "path: give an absolute directory inside the container",
        ));
    }
    let dest = cordon_policy::lexical::resolve("/", dest);
    let top = crate::files::stat_following(svc, caller, id, &dest).await?;
    if top.r#type != EntryType::Dir {
        return Err(ServiceError::bad_request(format!(
            "path: {dest} is not a directory"
        )));
    }
    let items = parse(&dest, &data, max)?;
    let n = items.len();
    crate::files::in_sandbox_audited(svc, caller, id, "file.put_archive", &dest, move |fs| {
        for item in items {
            match item {
                Item::Dir { path, mode } => {
                    if path != "/" {
                        match fs.mkdir(&path, true) {
                            Ok(()) | Err(FsError::AlreadyExists { .. }) => {}
                            Err(e) => return Err(e),
                        }
                        let _ = fs.set_mode(&path, mode | 0o700);
                    }
                }
                Item::File { path, mode, data } => {
                    fs.write(&path, &mut data.as_slice(), max, true)?;
                    let _ = fs.set_mode(&path, mode);
                }
                Item::Symlink { path, target } => fs.symlink(&path, &target)?,
            }
        }
        Ok(())
    })
    .await?;
    Ok(n)
}

/// A path of the sandbox as a tar (a directory with what it holds, its last component the
/// archive's top), and its entry; at most `--max-download` bytes of file data.
pub async fn get_archive(
    svc: &Service,
    caller: &Caller,
    id: &str,
    path: &str,
) -> Result<(Vec<u8>, cordon_linux::fsview::Entry), ServiceError> {
    if !path.starts_with('/') || path.contains('\0') {
        return Err(ServiceError::bad_request(
            "path: give an absolute path inside the container",
        ));
    }
    let path = cordon_policy::lexical::resolve("/", path);
    let max = svc.config().max_download;
    let p = path.clone();
    crate::files::in_sandbox_audited(svc, caller, id, "file.get_archive", &path, move |fs| {
        let top = fs.stat(&p)?;
        let base = if p == "/" {
            String::new()
        } else {
            top.name.clone()
        };
        let mut out = tar::Builder::new(Vec::new());
        let mut total = 0u64;
        let mut todo = vec![(top.clone(), base.clone())];
        let mut count = 0usize;
        while let Some((e, name)) = todo.pop() {
            count += 1;
            if count > MAX_ENTRIES {
                return Err(FsError::TooLarge {
                    path: p.clone(),
                    detail: format!("more than {MAX_ENTRIES} entries"),
                });
            }
            let mut h = tar::Header::new_gnu();
            h.set_mode(e.mode);
            h.set_mtime(e.modified);
            match e.r#type {
                EntryType::Dir => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_size(0);
                    if !name.is_empty() {
                        append(&mut out, &mut h, &format!("{name}/"), &[][..], &p)?;
                    }
                    for child in fs.list(&e.path)? {
                        let n = if name.is_empty() {
                            child.name.clone()
                        } else {
                            format!("{name}/{}", child.name)
                        };
                        todo.push((child, n));
                    }
                }
                EntryType::Symlink => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_size(0);
                    let target = e.target.clone().unwrap_or_default();
                    out.append_link(&mut h, &name, &target)
                        .map_err(|err| FsError::from_io(err, &p))?;
                }
                EntryType::File => {
                    let data = fs.read(&e.path, max.saturating_sub(total))?;
                    total += data.len() as u64;
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(data.len() as u64);
                    append(&mut out, &mut h, &name, data.as_slice(), &p)?;
                }
                _ => {}
            }
        }
        let bytes = out.into_inner().map_err(|err| FsError::from_io(err, &p))?;
        Ok((bytes, top))
    })
    .await
}

fn append(
    out: &mut tar::Builder<Vec<u8>>,
    h: &mut tar::Header,
    name: &str,
    data: &[u8],
    p: &str,
) -> Result<(), FsError> {
    out.append_data(h, name, data)
        .map_err(|err| FsError::from_io(err, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_that_stay_in_the_root_are_kept_and_those_that_climb_out_are_refused() {
        for (path, target) in [
            ("/tmp/a/sh", "busybox"),
            ("/tmp/a/lib", "../lib"),
            ("/usr/bin/python3", "/usr/bin/python3.11"),
            ("/tmp/x", "/"),
        ] {
            assert_eq!(link_escapes(path, target), None, "{path} -> {target}");
        }
        for (path, target) in [
            ("/tmp/out", "../../etc"),
            ("/tmp/out", "../../../../../../../../host/etc"),
            ("/out", ".."),
            ("/tmp/p", "/proc/1/root"),
            ("/tmp/p", "../proc/self/cwd"),
            ("/tmp/d", "/dev/sda"),
            ("/tmp/e", ""),
        ] {
            assert!(link_escapes(path, target).is_some(), "{path} -> {target}");
        }
    }

    #[test]
    fn an_archive_with_a_climbing_link_is_refused_whole() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, "out", "../../../../etc").unwrap();
        let data = b.into_inner().unwrap();
        let Err(e) = parse("/tmp", &data, 1 << 20) else {
            panic!("a climbing link was accepted");
        };
        assert!(e.message.contains("climbs above"), "{}", e.message);
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, "sh", "busybox").unwrap();
        let items = parse("/tmp", &b.into_inner().unwrap(), 1 << 20).unwrap();
        assert!(
            matches!(&items[..], [Item::Symlink { path, target }] if path == "/tmp/sh" && target == "busybox")
        );
    }
}
