//! The programs allowlist (`[exec] allow`, `--exec-allow`) resolved to files in the supervisor,
//! before the fork: each entry's sandbox path mapped to the host file that will be there, a
//! glob's last component matched against the directory as it is now, and the ELF interpreter
//! (the dynamic loader) each allowed program names added — the kernel opens it for execution
//! too, so Landlock must grant it the execute right.
//!
//! Threat model: the files read here are the host's system files and the user's own binds,
//! read as cordon's user before any sandbox exists; a hostile program cannot change them in
//! between (system directories and `--ro` binds are read-only to it, and scratch directories,
//! empty at start, cannot be named). Every file's header is read with a size cap; a malformed
//! one simply names no interpreter (its program then cannot start: fail closed).

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use cordon_policy::{exec, Profile};

use crate::error::EngineError;

/// The allowlist as files: the paths Landlock's rules open inside the sandbox, and the same
/// files' paths on the host (for a sandbox without a mount namespace).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    pub sandbox: Vec<PathBuf>,
    pub host: Vec<PathBuf>,
}

fn bad(entry: &Path, why: impl std::fmt::Display) -> EngineError {
    EngineError::Invalid(format!("--exec-allow {}: {why}", entry.display()))
}

/// Where the sandbox path `path` comes from on the host: the innermost bind holding it, the
/// workspace, or the host's own system paths (`system`). `None`: a scratch directory, empty
/// at start, or nothing the sandbox has.
fn host_of(p: &Profile, system: &[&str], path: &Path) -> Option<PathBuf> {
    let bind = p
        .binds
        .iter()
        .filter(|b| path.starts_with(&b.dest))
        .max_by_key(|b| b.dest.components().count());
    if let Some(b) = bind {
        return path
            .strip_prefix(&b.dest)
            .ok()
            .map(|rest| b.source.join(rest));
    }
    if let Ok(rest) = path.strip_prefix("/workspace") {
        return p.workspace.as_ref().map(|ws| ws.join(rest));
    }
    system
        .iter()
        .any(|s| path.starts_with(s))
        .then(|| path.to_path_buf())
}

/// Resolves `p.exec_allow`; `None` when the profile has no allowlist.
pub fn resolve(p: &Profile, system: &[&str]) -> Result<Option<Resolved>, EngineError> {
    let Some(entries) = &p.exec_allow else {
        return Ok(None);
    };
    if p.root_image.is_some() {
        return Err(EngineError::Invalid(
            "--exec-allow ([exec] allow) names files of the host's system directories and \
             binds; it cannot be combined with --image yet"
                .into(),
        ));
    }
    let mut out = Resolved::default();
    // Canonical host paths of everything allowed: a script's interpreter is checked against
    // them (the kernel executes the interpreter, through whatever links name it).
    let mut canonical = BTreeSet::new();
    let mut literal_scripts = Vec::new();
    let mut add = |sandbox: PathBuf, host: PathBuf, out: &mut Resolved| {
        if let Ok(c) = host.canonicalize() {
            canonical.insert(c);
        }
        if !out.sandbox.contains(&sandbox) {
            out.sandbox.push(sandbox);
            out.host.push(host);
        }
    };
    for entry in entries {
        exec::validate_entry(entry, "--exec-allow")
            .map_err(|e| EngineError::Invalid(e.to_string()))?;
        let (dir, pattern) = exec::split(entry);
        let Some(host_dir) = host_of(p, system, &dir) else {
            return Err(bad(
                entry,
                "is not in the sandbox's system directories, binds or --workspace (/tmp, the \
                 home, /dev/shm and a fresh /workspace are empty at start: nothing written \
                 there may be executed)",
            ));
        };
        let mut files = Vec::new();
        if exec::is_glob(entry) {
            let list = std::fs::read_dir(&host_dir).map_err(|e| bad(entry, e))?;
            for e in list.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if exec::name_matches(&pattern, &name) {
                    files.push((dir.join(&name), host_dir.join(&name)));
                }
            }
            files.sort();
        } else {
            files.push((entry.clone(), host_dir.join(&pattern)));
        }
        for (sandbox, host) in files {
            match std::fs::metadata(&host) {
                Ok(m) if m.is_file() => {}
                // A glob takes the files among what it matches (not directories).
                Ok(_) if exec::is_glob(entry) => continue,
                Ok(_) => return Err(bad(entry, "is not a file")),
                Err(e) => return Err(bad(entry, e)),
            }
            match program_kind(&host) {
                Kind::Elf(Some(interp)) => {
                    if let Some(h) = host_of(p, system, &interp) {
                        add(interp, h, &mut out);
                    }
                }
                Kind::Script(interp) if !exec::is_glob(entry) => {
                    literal_scripts.push((sandbox.clone(), host.clone(), interp));
                }
                _ => {}
            }
            add(sandbox, host, &mut out);
        }
    }
    for (script, _, interp) in literal_scripts {
        let ok = host_of(p, system, &interp)
            .and_then(|h| h.canonicalize().ok())
            .is_some_and(|c| canonical.contains(&c));
        if !ok {
            return Err(bad(
                &script,
                format!(
                    "is a script for {} (its #! line): the kernel executes that interpreter, \
                     which must be allowed too (add --exec-allow {})",
                    interp.display(),
                    interp.display()
                ),
            ));
        }
    }
    Ok(Some(out))
}

