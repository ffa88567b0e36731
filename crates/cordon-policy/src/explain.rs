//! A profile in plain words (`cordon profile explain`) and what one profile allows that another
//! does not (`cordon profile diff`): pure data → text, so that the words and the profile can
//! never disagree about which entries there are.
//!
//! Threat model: the text is shown to whoever reads the profile, and may be pasted anywhere:
//! it names what the profile grants, never a secret — `[env] set` values and secret sources'
//! contents are left out (a value set there may be a token; only its name is shown).

use std::fmt::Write as _;
use std::time::Duration;

use crate::profile::{EnvEntry, Profile, SystemView, HOME};
use crate::units::{format_duration, format_size};

/// One limit, comparable across profiles: a larger `amount` allows more.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitLine {
    pub name: &'static str,
    /// `None`: no limit at all (more than any amount).
    pub amount: Option<f64>,
    pub shown: String,
}

/// What a profile allows, section by section; each line names one entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Explained {
    pub name: String,
    pub read: Vec<String>,
    pub write: Vec<String>,
    /// The programs allowlist's entries; empty with `exec_any` (no allowlist) too.
    pub execute: Vec<String>,
    /// No allowlist: any file the sandbox may read or write may be executed.
    pub exec_any: bool,
    /// Hosts reachable through the proxy (and the names and secrets bound to them); empty:
    /// no network.
    pub network: Vec<String>,
    pub limits: Vec<LimitLine>,
    pub other: Vec<String>,
}

/// The sections in the order they are printed, with their headings.
const SECTIONS: [&str; 5] = [
    "may read",
    "may write",
    "may execute",
    "may reach (network)",
    "other settings",
];

impl Explained {
    fn sections(&self) -> [&Vec<String>; 5] {
        [
            &self.read,
            &self.write,
            &self.execute,
            &self.network,
            &self.other,
        ]
    }
}

/// The scratch directories every sandbox writes in (capped at `--disk` each).
const SCRATCH: [&str; 3] = ["/tmp", HOME, "/dev/shm"];

