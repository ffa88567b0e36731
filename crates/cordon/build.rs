//! Names the commit `cordon --version` reports: `CORDON_COMMIT` if the packager sets it (a
//! source tarball has no git), else `git rev-parse` of the checkout, else `unknown`.
//! Written by hand: a dozen lines do not justify a build-info crate.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=CORDON_COMMIT");
    let commit = std::env::var("CORDON_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            // Rebuild when the checkout moves to another commit, not on every build.
            if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
                println!("cargo:rerun-if-changed={dir}/HEAD");
            }
            if let Some(common) = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"])
            {
                println!("cargo:rerun-if-changed={common}/packed-refs");
                if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
                    println!("cargo:rerun-if-changed={common}/{head}");
                }
            }
            git(&["rev-parse", "--short=12", "HEAD"])
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=CORDON_COMMIT={commit}");
}