enum Kind {
    /// An ELF program and the interpreter (`PT_INTERP`) it names, if any.
    Elf(Option<PathBuf>),
    /// A `#!` script and its interpreter.
    Script(PathBuf),
    Other,
}

/// Reads enough of `path` to say what the kernel would do to execute it.
fn program_kind(path: &Path) -> Kind {
    let Ok(mut f) = std::fs::File::open(path) else {
        return Kind::Other;
    };
    let mut head = [0u8; 256];
    let n = read_full(&mut f, &mut head);
    let head = &head[..n];
    if let Some(line) = head.strip_prefix(b"#!") {
        let line = line.split(|b| *b == b'\n').next().unwrap_or_default();
        let text = String::from_utf8_lossy(line);
        return match text.split_whitespace().next() {
            Some(i) if i.starts_with('/') => Kind::Script(PathBuf::from(i)),
            _ => Kind::Other,
        };
    }
    if head.starts_with(b"\x7fELF") {
        return Kind::Elf(elf_interp(&mut f, head));
    }
    Kind::Other
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    n
}

/// `PT_INTERP` of a 64-bit little-endian ELF (x86_64, aarch64). Any other layout names none.
fn elf_interp(f: &mut std::fs::File, head: &[u8]) -> Option<PathBuf> {
    use std::io::{Seek, SeekFrom};
    const PT_INTERP: u32 = 3;
    if head.len() < 64 || head[4] != 2 || head[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |b: &[u8], o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |b: &[u8], o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let phoff = u64_at(head, 0x20)?;
    let phentsize = usize::from(u16_at(head, 0x36)?);
    let phnum = usize::from(u16_at(head, 0x38)?);
    if phentsize < 56 || phnum > 256 {
        return None;
    }
    let mut table = vec![0u8; phentsize * phnum];
    f.seek(SeekFrom::Start(phoff)).ok()?;
    if read_full(f, &mut table) != table.len() {
        return None;
    }
    for ph in table.chunks(phentsize) {
        if u32_at(ph, 0)? != PT_INTERP {
            continue;
        }
        let (off, size) = (u64_at(ph, 8)?, u64_at(ph, 32)?);
        if size == 0 || size > 4096 {
            return None;
        }
        let mut name = vec![0u8; size as usize];
        f.seek(SeekFrom::Start(off)).ok()?;
        if read_full(f, &mut name) != name.len() {
            return None;
        }
        let name = name.split(|b| *b == 0).next()?;
        let path = PathBuf::from(String::from_utf8(name.to_vec()).ok()?);
        return path.is_absolute().then_some(path);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(allow: &[&str]) -> Profile {
        let mut p = Profile::builtin("default").expect("default");
        p.exec_allow = Some(allow.iter().map(PathBuf::from).collect());
        p
    }

    fn system() -> Vec<&'static str> {
        crate::plan::host_system_paths(cordon_policy::SystemView::Full)
    }

    /// python3 is dynamically linked: its loader is added (the kernel opens it to execute).
    #[test]
    fn an_allowed_program_brings_its_dynamic_loader() {
        let r = resolve(&profile(&["/usr/bin/python3"]), &system())
            .expect("resolve")
            .expect("an allowlist");
        assert!(
            r.sandbox.contains(&PathBuf::from("/usr/bin/python3")),
            "{r:?}"
        );
        assert!(
            r.sandbox
                .iter()
                .any(|p| p.to_string_lossy().contains("ld-linux")),
            "{r:?}"
        );
    }

    #[test]
    fn a_script_whose_interpreter_is_not_allowed_is_refused_with_the_fix() {
        let dir = std::env::temp_dir().join(format!("cordon-exec-allow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("s.sh"), "#!/bin/sh\necho hi\n").expect("write");
        let mut p = profile(&["/tools/s.sh"]);
        p.binds.push(cordon_policy::Bind {
            source: dir.clone(),
            dest: "/tools".into(),
            writable: false,
            idmap: false,
            limit: None,
        });
        let err = resolve(&p, &system()).expect_err("refused").to_string();
        assert!(err.contains("add --exec-allow /bin/sh"), "{err}");
        p.exec_allow = Some(vec!["/tools/s.sh".into(), "/bin/sh".into()]);
        let r = resolve(&p, &system()).expect("resolve").expect("some");
        assert!(r.host.contains(&dir.join("s.sh")), "{r:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn scratch_directories_and_images_cannot_be_allowed() {
        for e in [
            "/tmp/x",
            "/workspace/*",
            "/home/sandbox/bin/x",
            "/nowhere/x",
        ] {
            let err = resolve(&profile(&[e]), &system()).expect_err(e).to_string();
            assert!(err.contains("empty at start"), "{err}");
        }
        let mut p = profile(&["/usr/bin/python3"]);
        p.root_image = Some(cordon_policy::RootImage::default());
        assert!(resolve(&p, &system()).is_err());
        assert_eq!(
            resolve(&Profile::builtin("default").unwrap(), &system()).unwrap(),
            None
        );
    }
}
