//! Path arguments: normalised the way the kernel would resolve them lexically (`.`, `..`,
//! repeated slashes, percent-encodings) before they meet the allow/deny globs, so that
//! `/system/../system/x`, `//system/x`, `/tmp/../system/x` and `%2e%2e` all name what they
//! reach. A symlink is the one thing no lexical check can see: that is why the same deny sets
//! also shape the upstream sandbox's mounts (see [`crate::config::PathRule`]).

use globset::GlobMatcher;

/// Percent-decoding is repeated (double encodings like `%252e`) at most this many times; a
/// path that still changes after that is refused rather than guessed at.
const DECODE_ROUNDS: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("is not an absolute path (path rules need one: a relative path depends on a working directory the gateway cannot see)")]
    Relative,
    #[error("contains a NUL byte")]
    Nul,
    #[error("is encoded more than {DECODE_ROUNDS} times over")]
    OverEncoded,
    #[error("is empty")]
    Empty,
}

/// The path as the kernel would resolve it without following symlinks: percent-decoded,
/// absolute, no `.`/`..` components, single slashes, no trailing slash (except `/`).
pub fn normalise(raw: &str) -> Result<String, PathError> {
    let mut s = raw.to_string();
    let mut rounds = 0;
    loop {
        let decoded = percent_encoding::percent_decode_str(&s)
            .decode_utf8_lossy()
            .into_owned();
        if decoded == s {
            break;
        }
        rounds += 1;
        if rounds > DECODE_ROUNDS {
            return Err(PathError::OverEncoded);
        }
        s = decoded;
    }
    if s.contains('\0') {
        return Err(PathError::Nul);
    }
    if s.is_empty() {
        return Err(PathError::Empty);
    }
    if !s.starts_with('/') {
        return Err(PathError::Relative);
    }
    // `..` at the root stays at the root, as in the kernel.
    Ok(cordon_policy::lexical::resolve("", &s))
}

/// One glob of a path set, e.g. `/system/**` or `/home/*/notes`. `*` stays within one
/// component, `**` crosses them; `/system/**` also covers `/system` itself.
#[derive(Debug, Clone)]
pub struct PathGlob {
    text: String,
    matcher: GlobMatcher,
    /// For `X/**`: X itself is covered too.
    base: Option<String>,
}

impl PathGlob {
    pub fn new(text: &str) -> Result<PathGlob, String> {
        if !text.starts_with('/') {
            return Err(format!(
                "'{text}' is not an absolute path glob (start it with /)"
            ));
        }
        let normal = normalise_glob(text);
        let matcher = globset::GlobBuilder::new(&normal)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("'{text}' is not a glob: {e}"))?
            .compile_matcher();
        let base = normal.strip_suffix("/**").map(|b| {
            if b.is_empty() {
                "/".to_string()
            } else {
                b.to_string()
            }
        });
        Ok(PathGlob {
            text: text.to_string(),
            matcher,
            base,
        })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether a normalised path is covered.
    pub fn matches(&self, normal: &str) -> bool {
        self.matcher.is_match(normal) || self.base.as_deref() == Some(normal)
    }

    /// The one path whose whole subtree this glob covers, if it is such a glob: a literal
    /// path (`/data/secret.txt`) or a literal directory and everything below (`/system/**`).
    /// That path can be hidden from a sandbox outright; other globs (`/data/*.key`) cannot.
    pub fn subtree(&self) -> Option<String> {
        let normal = normalise_glob(&self.text);
        let lit = normal.strip_suffix("/**").unwrap_or(&normal);
        let lit = if lit.is_empty() { "/" } else { lit };
        (!lit.contains(['*', '?', '[', '{', '\\'])).then(|| lit.to_string())
    }

    /// The fixed directory this glob starts with (up to the first wildcard): what a sandbox
    /// can leave unmounted for a deny glob.
    pub fn fixed_prefix(&self) -> String {
        let normal = normalise_glob(&self.text);
        let mut out = Vec::new();
        for part in normal.split('/').filter(|p| !p.is_empty()) {
            // A `\` escapes the next character: `d\ata` is `data`, so it ends the fixed part
            // as a wildcard does (it is never a literal name to compare with a directory).
            if part.contains(['*', '?', '[', '{', '\\']) {
                break;
            }
            out.push(part);
        }
        format!("/{}", out.join("/"))
    }

    /// Whether this glob may match a path strictly below `dir` (normalised) that it does not
    /// reach through [`PathGlob::subtree`] or [`PathGlob::matches`] on `dir` itself: true when
    /// no mount can hide what it matches there. Conservative: `**` or `{…}` after the fixed
    /// part, or a fixed part inside `dir`, count as reaching below.
    pub fn reaches_below(&self, dir: &str) -> bool {
        let prefix = self.fixed_prefix();
        if is_within(&prefix, dir) {
            return true;
        }
        if !is_within(dir, &prefix) {
            return false;
        }
        let normal = normalise_glob(&self.text);
        let globs: Vec<&str> = normal.split('/').filter(|p| !p.is_empty()).collect();
        if globs.iter().any(|g| g.contains("**") || g.contains('{')) {
            return true;
        }
        let dirs: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
        if globs.len() <= dirs.len() {
            return false;
        }
        // One component against one component: `*` never crosses a slash.
        dirs.iter().zip(&globs).all(|(d, g)| {
            d == g
                || globset::Glob::new(g)
                    .map(|g| g.compile_matcher().is_match(d))
                    .unwrap_or(true)
        })
    }
}