/// Explains `p`. `system` is what the engine shows of the host's system for `p.system` (its
/// directories and, for `minimal`, the files of /etc it keeps): the engine's list, passed in
/// so that the words name exactly what is mounted.
pub fn explain(p: &Profile, system: &[&str]) -> Explained {
    let mut read = Vec::new();
    let mut write = Vec::new();
    let mut execute = Vec::new();
    match &p.image {
        Some(img) => read.push(format!(
            "/ (the image {img}, writable in the sandbox's own layer; not the host's)"
        )),
        None => {
            for s in system {
                read.push(format!("{s} (the host's, read-only)"));
            }
            if p.system == SystemView::Full {
                read.push(
                    "/etc/passwd and /etc/group (the sandbox's own: no host user names)"
                        .to_string(),
                );
            }
        }
    }
    for b in p.binds.iter().filter(|b| !b.writable) {
        read.push(bind_line(&b.source, &b.dest, "read-only"));
    }
    for h in &p.hide {
        read.push(format!(
            "not {}: hidden (an empty directory or file over it)",
            h.display()
        ));
    }
    read.push("/proc (the sandbox's own processes)".to_string());
    let disk = format_size(p.limits.disk);
    for s in SCRATCH {
        write.push(format!("{s} (empty at start)"));
    }
    match &p.workspace {
        Some(ws) => write.push(format!("/workspace = host directory {}", ws.display())),
        None => write.push("/workspace (empty at start)".to_string()),
    }
    for b in p.binds.iter().filter(|b| b.writable) {
        write.push(bind_line(&b.source, &b.dest, "read-write"));
    }
    for e in p.exec_allow.iter().flatten() {
        let what = if crate::exec::is_glob(e) {
            "the files matching, as found when the sandbox starts"
        } else {
            "this file"
        };
        execute.push(format!("{} ({what})", e.display()));
    }
    let mut network = Vec::new();
    for a in &p.network.allow {
        network.push(format!("{a} (through the egress proxy)"));
    }
    for (name, ip) in &p.network.hosts {
        network.push(format!("{name} resolves to {ip} (fixed, no DNS)"));
    }
    for s in &p.secrets {
        network.push(format!(
            "secret {} sent only to {} (the sandbox sees a placeholder)",
            s.name,
            s.hosts.join(", ")
        ));
    }
    let l = &p.limits;
    let dur = |d: Duration| Some(d.as_secs_f64());
    let limits = vec![
        limit("memory", Some(l.memory as f64), format_size(l.memory)),
        limit("cpus", Some(l.cpus), format!("{} cores", l.cpus)),
        limit(
            "pids",
            Some(f64::from(l.pids)),
            format!("{} processes and threads", l.pids),
        ),
        limit("timeout", dur(l.timeout), format_duration(l.timeout)),
        match l.cpu_time {
            Some(c) => limit("cpu_time", dur(c), format_duration(c)),
            None => limit("cpu_time", None, "none".to_string()),
        },
        limit(
            "disk",
            Some(l.disk as f64),
            format!("{disk} per scratch directory"),
        ),
        limit(
            "output_limit",
            Some(l.output_limit as f64),
            format!("{} kept per output stream", format_size(l.output_limit)),
        ),
        limit(
            "nofile",
            Some(l.nofile as f64),
            format!("{} open files per process", l.nofile),
        ),
        limit(
            "file_size",
            Some(l.file_size as f64),
            format!("{} largest file written", format_size(l.file_size)),
        ),
    ];
    let mut other = Vec::new();
    for e in &p.env {
        other.push(match e {
            EnvEntry::Set(k, _) => format!("env {k} is set (value not shown)"),
            EnvEntry::Pass(k) => format!("env {k} is passed from cordon's environment"),
        });
    }
    for r in &p.require {
        other.push(format!("requires {r} (fails rather than run without it)"));
    }
    if p.allow_no_landlock {
        other.push(
            "allow_no_landlock: runs on a host with neither namespaces nor Landlock".to_string(),
        );
    }
    other.push(format!("hostname {}", p.hostname));
    Explained {
        name: p.name.clone(),
        read,
        write,
        execute,
        exec_any: p.exec_allow.is_none(),
        network,
        limits,
        other,
    }
}

fn limit(name: &'static str, amount: Option<f64>, shown: String) -> LimitLine {
    LimitLine {
        name,
        amount,
        shown,
    }
}

fn bind_line(src: &std::path::Path, dest: &std::path::Path, how: &str) -> String {
    if src == dest {
        format!("{} (host directory, {how})", dest.display())
    } else {
        format!("{} = host {} ({how})", dest.display(), src.display())
    }
}

/// `cordon profile explain`'s text.
pub fn render(e: &Explained) -> String {
    let mut out = format!("Profile {}\n", e.name);
    for (heading, lines) in SECTIONS.iter().zip(e.sections()) {
        if *heading == "other settings" {
            out.push_str("\nlimits:\n");
            for l in &e.limits {
                let _ = writeln!(out, "  {}: {}", l.name, l.shown);
            }
        }
        let _ = writeln!(out, "\n{heading}:");
        for line in lines {
            let _ = writeln!(out, "  {line}");
        }
        if *heading == "may execute" {
            out.push_str(if e.exec_any {
                "  any file it may read or write (no [exec] allow list), /tmp and /workspace included\n"
            } else if e.execute.is_empty() {
                "  nothing ([exec] allow is empty)\n"
            } else {
                "  and the dynamic loader each names (added by cordon); a script only if its #! \
                 interpreter is listed too; nothing else, nothing written in /tmp, /workspace, \
                 the home or /dev/shm\n"
            });
        }
        if *heading == "may reach (network)" && lines.is_empty() {
            out.push_str("  nothing (no network: only the sandbox's own loopback)\n");
        }
    }
    out
}

