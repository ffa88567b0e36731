//! `cordon check`: what this host can enforce, why anything is missing, and what to do.

use clap::Args;

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn main(a: CheckArgs) -> i32 {
    let report = cordon_linux::detect::probe();
    // The same document the console's enforcement panel shows (GET /v1/host/enforcement).
    let (_, doc) = cordon_service::admin::host_report();
    let wasm = doc["wasm_backend"].clone();
    if a.json {
        match serde_json::to_string_pretty(&doc) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("cordon: {e}");
                return 125;
            }
        }
        return 0;
    }
    println!(
        "kernel {}; running as {}",
        report.kernel,
        if report.environment.root_in_user_namespace {
            "uid 0 of a user namespace (not the host's root)".to_string()
        } else if report.running_as_root {
            "root (sandboxes are mapped to unprivileged host uids)".to_string()
        } else {
            format!("uid {} (rootless)", report.euid)
        }
    );
    for f in &report.features {
        let mark = if f.available { "ok  " } else { "MISSING" };
        println!("  {mark:8} {:10} {}", f.name, f.detail);
        if !f.available {
            println!("           cost: {}", f.cost_if_missing);
        }
    }
    let mark = if wasm["available"] == true {
        "ok  "
    } else {
        "MISSING"
    };
    println!(
        "  {mark:8} {:10} {}",
        "wasm",
        wasm["detail"].as_str().unwrap_or_default()
    );
    let env = &report.environment;
    let mut seen = Vec::new();
    if let Some(c) = &env.container {
        seen.push(format!(
            "a {c} container ({})",
            env.container_evidence.join(", ")
        ));
    }
    if env.seccomp_mode == Some(2) {
        seen.push("an inherited seccomp filter".into());
    }
    if let Some(label) = env.apparmor_label.as_deref().filter(|l| *l != "unconfined") {
        seen.push(format!("AppArmor label {label}"));
    }
    for (k, v) in &env.sysctls {
        seen.push(format!("{k} = {v}"));
    }
    if !seen.is_empty() {
        println!("environment: {}", seen.join("; "));
    }
    if !report.obstacles.is_empty() {
        println!("why, and what you can do:");
        for o in &report.obstacles {
            println!("  {} [{}]: {}", o.layer, o.id, o.found);
            for f in &o.fixes {
                println!("    - {}", f.how);
                println!("      cost: {}", f.cost);
            }
        }
    }
    let missing: Vec<&str> = ["user_ns", "proc"]
        .into_iter()
        .filter(|name| !report.feature(name).is_some_and(|f| f.available))
        .chain(
            report
                .obstacles
                .iter()
                .filter(|o| o.id == "root_in_user_namespace")
                .map(|_| "a uid range to map sandboxes to"),
        )
        .collect();
    if report.mode == "no_namespaces" {
        println!(
            "cordon sandboxes here without namespaces: Landlock (ABI {}), seccomp, rlimits{} hold; \
             user_ns, pid_ns, net_ns, mount_ns, ipc_ns, uts_ns and cgroup_ns are missing (each run's \
             enforcement says so and what it leaves open); one-shot runs only, `--require user_ns` \
             refuses instead, `cordon serve` needs --allow-degraded. The fixes above give the full \
             sandbox back.",
            report.landlock_abi,
            if report.cgroup == "none" {
                String::new()
            } else {
                format!(", cgroup {}", report.cgroup)
            }
        );
    } else if missing.is_empty() {
        println!("cordon can sandbox on this host.");
    } else {
        println!(
            "cordon cannot sandbox on this host: it needs {} (see above).",
            missing.join(", ")
        );
    }
    0
}
