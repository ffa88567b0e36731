//! `cordon gateway`: its TOML (an operator's file, but copied around and edited by hand) and
//! the path arguments of tool calls (a model's, so hostile), checked against deny globs.

use std::path::Path;

use cordon_gateway::config::Config;
use cordon_gateway::paths::{is_within, normalise, PathGlob};
use cordon_gateway::policy::Policy;

/// A gateway config: parsed and compiled (globs, JSON schemas, CEL conditions) without
/// panicking; a compiled policy answers for any tool name.
pub fn gateway_toml(data: &[u8]) {
    let text = crate::text(data);
    let Ok(cfg) = Config::parse(&text, "fuzz.toml", Path::new("/nonexistent")) else {
        return;
    };
    let Ok(policy) = Policy::compile(&cfg) else {
        return;
    };
    for tool in ["fs.read_file", "x", "", "a.b.c"] {
        let _ = policy.allows(tool);
    }
    for name in cfg.servers.keys() {
        let _ = policy.denied_paths_for_server(name);
    }
}

/// `GLOB\nPATH`: a path argument from a tool call and a deny glob.
/// - The normalised path is absolute, holds no `.`, `..` or empty component, is a fixed point,
///   and is what the kernel reaches from the fully decoded text (an independent model below):
///   nothing encoded slips a `..` past the prefix check.
/// - A `X/**` glob covers exactly the paths within `X` (its subtree); and wherever it matches
///   a path below a directory without covering it by its subtree or that directory, it says
///   it reaches below it (so no sandbox mount is trusted to hide what it denies).
pub fn gateway_path(data: &[u8]) {
    let (glob, path) = crate::split2(data);
    let glob = crate::text(glob);
    let raw = crate::text(path);
    let Ok(n) = normalise(&raw) else {
        return;
    };
    assert!(n.starts_with('/'), "{raw:?} -> {n:?}");
    if n != "/" {
        assert!(!n.ends_with('/'), "{raw:?} -> {n:?}");
        for c in n[1..].split('/') {
            assert!(!c.is_empty() && c != "." && c != "..", "{raw:?} -> {n:?}");
        }
    }
    assert_eq!(
        normalise(&n).as_ref(),
        Ok(&n),
        "{raw:?} -> {n:?} is no fixed point"
    );
    assert_eq!(model(&raw).as_deref(), Some(n.as_str()), "{raw:?}");

    let Ok(g) = PathGlob::new(&glob) else {
        return;
    };
    let hit = g.matches(&n);
    if let Some(sub) = g.subtree() {
        if glob.ends_with("/**") {
            assert_eq!(
                hit,
                is_within(&n, &sub),
                "{glob:?} on {n:?} (subtree {sub:?})"
            );
        } else if hit {
            assert!(
                is_within(&n, &sub),
                "{glob:?} matches {n:?} outside {sub:?}"
            );
        }
    }
    if hit {
        let covered = g.subtree().is_some_and(|s| is_within(&n, &s));
        let mut dir = n.as_str();
        while let Some(i) = dir.rfind('/') {
            dir = if i == 0 { "/" } else { &dir[..i] };
            if !covered && !g.matches(dir) {
                assert!(
                    g.reaches_below(dir),
                    "{glob:?} matches {n:?} below {dir:?} but says it does not reach below it"
                );
            }
            if dir == "/" {
                break;
            }
        }
    }
}

/// The kernel's lexical walk of a percent-decoded path: decode until nothing changes (at most
/// four times over), then walk the components with a stack, `..` at the root staying there.
fn model(raw: &str) -> Option<String> {
    let mut s = raw.to_string();
    for _ in 0..=4 {
        let d = percent_encoding::percent_decode_str(&s)
            .decode_utf8_lossy()
            .into_owned();
        if d == s {
            break;
        }
        s = d;
    }
    if !s.starts_with('/') || s.contains('\0') {
        return None;
    }
    let mut stack: Vec<&str> = Vec::new();
    for c in s.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                stack.pop();
            }
            c => stack.push(c),
        }
    }
    Some(format!("/{}", stack.join("/")))
}