/// `cordon profile diff A B`'s text: what B allows that A does not, then the reverse. Lines
/// are compared as they read; a limit is compared by its amount.
pub fn render_diff(a: &Explained, b: &Explained) -> String {
    let mut out = String::new();
    for (first, (x, y)) in [(true, (b, a)), (false, (a, b))] {
        let _ = writeln!(
            out,
            "{}What {} allows that {} does not:",
            if first { "" } else { "\n" },
            x.name,
            y.name
        );
        let mut any = false;
        for (heading, (xs, ys)) in SECTIONS.iter().zip(x.sections().iter().zip(y.sections())) {
            let mut extra: Vec<&String> = xs.iter().filter(|l| !ys.contains(l)).collect();
            if *heading == "may execute" {
                // Any file is more than any list; a list is more than none only by its own
                // entries where the other side has a list too.
                extra.retain(|_| !y.exec_any);
                if x.exec_any && !y.exec_any {
                    any = true;
                    let _ = writeln!(
                        out,
                        "  may execute:\n    any file it may read or write (no [exec] allow list)"
                    );
                }
            }
            let heading = if *heading == "other settings" {
                "other settings (only here)"
            } else {
                heading
            };
            if heading.starts_with("other settings") {
                let more: Vec<String> = x
                    .limits
                    .iter()
                    .zip(&y.limits)
                    .filter(|(lx, ly)| more_than(lx.amount, ly.amount))
                    .map(|(lx, ly)| format!("{}: {} (not {})", lx.name, lx.shown, ly.shown))
                    .collect();
                if !more.is_empty() {
                    any = true;
                    out.push_str("  limits (higher):\n");
                    for m in more {
                        let _ = writeln!(out, "    {m}");
                    }
                }
            }
            if extra.is_empty() {
                continue;
            }
            any = true;
            let _ = writeln!(out, "  {heading}:");
            for l in extra {
                let _ = writeln!(out, "    {l}");
            }
        }
        if !any {
            out.push_str("  nothing\n");
        }
    }
    out
}

/// `x` is more than `y`, `None` meaning unlimited.
fn more_than(x: Option<f64>, y: Option<f64>) -> bool {
    match (x, y) {
        (None, Some(_)) => true,
        (Some(a), Some(b)) => a > b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn explain_names_every_entry_and_hides_env_values() {
        let p = Profile::from_toml(
            r#"
name = "job"
[filesystem]
ro = ["/srv/data:/data"]
rw = ["/srv/out"]
[exec]
allow = ["/usr/bin/python3", "/usr/lib/git-core/*"]
[network]
allow = ["pypi.org"]
[env]
set = { TOKEN = "s3cret-value" }
[limits]
memory = "1G"
"#,
            Path::new("job.toml"),
        )
        .unwrap();
        let text = render(&explain(&p, &["/usr", "/etc"]));
        for want in [
            "Profile job",
            "/usr (the host's, read-only)",
            "/data = host /srv/data (read-only)",
            "/srv/out (host directory, read-write)",
            "/usr/bin/python3 (this file)",
            "/usr/lib/git-core/* (the files matching",
            "pypi.org (through the egress proxy)",
            "memory: 1G",
            "env TOKEN is set (value not shown)",
        ] {
            assert!(text.contains(want), "{want:?} not in:\n{text}");
        }
        assert!(!text.contains("s3cret-value"), "{text}");
    }

    #[test]
    fn diff_says_what_each_side_allows_more() {
        let a = Profile::builtin("strict").unwrap();
        let mut b = Profile::builtin("default").unwrap();
        b.exec_allow = Some(vec!["/usr/bin/python3".into()]);
        let text = render_diff(&explain(&a, &["/usr"]), &explain(&b, &["/usr", "/etc"]));
        let (b_more, a_more) = text.split_once("What strict allows").unwrap();
        assert!(b_more.contains("/etc (the host's, read-only)"), "{text}");
        assert!(b_more.contains("memory: 512M (not 256M)"), "{text}");
        assert!(b_more.contains("cpu_time: none (not 10s)"), "{text}");
        assert!(a_more.contains("any file it may read or write"), "{text}");
        assert!(
            !b_more.contains("python3"),
            "a list is not more than any file: {text}"
        );
        assert!(!a_more.contains("memory"), "{text}");
        let same = render_diff(&explain(&a, &["/usr"]), &explain(&a, &["/usr"]));
        assert_eq!(same.matches("  nothing").count(), 2, "{same}");
    }
}
