//! `cordon image build` end to end, with the real binary: a base image made in the test (a
//! directory with a statically linked busybox), RUN steps in cordon sandboxes, COPY from a
//! context, the step cache, and hostile Dockerfiles and contexts — each refused or contained,
//! and the host checked from outside afterwards.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod fixtures;
use fixtures::{busybox, Tmp};

fn cordon_bin() -> &'static str {
    env!("CARGO_BIN_EXE_cordon")
}

/// A context with a busybox root at `rootfs/` (excluded from the context's copies by
/// `.dockerignore`) and a data dir.
fn setup(tag: &str) -> Option<(Tmp, PathBuf, PathBuf)> {
    let bb = busybox()?;
    let t = Tmp::new(tag);
    let ctx = t.0.join("ctx");
    let root = ctx.join("rootfs");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::copy(&bb, root.join("bin/busybox")).unwrap();
    for tool in [
        "sh", "cat", "echo", "mkdir", "rm", "ls", "touch", "wget", "nc", "test",
    ] {
        symlink("busybox", root.join("bin").join(tool)).unwrap();
    }
    std::fs::write(root.join("etc/greeting"), "hi\n").unwrap();
    std::fs::write(ctx.join(".dockerignore"), "rootfs\nsecret*\n").unwrap();
    let data = t.0.join("data");
    Some((t, ctx, data))
}

fn build(data: &Path, ctx: &Path, dockerfile: &str, extra: &[&str]) -> Output {
    std::fs::write(ctx.join("Dockerfile"), dockerfile).unwrap();
    let out = Command::new(cordon_bin())
        .args(["image", "build", "-t", "built:1"])
        .args(extra)
        .arg(ctx)
        .arg("--data-dir")
        .arg(data)
        .stdin(Stdio::null())
        .output()
        .expect("cordon");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "cordon panicked: {err}");
    out
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "build failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn refused(out: &Output, needle: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "the build should have been refused: {err}"
    );
    assert!(err.contains(needle), "expected {needle:?} in: {err}");
    err
}

