//! `cordon check` on hosts that say no, reproduced on this machine (see `common::hosts`): it
//! must name each missing layer, why it is missing, and what the user can do — and `cordon
//! run` there must either refuse with 125 and point at `cordon check`, or (where only the
//! namespaces are refused) run without them and say so, never with less than it says (see
//! tests/degraded.rs for the attacks on such a run).

mod common;

use serde_json::Value;

use common::hosts::HostLayout;
use common::*;

struct Checked {
    json: Value,
    text: String,
}

impl Checked {
    fn feature(&self, name: &str) -> &Value {
        self.json["features"]
            .as_array()
            .and_then(|fs| fs.iter().find(|f| f["name"] == name))
            .unwrap_or_else(|| panic!("no feature {name} in {}", self.json))
    }

    fn available(&self, name: &str) -> bool {
        self.feature(name)["available"] == Value::Bool(true)
    }

    fn obstacle(&self, id: &str) -> &Value {
        self.json["obstacles"]
            .as_array()
            .and_then(|os| os.iter().find(|o| o["id"] == id))
            .unwrap_or_else(|| panic!("no obstacle {id} in {:#}", self.json["obstacles"]))
    }

    fn obstacle_ids(&self) -> Vec<String> {
        self.json["obstacles"]
            .as_array()
            .map(|os| {
                os.iter()
                    .filter_map(|o| o["id"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every `how` of an obstacle, joined.
    fn fixes(&self, id: &str) -> String {
        self.obstacle(id)["fixes"]
            .as_array()
            .map(|fs| {
                fs.iter()
                    .map(|f| {
                        assert!(
                            f["cost"].as_str().is_some_and(|c| !c.is_empty()),
                            "a fix without its cost: {f}"
                        );
                        f["how"].as_str().unwrap_or_default().to_string()
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }
}

/// `cordon check --json` and `cordon check`, both from `base` (cordon in some layout).
fn check(layout: &HostLayout) -> Checked {
    let j = layout.cordon().args(["check", "--json"]).run();
    assert_eq!(j.code, Some(0), "{j:?}");
    let json: Value = serde_json::from_str(&j.stdout).expect("check --json prints JSON");
    let t = layout.cordon().arg("check").run();
    assert_eq!(t.code, Some(0), "{t:?}");
    Checked {
        json,
        text: t.stdout,
    }
}

#[test]
fn this_host_can_sandbox_and_says_so() {
    let c = check(&HostLayout::default());
    assert!(c.available("user_ns"), "{}", c.json);
    assert!(c.available("proc"), "{}", c.json);
    for o in c.json["obstacles"].as_array().unwrap() {
        assert_ne!(o["layer"], "user_ns", "{o}");
        assert_ne!(o["layer"], "proc", "{o}");
    }
    assert!(c.json["environment"].is_object(), "{}", c.json);
    assert!(
        c.text.contains("cordon can sandbox on this host."),
        "{}",
        c.text
    );
}

/// `cordon run` where the host says no: 125, and a message that sends the user to `cordon
/// check` (or names what the kernel refused).
fn run_refuses(layout: &HostLayout, says: &[&str]) {
    let f = layout.cordon().args(["run", "--", "true"]).run();
    assert_eq!(f.code, Some(125), "{f:?}");
    assert!(
        says.iter().any(|s| f.stderr.contains(s)),
        "expected one of {says:?} in: {}",
        f.stderr
    );
}

/// A host (or a container's user namespace) with `user.max_user_namespaces = 0`.
#[test]
fn max_user_namespaces_zero() {
    let layout = HostLayout {
        max_user_namespaces: Some(0),
        ..HostLayout::default()
    };
    let c = check(&layout);
    assert!(!c.available("user_ns"), "{}", c.json);
    assert!(!c.available("proc"), "{}", c.json);
    assert_eq!(
        c.json["environment"]["sysctls"]["user.max_user_namespaces"], "0",
        "{}",
        c.json
    );
    let o = c.obstacle("max_user_namespaces_zero");
    assert_eq!(o["layer"], "user_ns");
    assert!(o["found"].as_str().unwrap().contains("ENOSPC"), "{o}");
    assert!(
        c.fixes("max_user_namespaces_zero")
            .contains("sysctl -w user.max_user_namespaces="),
        "{o}"
    );
    if is_root() {
        // uid 0 in there is not the host's root, and check says so.
        c.obstacle("root_in_user_namespace");
        assert!(c.text.contains("uid 0 of a user namespace"), "{}", c.text);
    }
    assert!(c.text.contains("[max_user_namespaces_zero]"), "{}", c.text);
    if is_root() {
        assert_eq!(c.json["mode"], "none", "{}", c.json);
        assert!(
            c.text.contains("cordon cannot sandbox on this host"),
            "{}",
            c.text
        );
        run_refuses(
            &layout,
            &["see `cordon check`", "dropping supplementary groups"],
        );
    } else {
        runs_without_namespaces(&layout, &c);
    }
}

/// A host that refuses only the namespaces: check says cordon runs without them, a run does
/// (saying so), and `--require user_ns` refuses with 125, pointing at `cordon check`.
fn runs_without_namespaces(layout: &HostLayout, c: &Checked) {
    assert_eq!(c.json["mode"], "no_namespaces", "{}", c.json);
    assert!(
        c.text.contains("cordon sandboxes here without namespaces"),
        "{}",
        c.text
    );
    let o = py_cmd(layout.cordon(), &[], "R['ok'] = 1; out()");
    o.assert_ok();
    assert_eq!(o.enforcement()["user_ns"], false, "{o}");
    let f = layout
        .cordon()
        .args(["run", "--require", "user_ns", "--", "true"])
        .run();
    assert_eq!(f.code, Some(125), "{f:?}");
    assert!(f.stderr.contains("see `cordon check`"), "{}", f.stderr);
}

/// Docker's default seccomp profile: `unshare` and `clone` with namespace flags refused.
#[test]
fn a_container_seccomp_profile_refusing_namespaces() {
    let layout = HostLayout {
        docker_seccomp: true,
        ..HostLayout::default()
    };
    let c = check(&layout);
    assert!(!c.available("user_ns"), "{}", c.json);
    assert_eq!(c.json["environment"]["seccomp_mode"], 2, "{}", c.json);
    let o = c.obstacle("seccomp_filter_refuses_namespaces");
    assert!(o["found"].as_str().unwrap().contains("EPERM"), "{o}");
    let fixes = c.fixes("seccomp_filter_refuses_namespaces");
    for want in [
        "--security-opt seccomp=unconfined",
        "--security-opt apparmor=unconfined",
        "--security-opt systempaths=unconfined",
        "seccompProfile: {type: Unconfined}",
        "procMount: Unmasked",
    ] {
        assert!(fixes.contains(want), "{want} missing from {fixes}");
    }
    assert!(
        c.text.contains("cost: seccomp=unconfined drops"),
        "{}",
        c.text
    );
    runs_without_namespaces(&layout, &c);
}

/// Docker's masked /proc (here: /proc/sys covered, as Docker binds it read-only over itself):
/// the namespaces work, but the kernel refuses the sandbox a /proc of its own.
#[test]
fn a_masked_proc() {
    let layout = HostLayout {
        binds: vec![("/proc/sys".into(), "/proc/sys".into())],
        ..HostLayout::default()
    };
    let c = check(&layout);
    assert!(c.available("user_ns"), "{}", c.json);
    assert!(!c.available("proc"), "{}", c.json);
    let o = c.obstacle("proc_masked");
    assert!(o["found"].as_str().unwrap().contains("/proc/sys"), "{o}");
    assert!(c
        .fixes("proc_masked")
        .contains("--security-opt systempaths=unconfined"));
    // The init's setup report comes through every time (it was lost about one run in twelve
    // to the ECONNRESET its early exit left on the channel: see `sys::peek_packet_len`).
    for _ in 0..12 {
        run_refuses(
            &layout,
            &["container runtimes mask them: see `cordon check`"],
        );
    }
}

/// A kernel without Landlock (its syscall answers ENOSYS, as before 5.13), and a container
/// profile that refuses Landlock's syscalls (EPERM, as older Docker's): check says which, and
/// a run says in its `enforcement` that Landlock is missing — or refuses when it is required.
#[test]
fn no_landlock() {
    for (errno, id) in [
        (libc::ENOSYS, "landlock_not_in_kernel"),
        (libc::EPERM, "landlock_refused"),
    ] {
        let layout = HostLayout {
            refuse: vec![(libc::SYS_landlock_create_ruleset, errno)],
            ..HostLayout::default()
        };
        let c = check(&layout);
        assert!(!c.available("landlock"), "{}", c.json);
        assert_eq!(c.json["landlock_abi"], 0, "{}", c.json);
        assert!(c.obstacle_ids().contains(&id.to_string()), "{}", c.json);
        let o = py_cmd(layout.cordon(), &[], "R['ok'] = 1; out()");
        o.assert_ok();
        assert_eq!(o.enforcement()["landlock_abi"], 0, "{o}");
        assert!(
            o.enforcement()["notes"].to_string().contains("Landlock"),
            "the missing layer is not said: {o}"
        );
        let f = layout
            .cordon()
            .args(["run", "--require", "landlock", "--", "true"])
            .run();
        assert_eq!(f.code, Some(125), "{f:?}");
    }
}
