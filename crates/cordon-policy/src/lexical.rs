//! Paths resolved by their text alone, as a sandbox's programs would name them: `.` and `..`
//! folded, never above `/`. Pure string work (no file system, no links followed): callers
//! that open what such a path names still resolve it inside their root.
//!
//! Threat model: the input is any client's text; the result is always absolute and holds no
//! `..`, so it cannot name anything above the root it is later resolved in.

/// The absolute path `rel` names from the directory `base` (`rel` absolute: from `/`), `.`
/// and `..` folded, never above `/`: `("/a/b", "../c")` → `/a/c`.
pub fn resolve(base: &str, rel: &str) -> String {
    let base = if rel.starts_with('/') { "" } else { base };
    let mut parts: Vec<&str> = Vec::new();
    for c in base.split('/').chain(rel.split('/')) {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::resolve;

    #[test]
    fn dot_dot_never_climbs_above_the_root() {
        assert_eq!(resolve("", "/a/./b/../c"), "/a/c");
        assert_eq!(resolve("/a/b", "../c"), "/a/c");
        assert_eq!(resolve("/a", "../../../etc"), "/etc");
        assert_eq!(resolve("/x", "/../.."), "/");
        assert_eq!(resolve("/a/b", "c//d/."), "/a/b/c/d");
    }
}
