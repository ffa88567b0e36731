//! The programs allowlist (`[exec] allow`, `--exec-allow`): which files of the sandbox may be
//! executed. Here only its entries' form and the matching of a glob's last component; the
//! engine resolves the entries to files before the sandbox starts and has the kernel enforce
//! them (Landlock's execute right on those files only).
//!
//! Threat model: the entries come from a profile file or a flag (the user's own, or an API
//! caller's): a relative path, `..` or a glob in a directory part would make "which files" a
//! question the engine answers differently from what the user read; they are refused.

use std::path::{Path, PathBuf};

use crate::profile::ProfileError;

/// Characters that make an entry's last component a pattern.
const GLOB_CHARS: &[char] = &['*', '?'];

/// Checks one entry: an absolute path without `..`, `*` and `?` only in its last component
/// (`/usr/lib/git-core/*`), never a bare `/`. `field` names the flag or key in errors.
pub fn validate_entry(entry: &Path, field: &str) -> Result<(), ProfileError> {
    let text = entry.to_string_lossy();
    let bad = |why: &str| {
        ProfileError::invalid(
            field,
            format!(
                "'{text}' {why}, e.g. /usr/bin/python3 or /usr/lib/git-core/* (a file, or files \
                 of one directory)"
            ),
        )
    };
    if !entry.is_absolute() {
        return Err(bad("is not an absolute path"));
    }
    if entry
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(bad("must not contain '..'"));
    }
    if text.contains('\0') {
        return Err(bad("contains a NUL byte"));
    }
    let Some(parent) = entry.parent() else {
        return Err(bad("names no file"));
    };
    if parent.to_string_lossy().contains(GLOB_CHARS) {
        return Err(bad(
            "has a wildcard in a directory part (only the last part may have one)",
        ));
    }
    if text.contains('[') || text.contains("**") {
        return Err(bad("uses a pattern other than * and ?"));
    }
    Ok(())
}

/// Whether an entry's last component is a pattern (else it names one file).
pub fn is_glob(entry: &Path) -> bool {
    entry
        .file_name()
        .is_some_and(|n| n.to_string_lossy().contains(GLOB_CHARS))
}

/// An entry split into the directory to look in and the pattern its files' names must match.
pub fn split(entry: &Path) -> (PathBuf, String) {
    let dir = entry.parent().unwrap_or(Path::new("/")).to_path_buf();
    let name = entry
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    (dir, name)
}

/// Shell-style match of one name against a pattern of `*` (any run of characters) and `?`
/// (one character). A leading `.` is matched only by a leading `.` in the pattern, as a shell
/// does, so `dir/*` does not take hidden files.
pub fn name_matches(pattern: &str, name: &str) -> bool {
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matching with one backtrack point (the last `*`): linear in practice, and
    // never exponential on hostile patterns.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some('?') => {
                pi += 1;
                ni += 1;
            }
            Some(c) if *c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_absolute_files_with_a_pattern_only_in_the_last_part() {
        for ok in [
            "/usr/bin/python3",
            "/usr/lib/git-core/*",
            "/opt/t/tool-?.sh",
        ] {
            validate_entry(Path::new(ok), "--exec-allow").expect(ok);
        }
        for bad in [
            "python3",
            "/usr/../bin/sh",
            "/usr/*/sh",
            "/",
            "/usr/lib/**",
            "/usr/bin/[ab]",
        ] {
            let e = validate_entry(Path::new(bad), "--exec-allow").expect_err(bad);
            assert!(e.to_string().starts_with("--exec-allow: "), "{e}");
        }
    }

    #[test]
    fn globs_match_like_a_shell() {
        assert!(name_matches("*", "git-upload-pack"));
        assert!(!name_matches("*", ".hidden"));
        assert!(name_matches(".*", ".hidden"));
        assert!(name_matches("git-*", "git-remote-http"));
        assert!(!name_matches("git-*", "gitk"));
        assert!(name_matches("py?hon3", "python3"));
        assert!(name_matches("*.sh", "a.b.sh"));
        assert!(!name_matches("*.sh", "a.shx"));
        assert!(name_matches("a*b*c", "aXXbYYc"));
        assert!(!name_matches(&"*a".repeat(30), &"a".repeat(29)));
        assert!(is_glob(Path::new("/x/*")));
        assert!(!is_glob(Path::new("/x/y")));
        assert_eq!(
            split(Path::new("/usr/lib/git-core/*")),
            (PathBuf::from("/usr/lib/git-core"), "*".to_string())
        );
    }
}
