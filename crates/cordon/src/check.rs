//! `cordon check`: what this host can enforce.

use clap::Args;

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn main(a: CheckArgs) -> i32 {
    let report = cordon_linux::detect::probe();
    if a.json {
        match serde_json::to_string_pretty(&report) {
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
        if report.running_as_root {
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
    let usable = report.feature("user_ns").is_some_and(|f| f.available);
    println!(
        "{}",
        if usable {
            "cordon can sandbox on this host."
        } else {
            "cordon cannot sandbox on this host: user namespaces are required."
        }
    );
    0
}