fn run_image(data: &Path, cmd: &[&str]) -> String {
    let out = Command::new(cordon_bin())
        .args(["run", "--image", "built:1", "--data-dir"])
        .arg(data)
        .arg("--")
        .args(cmd)
        .stdin(Stdio::null())
        .output()
        .expect("cordon run");
    assert!(
        out.status.success(),
        "cordon run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const BASIC: &str = "FROM ./rootfs
ARG V=1
ENV GREETING=hello
WORKDIR /app
COPY a.txt .
RUN echo \"$GREETING $V\" > /app/b.txt && rm /etc/greeting && mkdir -p /app/x/y
LABEL org.example.k=v
CMD [\"cat\", \"/app/b.txt\"]
";

#[test]
fn a_dockerfile_becomes_an_image_that_cordon_run_runs_and_unchanged_steps_are_cached() {
    let Some((_t, ctx, data)) = setup("basic") else {
        return;
    };
    std::fs::write(ctx.join("a.txt"), "one\n").unwrap();
    let err = ok(&build(&data, &ctx, BASIC, &["--build-arg", "V=7"]));
    assert!(err.contains("step 6/8: RUN echo"), "{err}");
    // The image's Cmd, Env, WorkingDir, its RUN's writes and deletions, and the COPY.
    assert_eq!(
        Command::new(cordon_bin())
            .args(["run", "--image", "built:1", "--data-dir"])
            .arg(&data)
            .output()
            .unwrap()
            .stdout,
        b"hello 7\n"
    );
    let seen = run_image(&data, &["sh", "-c", "cat /app/a.txt; pwd; echo $GREETING; test -e /etc/greeting || echo gone; test -d /app/x/y && echo dir"]);
    assert_eq!(seen, "one\n/app\nhello\ngone\ndir\n");

    // Nothing changed: every layer-making step comes from the cache.
    let err = ok(&build(&data, &ctx, BASIC, &["--build-arg", "V=7"]));
    assert_eq!(err.matches("  cached").count(), 3, "{err}");
    // A changed file invalidates its COPY and everything after it.
    std::fs::write(ctx.join("a.txt"), "two\n").unwrap();
    let err = ok(&build(&data, &ctx, BASIC, &["--build-arg", "V=7"]));
    let after_copy = err.split("step 5/8").nth(1).unwrap_or("");
    assert!(!after_copy.contains("cached"), "{err}");
    assert!(run_image(&data, &["cat", "/app/a.txt"]).contains("two"));

    // An image of the store is a base like any other: its layers, Env and WorkingDir carry on.
    std::fs::write(
        ctx.join("Dockerfile.child"),
        "FROM built:1\nRUN cat b.txt a.txt > c.txt\nCMD [\"cat\", \"c.txt\"]\n",
    )
    .unwrap();
    let out = Command::new(cordon_bin())
        .args(["image", "build", "-t", "child:1", "-f"])
        .arg(ctx.join("Dockerfile.child"))
        .arg(&ctx)
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    ok(&out);
    let child = Command::new(cordon_bin())
        .args(["run", "--image", "child:1", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&child.stdout), "hello 7\ntwo\n");
}

#[test]
fn copy_from_outside_the_context_is_refused_whatever_the_path() {
    let Some((t, ctx, data)) = setup("escape") else {
        return;
    };
    let outside = t.0.join("outside-secret");
    std::fs::write(&outside, "host secret\n").unwrap();
    symlink(&outside, ctx.join("link-out")).unwrap();
    symlink("../outside-secret", ctx.join("rel-link-out")).unwrap();
    std::fs::write(ctx.join("secret.key"), "ignored\n").unwrap();
    for (src, why) in [
        ("../outside-secret", "leaves the build context"),
        (outside.to_str().unwrap(), "absolute path"),
        ("/etc/passwd", "absolute path"),
        ("link-out", "leaves the build context"),
        ("rel-link-out", "leaves the build context"),
        ("secret.key", "excluded by .dockerignore"),
        ("http://127.0.0.1:9/x", "never fetch from URLs"),
    ] {
        for kw in ["COPY", "ADD"] {
            let out = build(&data, &ctx, &format!("FROM ./rootfs\n{kw} {src} /x\n"), &[]);
            let err = refused(&out, why);
            assert!(err.contains("line 2"), "{err}");
        }
    }
    // A directory copy carries a symlink out of the context as a link, never its target.
    std::fs::create_dir(ctx.join("d")).unwrap();
    symlink(&outside, ctx.join("d/l")).unwrap();
    ok(&build(&data, &ctx, "FROM ./rootfs\nCOPY d /d\n", &[]));
    let seen = run_image(&data, &["sh", "-c", "ls -l /d; cat /d/l 2>&1 || true"]);
    assert!(!seen.contains("host secret"), "{seen}");
}

#[test]
fn a_dockerignore_that_is_a_symlink_out_of_the_context_is_refused() {
    let Some((t, ctx, data)) = setup("ignore") else {
        return;
    };
    let outside = t.0.join("patterns");
    std::fs::write(&outside, "!*\n").unwrap();
    std::fs::remove_file(ctx.join(".dockerignore")).unwrap();
    symlink(&outside, ctx.join(".dockerignore")).unwrap();
    refused(&build(&data, &ctx, "FROM ./rootfs\n", &[]), ".dockerignore");
    // Re-including with `!` cannot reach past the context either.
    std::fs::remove_file(ctx.join(".dockerignore")).unwrap();
    std::fs::write(
        ctx.join(".dockerignore"),
        "*\n!../outside\n!/etc/passwd\n!rootfs\n",
    )
    .unwrap();
    refused(
        &build(&data, &ctx, "FROM ./rootfs\nCOPY ../patterns /p\n", &[]),
        "leaves the build context",
    );
}

#[test]
fn a_run_step_cannot_write_the_host_nor_reach_the_network_and_fails_the_build() {
    let Some((t, ctx, data)) = setup("hostile") else {
        return;
    };
    let marker = t.0.join("host-marker");
    std::fs::write(&marker, "untouched\n").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let m = marker.display();
    let out = build(
        &data,
        &ctx,
        &format!("FROM ./rootfs\nRUN echo pwned > {m}; echo x | nc -w 2 127.0.0.1 {port}; wget -T 2 -q -O- http://127.0.0.1:{port}/; test -e {m} && echo SEES-HOST; true\nRUN false\n"),
        &[],
    );
    let err = refused(&out, "line 3 (RUN): the command failed");
    assert!(!err.contains("SEES-HOST"), "{err}");
    // Checked from outside: the host file is as it was, nothing connected.
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "untouched\n");
    assert!(
        listener.accept().is_err(),
        "a RUN step reached the host's network"
    );
}

#[test]
fn unsupported_instructions_huge_and_endless_dockerfiles_are_refused_by_name_and_line() {
    let Some((_t, ctx, data)) = setup("refuse") else {
        return;
    };
    let err = refused(
        &build(&data, &ctx, "FROM ./rootfs\nRUN true\nEXPOSE 80\n", &[]),
        "EXPOSE",
    );
    assert!(err.contains("line 3"), "{err}");
    // Refused before any step ran.
    assert!(!err.contains("step 2/"), "{err}");
    refused(
        &build(&data, &ctx, "FROM ./rootfs\nCOPY --from=x /a /b\n", &[]),
        "--from",
    );
    let many = format!("FROM ./rootfs\n{}", "RUN true\n".repeat(10_000));
    refused(
        &build(&data, &ctx, &many, &[]),
        "more than 1000 instructions",
    );
    let huge = format!("FROM ./rootfs\nRUN echo {}\n", "a".repeat(2 << 20));
    refused(&build(&data, &ctx, &huge, &[]), "larger than");
}

#[test]
fn a_run_step_that_writes_past_disk_is_ended_and_leaves_nothing_in_the_store() {
    let Some((_t, ctx, data)) = setup("disk") else {
        return;
    };
    let out = build(
        &data,
        &ctx,
        "FROM ./rootfs\nRUN for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do dd if=/dev/zero of=/etc/f$i bs=1M count=1; sleep 0.2; done\n",
        &["--disk", "2M"],
    );
    refused(&out, "limits: disk");
    // Checked from outside: no step directory is left behind, and no image was made.
    let tmp = data.join("images/tmp");
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let ls = Command::new(cordon_bin())
        .args(["image", "ls", "--json", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&ls.stdout).contains("built"),
        "{}",
        String::from_utf8_lossy(&ls.stdout)
    );
}

/// docker-registry on a free 127.0.0.1 port, killed on drop.
struct Registry {
    child: std::process::Child,
    port: u16,
    _dir: Tmp,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn registry() -> Option<Registry> {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("docker-registry").is_file()));
    if !found {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("docker-registry is not installed");
        }
        eprintln!("SKIPPED: docker-registry is not installed");
        return None;
    }
    let dir = Tmp::new("registry");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let cfg = dir.0.join("config.yml");
    std::fs::write(
        &cfg,
        format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.0.join("data").display()
        ),
    )
    .unwrap();
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the registry did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Some(Registry {
        child,
        port,
        _dir: dir,
    })
}