/// Removes `.`, `..` and repeated slashes from a glob's literal parts, so that a config
/// written `/system//x/**` means what it says.
fn normalise_glob(text: &str) -> String {
    cordon_policy::lexical::resolve("", text)
}

/// Whether `path` is `dir` or below it (both normalised).
pub fn is_within(path: &str, dir: &str) -> bool {
    dir == "/" || path == dir || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_forms_reach_what_they_name() {
        for (raw, want) in [
            ("/system/../system/x", "/system/x"),
            ("//system/x", "/system/x"),
            ("/tmp/../system/x", "/system/x"),
            ("/tmp/%2e%2e/system/x", "/system/x"),
            ("/tmp/%2E%2E/system/x", "/system/x"),
            ("/tmp/%252e%252e/system/x", "/system/x"),
            ("%2fsystem%2fx", "/system/x"),
            ("/./system/./x/", "/system/x"),
            ("/../../system/x", "/system/x"),
            ("/tmp/a/b/../../../system//x", "/system/x"),
            ("/", "/"),
        ] {
            assert_eq!(normalise(raw).as_deref(), Ok(want), "{raw}");
        }
    }

    #[test]
    fn what_cannot_be_placed_is_refused() {
        assert_eq!(normalise("system/x"), Err(PathError::Relative));
        assert_eq!(normalise("../system/x"), Err(PathError::Relative));
        assert_eq!(normalise(""), Err(PathError::Empty));
        assert_eq!(normalise("/tmp/%00/x"), Err(PathError::Nul));
        assert_eq!(normalise("/a%2525252525252e"), Err(PathError::OverEncoded));
    }

    #[test]
    fn deny_glob_covers_the_directory_and_below_but_not_neighbours() {
        let g = PathGlob::new("/system/**").unwrap();
        for p in ["/system", "/system/x", "/system/a/b/c"] {
            assert!(g.matches(p), "{p}");
        }
        for p in ["/systemd", "/systemx/y", "/tmp/system/x", "/"] {
            assert!(!g.matches(p), "{p}");
        }
        let star = PathGlob::new("/home/*/notes").unwrap();
        assert!(star.matches("/home/ann/notes"));
        assert!(!star.matches("/home/ann/x/notes"));
        assert_eq!(PathGlob::new("/srv/*/x/**").unwrap().fixed_prefix(), "/srv");
        assert_eq!(
            PathGlob::new("/system/**").unwrap().fixed_prefix(),
            "/system"
        );
        assert!(PathGlob::new("system/**").is_err());
        assert_eq!(
            PathGlob::new("/data//system/**")
                .unwrap()
                .subtree()
                .as_deref(),
            Some("/data/system")
        );
        assert_eq!(
            PathGlob::new("/data/a.txt").unwrap().subtree().as_deref(),
            Some("/data/a.txt")
        );
        assert_eq!(PathGlob::new("/data/*.key").unwrap().subtree(), None);
        assert_eq!(PathGlob::new("/data/**/x").unwrap().subtree(), None);
    }

    #[test]
    fn a_glob_reaches_below_a_directory_only_where_it_can_match_there() {
        let g = |t: &str| PathGlob::new(t).unwrap();
        assert!(g("/data/*.key").reaches_below("/data"));
        assert!(g("/data/**/*.key").reaches_below("/data/x"));
        assert!(g("/*/secret").reaches_below("/data"));
        assert!(g("/data/*/secret/**").reaches_below("/data/a"));
        assert!(!g("/data/*.key").reaches_below("/data/x"));
        assert!(!g("/*/secret").reaches_below("/data/x"));
        assert!(!g("/data/*.key").reaches_below("/srv"));
        assert!(!g("/srv/a*/x").reaches_below("/srv/b"));
    }

    /// Found by fuzzing (fuzz/corpus/gateway_path/crash-escaped-prefix): `/d\ata/*.key`
    /// matches `/data/a.key`, yet its fixed part `/d\ata` was compared with `/data` as text, so
    /// a bind of `/data` was let through with nothing hiding what the glob denies.
    #[test]
    fn an_escaped_character_in_the_fixed_part_still_reaches_below() {
        let g = PathGlob::new("/d\\ata/*.key").expect("glob");
        assert!(g.matches("/data/a.key"));
        assert!(g.reaches_below("/data"));
        assert!(g.reaches_below("/"));
        assert_eq!(g.fixed_prefix(), "/");
    }

    #[test]
    fn within() {
        assert!(is_within("/system/x", "/system"));
        assert!(is_within("/system", "/system"));
        assert!(!is_within("/systemd", "/system"));
        assert!(is_within("/anything", "/"));
    }
}