#[test]
fn a_built_image_pushed_to_a_registry_is_pulled_elsewhere_and_runs_the_same() {
    let Some((t, ctx, data)) = setup("push") else {
        return;
    };
    let Some(reg) = registry() else { return };
    std::fs::write(ctx.join("a.txt"), "pushed\n").unwrap();
    ok(&build(&data, &ctx, BASIC, &[]));
    let dest = format!("127.0.0.1:{}/team/built:1", reg.port);
    let out = Command::new(cordon_bin())
        .args(["image", "push", "built:1", &dest, "--json", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A store that never saw the build pulls it and runs it: files, the deletion, Cmd, Env.
    let other = t.0.join("other");
    let pull = Command::new(cordon_bin())
        .args(["image", "pull", &dest, "--data-dir"])
        .arg(&other)
        .output()
        .unwrap();
    assert!(
        pull.status.success(),
        "{}",
        String::from_utf8_lossy(&pull.stderr)
    );
    let run = |cmd: &[&str]| {
        let o = Command::new(cordon_bin())
            .args(["run", "--image", &dest, "--data-dir"])
            .arg(&other)
            .arg("--")
            .args(cmd)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert_eq!(
        run(&[
            "sh",
            "-c",
            "cat /app/a.txt /app/b.txt; test -e /etc/greeting || echo gone; echo $GREETING"
        ]),
        "pushed\nhello 1\ngone\nhello\n"
    );
    // Pushing again uploads nothing new.
    let again = Command::new(cordon_bin())
        .args(["image", "push", "built:1", &dest, "--json", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(v["skipped_blobs"], 5, "{v}");
}

/// Two steps that make the same layer (one layer in the store, by its digest) stack it twice in
/// the next step's root and in the image's: overlayfs refused that root (ELOOP) until the
/// engine mounted each layer once, where it is topmost.
#[test]
fn two_steps_making_the_same_layer_leave_a_root_that_mounts() {
    let Some((_t, ctx, data)) = setup("same-layer") else {
        return;
    };
    let out = build(
        &data,
        &ctx,
        "FROM ./rootfs\nRUN echo same > /etc/same\nRUN echo same > /etc/same\nRUN cat /etc/same\n",
        &[],
    );
    ok(&out);
    assert_eq!(
        run_image(&data, &["cat", "/etc/same", "/etc/greeting"]),
        "same\nhi\n"
    );
}

#[test]
fn copy_chown_and_chmod_give_the_files_the_owner_and_mode_a_sandbox_of_the_image_sees() {
    let Some((_t, ctx, data)) = setup("chown") else {
        return;
    };
    let root = ctx.join("rootfs");
    symlink("busybox", root.join("bin/stat")).unwrap();
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1001:app:/home/app:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(
        root.join("etc/group"),
        "root:x:0:\napp:x:1001:\nstaff:x:50:\n",
    )
    .unwrap();
    std::fs::write(ctx.join("run.sh"), "#!/bin/sh\necho ran\n").unwrap();
    std::fs::create_dir_all(ctx.join("tree/sub")).unwrap();
    std::fs::write(ctx.join("tree/x"), "x").unwrap();
    std::fs::write(ctx.join("tree/sub/y"), "y").unwrap();
    std::fs::write(ctx.join("a.txt"), "a").unwrap();
    let df = "FROM ./rootfs
ARG OWNER=1234:staff
COPY --chown=app --chmod=0750 run.sh /srv/run.sh
COPY --chown=$OWNER tree/ /srv/tree/
COPY --chown=4321 [\"a.txt\", \"/opt/new/dir/a.txt\"]
COPY --chmod=600 a.txt /srv/plain.txt
COPY --chmod=0755 run.sh /srv/any.sh
";
    ok(&build(&data, &ctx, df, &[]));
    let seen = run_image(
        &data,
        &[
            "sh",
            "-c",
            "cd / && stat -c '%n %u:%g %a' srv/run.sh srv/tree srv/tree/x srv/tree/sub srv/tree/sub/y opt opt/new/dir opt/new/dir/a.txt srv/plain.txt",
        ],
    );
    // Inside the sandbox, the modes.
    let want = [
        ("srv/run.sh", "1000:1001", "750"),
        ("srv/tree", "1234:50", "755"),
        ("srv/tree/x", "1234:50", "644"),
        ("srv/tree/sub", "1234:50", "755"),
        ("srv/tree/sub/y", "1234:50", "644"),
        ("opt", "4321:4321", "755"),
        ("opt/new/dir", "4321:4321", "755"),
        ("opt/new/dir/a.txt", "4321:4321", "644"),
        ("srv/plain.txt", "0:0", "600"),
    ];
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines.len(), want.len(), "{seen}");
    for (line, (name, _, mode)) in lines.iter().zip(want) {
        let got: Vec<&str> = line.split(' ').collect();
        assert_eq!(got[0], name, "{seen}");
        assert_eq!(got[2], mode, "{name}: {seen}");
    }
    // The owners are the image's, as Docker writes them: in its layers (the store keeps them
    // as root; rootless, its files are all the user's). A sandbox has one uid, the image
    // root's files are its user's, and other owners show as nobody (README: Ownership).
    if rustix::process::geteuid().is_root() {
        use std::os::unix::fs::MetadataExt;
        let layers = data.join("images/layers/sha256");
        for (name, owner, _) in want {
            let found: Vec<String> = std::fs::read_dir(&layers)
                .expect("layers")
                .flatten()
                .filter_map(|l| std::fs::symlink_metadata(l.path().join(name)).ok())
                .map(|m| format!("{}:{}", m.uid(), m.gid()))
                .collect();
            // The top-most layer that has it decides; each is in one COPY layer here except
            // the directories a later COPY passes through.
            assert!(found.contains(&owner.to_string()), "{name}: {found:?}");
        }
    }
    // What --chmod made executable runs (without --chown: the sandbox user's inside).
    assert_eq!(run_image(&data, &["/srv/any.sh"]), "ran\n");

    // What cannot be honoured is refused by name, before anything runs.
    for (line, want) in [
        ("COPY --chmod=u+x a.txt /a", "an octal mode"),
        ("COPY --chmod=17777 a.txt /a", "an octal mode"),
        ("COPY --chown=nobody a.txt /a", "unable to find user nobody"),
        (
            "COPY --chown=app:nogroup a.txt /a",
            "unable to find group nogroup",
        ),
        ("COPY --link a.txt /a", "the flag --link is not supported"),
        ("COPY a.txt --chown=app /a", "flags come before the sources"),
    ] {
        let err = refused(
            &build(&data, &ctx, &format!("FROM ./rootfs\n{line}\n"), &[]),
            want,
        );
        assert!(err.contains("line 2"), "{err}");
    }
}
