//! Learn mode end to end (`cordon run --learn FILE`): a task is learned, replayed under the
//! learned profile, and the same task changed to go elsewhere is refused — the learned profile
//! is the task's, not the learning run's wide one; learning again widens the file; and a hostile
//! program in learn mode gets exactly what it gets without it. Loopback only: upstreams listen
//! on 127.0.0.x, names are pinned with --add-host, so no packet leaves the machine.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;

use common::upstream::Upstream;
use common::HostDir;
use serde_json::Value;

/// `cordon run --json ARGS`: the Outcome, and cordon's stderr.
fn cordon(args: &[String]) -> (Value, String) {
    let out = Command::new(common::cordon_bin())
        .args(["run", "--json"])
        .args(args)
        .output()
        .expect("run cordon");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (
        serde_json::from_slice(&out.stdout).expect("outcome"),
        stderr,
    )
}

/// A python3 task fetching `url` through the proxy: prints the status (or the error's name).
fn fetch(url: &str) -> Vec<String> {
    let script = format!(
        "import urllib.request, urllib.error\n\
         try:\n    r = urllib.request.urlopen('{url}', timeout=10); print(r.status, r.read().decode(), end='')\n\
         except urllib.error.HTTPError as e:\n    print(e.code)\n"
    );
    vec!["--".into(), "python3".into(), "-c".into(), script]
}

/// The learning run's wide allowance: both test names, any port, their loopback addresses.
fn wide() -> Vec<String> {
    [
        "--allow-net",
        "a.test:*",
        "--allow-net",
        "c.test:*",
        "--allow-net",
        "127.0.0.2:*",
        "--allow-net",
        "127.0.0.3:*",
        "--add-host",
        "a.test:127.0.0.2",
        "--add-host",
        "c.test:127.0.0.3",
    ]
    .map(String::from)
    .to_vec()
}

fn learn(file: &Path, task: Vec<String>) -> Value {
    let mut args: Vec<String> = vec![
        "--learn".into(),
        file.display().to_string(),
        "--profile".into(),
        "default".into(),
    ];
    args.extend(wide());
    args.extend(task);
    let (o, stderr) = cordon(&args);
    assert_eq!(o["exit_code"], 0, "{o}");
    assert!(stderr.contains("learned profile"), "{stderr}");
    o
}

fn replay(file: &Path, task: Vec<String>) -> Value {
    let mut args = vec!["--profile".into(), file.display().to_string()];
    args.extend(task);
    cordon(&args).0
}

fn refused(o: &Value, host: &str) -> bool {
    o["network"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["host"] == host && e["verdict"] == "deny")
}

#[test]
fn a_learned_profile_replays_the_task_and_refuses_another_port_or_host() {
    let a = Upstream::start("127.0.0.2");
    let b = Upstream::start("127.0.0.2");
    let c = Upstream::start("127.0.0.3");
    let dir = HostDir::new("learn");
    let file = dir.join("learned.toml");
    learn(&file, fetch(&format!("http://a.test:{}/", a.port)));
    let text = std::fs::read_to_string(&file).expect("learned file");
    assert!(text.contains("extends = \"default\""), "{text}");
    assert!(
        text.contains(&format!("\"a.test:{}\",  # reached", a.port)),
        "{text}"
    );
    assert!(
        !text.contains("c.test:*") && !text.contains("127.0.0.2:*"),
        "{text}"
    );
    assert!(text.contains("memory = "), "{text}");

    let o = replay(&file, fetch(&format!("http://a.test:{}/", a.port)));
    assert_eq!(o["exit_code"], 0, "{o}");
    assert_eq!(o["stdout"], "200 hello from upstream\n", "{o}");

    let (b_before, c_before) = (b.hits.load(Ordering::SeqCst), c.hits.load(Ordering::SeqCst));
    let o = replay(&file, fetch(&format!("http://a.test:{}/", b.port)));
    assert_eq!(o["stdout"], "403\n", "another port: {o}");
    assert!(refused(&o, "a.test"), "{o}");
    let o = replay(&file, fetch(&format!("http://c.test:{}/", c.port)));
    assert_eq!(o["stdout"], "403\n", "another host: {o}");
    assert!(refused(&o, "c.test"), "{o}");
    assert_eq!(b.hits.load(Ordering::SeqCst), b_before);
    assert_eq!(c.hits.load(Ordering::SeqCst), c_before);
}

#[test]
fn learning_onto_a_learned_file_widens_it() {
    let a = Upstream::start("127.0.0.2");
    let c = Upstream::start("127.0.0.3");
    let dir = HostDir::new("learn-merge");
    let file = dir.join("learned.toml");
    let task_a = fetch(&format!("http://a.test:{}/", a.port));
    let task_c = fetch(&format!("http://c.test:{}/", c.port));
    learn(&file, task_a.clone());
    assert_eq!(replay(&file, task_c.clone())["stdout"], "403\n");
    learn(&file, task_c.clone());
    for task in [task_a, task_c] {
        let o = replay(&file, task);
        assert_eq!(o["stdout"], "200 hello from upstream\n", "{o}");
    }
}

/// The program's view, for comparing a run with --learn and one without.
const HOSTILE: &str = r#"
import os, socket
def attempt(f):
    try:
        f(); return "done"
    except OSError as e:
        return e.errno
def write(p):
    with open(p, "w") as f: f.write("owned")
def connect_evil():
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(b'CONNECT x"]\n[filesystem]\nrw = ["/"]\n#:443 HTTP/1.1\r\nHost: y\r\n\r\n')
    s.recv(100)
print("ro_bind", attempt(lambda: write("/data/owned")))
print("etc", attempt(lambda: write("/etc/owned")))
print("usr", attempt(lambda: write("/usr/owned")))
print("proxy", attempt(connect_evil))
import shutil, subprocess
def run_copied():
    shutil.copy("/usr/bin/true", "/tmp/mine")
    subprocess.run(["/tmp/mine"], check=True)
print("copied", attempt(run_copied))
"#;

#[test]
fn a_hostile_program_in_learn_mode_gets_no_more_than_without_it() {
    let host = HostDir::new("learn-hostile");
    let data = HostDir::new("learn-data");
    let file = host.join("learned.toml");
    let run = |learn: bool| {
        let mut args: Vec<String> = Vec::new();
        if learn {
            args.extend(["--learn".into(), file.display().to_string()]);
        }
        args.extend([
            "--ro".into(),
            format!("{}:/data", data.str()),
            "--allow-net".into(),
            "a.test".into(),
            "--".into(),
            "python3".into(),
            "-c".into(),
            HOSTILE.into(),
        ]);
        cordon(&args).0
    };
    let without = run(false);
    let with = run(true);
    assert_eq!(with["stdout"], without["stdout"], "{with}\n{without}");
    let out = with["stdout"].as_str().unwrap();
    for what in ["ro_bind", "etc", "usr"] {
        assert!(
            !out.contains(&format!("{what} done")),
            "{what} written: {out}"
        );
    }
    assert!(
        std::fs::read_dir(&data.path).unwrap().next().is_none(),
        "the read-only bind was written on the host"
    );
    // The learned file loads, and grants no write beyond the run's own scratch space.
    let text = std::fs::read_to_string(&file).expect("learned file");
    let explained = Command::new(common::cordon_bin())
        .args(["profile", "explain"])
        .arg(&file)
        .output()
        .expect("explain");
    assert!(explained.status.success(), "{text}");
    assert!(!text.contains("rw"), "{text}");
    // A program written in /tmp while learning cannot be listed (nothing there can be).
    assert!(!text.contains("/tmp/mine"), "{text}");
    let words = String::from_utf8_lossy(&explained.stdout);
    let may_write = words
        .split("may write:")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .unwrap_or_default();
    assert!(!may_write.contains("/ (host"), "{words}");
    assert!(
        !may_write.contains(data.str()),
        "the ro bind became writable: {words}"
    );
}

#[test]
fn a_programs_allowlist_is_kept_and_what_it_refused_is_learned() {
    let dir = HostDir::new("learn-exec");
    let file = dir.join("learned.toml");
    let run = |learn: bool, cmd: &[&str]| {
        let mut args: Vec<String> = Vec::new();
        if learn {
            args.extend([
                "--learn".into(),
                file.display().to_string(),
                "--exec-allow".into(),
                "/usr/bin/python3".into(),
            ]);
        } else {
            args.extend(["--profile".into(), file.display().to_string()]);
        }
        args.push("--".into());
        args.extend(cmd.iter().map(|s| s.to_string()));
        cordon(&args).0
    };
    let o = run(true, &["python3", "-c", "print('ok')"]);
    assert_eq!(o["stdout"], "ok\n", "{o}");
    // /usr/bin/env is refused while learning: the learned file allows it.
    let o = run(true, &["/usr/bin/env", "--version"]);
    assert_eq!(o["exit_code"], 126, "{o}");
    let text = std::fs::read_to_string(&file).expect("learned file");
    assert!(
        text.contains("\"/usr/bin/env\",  # refused during learning"),
        "{text}"
    );
    let o = run(false, &["python3", "-c", "print('ok')"]);
    assert_eq!(o["stdout"], "ok\n", "{o}");
    let o = run(false, &["/usr/bin/env", "--version"]);
    assert_eq!(o["exit_code"], 0, "{o}");
    // Anything else is still refused under the learned profile.
    let o = run(false, &["/bin/sh", "-c", "echo escaped"]);
    assert_eq!(o["exit_code"], 126, "{o}");
    assert!(!o["stdout"].as_str().unwrap().contains("escaped"), "{o}");
}

/// The programs a run executes are learned (seccomp user notification, root and rootless): a
/// script in the workspace, its `#!` interpreter, what it runs; replayed it passes, and the same
/// script changed to run another program is refused.
#[test]
fn the_programs_a_task_runs_are_learned_and_nothing_else_may_run() {
    let ws = HostDir::new("learn-ws");
    let dir = HostDir::new("learn-progs");
    let file = dir.join("learned.toml");
    ws.file(
        "task.sh",
        "#!/bin/sh\npython3 -c 'print(7)'\nif [ -n \"$1\" ]; then /usr/bin/id -u && echo RAN; fi\n",
        0o755,
    );
    let mut args: Vec<String> = vec![
        "--learn".into(),
        file.display().to_string(),
        "--workspace".into(),
        ws.str().into(),
        "--".into(),
        "./task.sh".into(),
    ];
    let (o, _) = cordon(&args);
    assert_eq!(o["stdout"], "7\n", "{o}");
    let text = std::fs::read_to_string(&file).expect("learned file");
    for want in [
        "\"/workspace/task.sh\"",
        "\"/bin/sh\"",
        "\"/usr/bin/python3\"",
    ] {
        assert!(text.contains(want), "{want} not learned:\n{text}");
    }
    assert!(!text.contains("/usr/bin/id"), "{text}");
    let o = replay(&file, vec!["--".into(), "./task.sh".into()]);
    assert_eq!(o["exit_code"], 0, "{o}");
    assert_eq!(o["stdout"], "7\n", "{o}");
    // Changed to run a program the task never ran: refused by the learned allowlist.
    let o = replay(&file, vec!["--".into(), "./task.sh".into(), "x".into()]);
    assert_eq!(o["stdout"], "7\n", "id ran under the learned profile: {o}");
    assert!(
        o["stderr"].as_str().unwrap().contains("Permission denied"),
        "{o}"
    );
    // Learning the changed task widens the file to it.
    args.push("x".into());
    cordon(&args);
    let o = replay(&file, vec!["--".into(), "./task.sh".into(), "x".into()]);
    assert!(o["stdout"].as_str().unwrap().ends_with("RAN\n"), "{o}");
}

/// Learns `task` into `file`: first from the tight starting flags `start`, then again from the
/// file itself (each run widens it: a run stops at the first file it lacks) until the task
/// passes; `extra` is given to every learning run (a wide network allowance). The passing
/// learning run's Outcome.
fn learn_until_passes(file: &Path, start: &[String], extra: &[String], task: &[String]) -> Value {
    let mut profile = start.to_vec();
    let mut last = Value::Null;
    for _ in 0..5 {
        let mut args = vec!["--learn".to_string(), file.display().to_string()];
        args.extend(profile.iter().cloned());
        args.extend(extra.iter().cloned());
        args.push("--".into());
        args.extend(task.iter().cloned());
        let (o, stderr) = cordon(&args);
        assert!(stderr.contains("learned profile"), "{stderr}");
        if o["exit_code"] == 0 {
            return o;
        }
        last = o;
        profile = vec!["--profile".into(), file.display().to_string()];
    }
    let text = std::fs::read_to_string(file).unwrap_or_default();
    panic!("never passed while learning: {last}\n{text}");
}

/// `cordon run --profile FILE -- task`: the Outcome.
fn replay_task(file: &Path, task: &[String]) -> Value {
    let mut args = vec!["--profile".into(), file.display().to_string(), "--".into()];
    args.extend(task.iter().cloned());
    cordon(&args).0
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A workspace the sandbox may write in, root or rootless (as root, cordon runs the sandbox
/// as a root-owned workspace's idmapped owner).
fn workspace(tag: &str) -> HostDir {
    HostDir::new(tag)
}

/// A host directory standing in for `~/.ssh`: never read by the task, so never learned.
fn planted_secret() -> HostDir {
    let s = HostDir::new("learn-ssh");
    s.file("id_ed25519", "PLANTED-PRIVATE-KEY\n", 0o644);
    s
}

fn stderr_of(o: &Value) -> &str {
    o["stderr"].as_str().unwrap_or_default()
}

/// A pandas + matplotlib job reading a host data directory the sandbox does not have and
/// writing a chart into its workspace: learned from a profile with only the workspace, the
/// learned file binds the data read-only (naming python3) and replays; changed to read a
/// planted `~/.ssh` or write outside its workspace, it is refused.
#[test]
fn a_python_data_job_is_learned_replayed_and_kept_from_secrets_and_other_dirs() {
    let data = HostDir::new("learn-pydata");
    for (name, rows) in [("a.csv", "1,2\n2,4\n"), ("b.csv", "3,9\n4,16\n")] {
        data.file(name, &format!("x,y\n{rows}"), 0o644);
    }
    let secret = planted_secret();
    let outside = HostDir::new("learn-outside");
    common::set_mode(&outside.path, 0o777);
    let ws = workspace("learn-pyws");
    let dir = HostDir::new("learn-py");
    let file = dir.join("learned.toml");
    let job = format!(
        "import os, sys\n\
         import pandas as pd\n\
         import matplotlib\n\
         matplotlib.use('Agg')\n\
         import matplotlib.pyplot as plt\n\
         d = '{data}'\n\
         df = pd.concat([pd.read_csv(os.path.join(d, f)) for f in sorted(os.listdir(d))])\n\
         df.plot(x='x', y='y').get_figure().savefig('/workspace/chart.png')\n\
         print('rows', len(df))\n\
         if 'secret' in sys.argv: print(open('{secret}/id_ed25519').read())\n\
         if 'outside' in sys.argv: open('{outside}/owned', 'w').write('x')\n",
        data = data.str(),
        secret = secret.str(),
        outside = outside.str(),
    );
    ws.file("job.py", &job, 0o644);
    let task = strings(&["/usr/bin/python3", "job.py"]);
    let start = strings(&["--profile", "default", "--workspace", ws.str()]);
    // The starting profile alone does not have the data: the job fails under it.
    let mut args = start.clone();
    args.push("--".into());
    args.extend(task.iter().cloned());
    let o = cordon(&args).0;
    assert_ne!(o["exit_code"], 0, "{o}");
    learn_until_passes(&file, &start, &[], &task);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains(&format!(
            "\"{}\",  # read during learning by python3",
            data.str()
        )),
        "{text}"
    );
    assert!(text.contains("\"/usr/bin/python3\""), "{text}");
    assert!(
        !text.contains(secret.str()) && !text.contains(outside.str()),
        "{text}"
    );
    std::fs::remove_file(ws.join("chart.png")).unwrap();
    let o = replay_task(&file, &task);
    assert_eq!(o["exit_code"], 0, "{o}");
    assert_eq!(o["stdout"], "rows 4\n", "{o}");
    let png = std::fs::read(ws.join("chart.png")).expect("the chart, on the host");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");

    let mut changed = task.clone();
    changed.push("secret".into());
    let o = replay_task(&file, &changed);
    assert_ne!(o["exit_code"], 0, "{o}");
    assert!(stderr_of(&o).contains("No such file or directory"), "{o}");
    assert!(stderr_of(&o).contains("id_ed25519"), "{o}");
    assert!(!o.to_string().contains("PLANTED-PRIVATE-KEY"), "{o}");
    let mut changed = task.clone();
    changed.push("outside".into());
    let o = replay_task(&file, &changed);
    assert_ne!(o["exit_code"], 0, "{o}");
    assert!(stderr_of(&o).contains("owned"), "{o}");
    assert!(
        !outside.join("owned").exists(),
        "written outside the workspace"
    );
}

/// A Node script reading host input and writing into its workspace: learned and replayed;
/// changed to run `/bin/sh`, it is refused by the learned programs allowlist.
#[test]
fn a_node_script_is_learned_replayed_and_refused_a_shell() {
    let data = HostDir::new("learn-nodedata");
    data.file("input.json", "{\"n\": [1, 2, 3]}", 0o644);
    let ws = workspace("learn-nodews");
    let dir = HostDir::new("learn-node");
    let file = dir.join("learned.toml");
    ws.file(
        "task.js",
        &format!(
            "const fs = require('fs');\n\
             const n = JSON.parse(fs.readFileSync('{}/input.json')).n;\n\
             fs.writeFileSync('/workspace/sum.txt', String(n.reduce((a, b) => a + b)));\n\
             console.log('sum', n.reduce((a, b) => a + b));\n\
             if (process.argv.includes('shell')) {{\n\
               try {{ console.log(require('child_process').execSync('echo escaped').toString()); }}\n\
               catch (e) {{ console.log('refused', e.code); process.exit(3); }}\n\
             }}\n",
            data.str()
        ),
        0o644,
    );
    let task = strings(&["/usr/bin/node", "task.js"]);
    let start = strings(&[
        "--profile",
        "default",
        "--workspace",
        ws.str(),
        "--memory",
        "1G",
    ]);
    learn_until_passes(&file, &start, &[], &task);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains(&format!(
            "\"{}/input.json\",  # read during learning by node",
            data.str()
        )),
        "{text}"
    );
    std::fs::remove_file(ws.join("sum.txt")).unwrap();
    let o = replay_task(&file, &task);
    assert_eq!(o["stdout"], "sum 6\n", "{o}");
    assert_eq!(std::fs::read_to_string(ws.join("sum.txt")).unwrap(), "6");
    let mut changed = task.clone();
    changed.push("shell".into());
    let o = replay_task(&file, &changed);
    assert_eq!(o["exit_code"], 3, "{o}");
    assert!(
        o["stdout"].as_str().unwrap().contains("refused EACCES"),
        "{o}"
    );
    assert!(!o["stdout"].as_str().unwrap().contains("escaped"), "{o}");
}

/// `git clone` of a host repository over `file://` into the workspace: the repository is
/// learned read-only, the git programs it ran are listed; replayed, the clone is on the host.
#[test]
fn a_git_clone_over_file_url_is_learned_and_replayed() {
    let repo = HostDir::new("learn-repo");
    let git = |dir: &Path, args: &[&str]| {
        let out = Command::new("git")
            .current_dir(dir)
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    repo.file("README", "cloned content\n", 0o644);
    git(&repo.path, &["init", "-q"]);
    git(&repo.path, &["add", "README"]);
    git(&repo.path, &["commit", "-q", "-m", "one"]);
    let ws = workspace("learn-gitws");
    let dir = HostDir::new("learn-git");
    let file = dir.join("learned.toml");
    let url = format!("file://{}", repo.str());
    // The repository is the host's, owned by another uid than the sandbox's: git wants it
    // declared safe, in the sandbox's own (scratch) home.
    let task = strings(&[
        "sh",
        "-c",
        &format!(
            "git config --global --add safe.directory '*' && git clone -q {url} /workspace/clone"
        ),
    ]);
    let start = strings(&["--profile", "default", "--workspace", ws.str()]);
    learn_until_passes(&file, &start, &[], &task);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains(&format!("\"{}", repo.str())), "{text}");
    assert!(
        text.contains("git-upload-pack") || text.contains("/git\""),
        "{text}"
    );
    std::fs::remove_dir_all(ws.join("clone")).unwrap();
    let o = replay_task(&file, &task);
    assert_eq!(o["exit_code"], 0, "{o}");
    assert_eq!(
        std::fs::read_to_string(ws.join("clone/README")).unwrap(),
        "cloned content\n"
    );
    // The learned profile does not let the clone write in the repository it reads.
    let o = replay_task(
        &file,
        &strings(&["sh", "-c", &format!("echo x > {}/owned", repo.str())]),
    );
    assert_ne!(o["exit_code"], 0, "{o}");
    assert!(!repo.join("owned").exists());
}

/// A C build (make and gcc) including headers from a host directory: learned, replayed (the
/// program it built runs), and changed to install outside its workspace, refused.
#[test]
fn a_c_build_with_make_and_gcc_is_learned_and_replayed() {
    let inc = HostDir::new("learn-inc");
    inc.file("answer.h", "#define ANSWER 42\n", 0o644);
    let outside = HostDir::new("learn-install");
    common::set_mode(&outside.path, 0o777);
    let ws = workspace("learn-cws");
    ws.file(
        "main.c",
        "#include <stdio.h>\n#include \"answer.h\"\nint main(void) { printf(\"%d\\n\", ANSWER); return 0; }\n",
        0o644,
    );
    ws.file(
        "Makefile",
        &format!(
            "prog: main.c\n\tgcc -I{inc} -o prog main.c\n\ninstall: main.c\n\tgcc -I{inc} -o {out}/prog main.c\n",
            inc = inc.str(),
            out = outside.str()
        ),
        0o644,
    );
    let dir = HostDir::new("learn-c");
    let file = dir.join("learned.toml");
    let task = strings(&["make", "-s", "prog"]);
    let start = strings(&["--profile", "default", "--workspace", ws.str()]);
    learn_until_passes(&file, &start, &[], &task);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains(&format!("\"{}", inc.str())), "{text}");
    assert!(text.contains("\"/usr/bin/make\""), "{text}");
    std::fs::remove_file(ws.join("prog")).unwrap();
    let o = replay_task(&file, &task);
    assert_eq!(o["exit_code"], 0, "{o}");
    let built = Command::new(ws.join("prog"))
        .output()
        .expect("run the built program");
    assert_eq!(String::from_utf8_lossy(&built.stdout), "42\n");
    let o = replay_task(&file, &strings(&["make", "-s", "install"]));
    assert_ne!(o["exit_code"], 0, "{o}");
    assert!(stderr_of(&o).contains("prog"), "{o}");
    assert!(
        !outside.join("prog").exists(),
        "installed outside the workspace"
    );
}

/// A script reaching two loopback hosts through the proxy: learned from a wide allowance, the
/// learned file names the two; a third host is refused (a `deny` in the Outcome's network).
#[test]
fn a_script_reaching_two_hosts_is_learned_and_a_third_host_refused() {
    let a = Upstream::start("127.0.0.2");
    let b = Upstream::start("127.0.0.3");
    let c = Upstream::start("127.0.0.4");
    let dir = HostDir::new("learn-two");
    let file = dir.join("learned.toml");
    let script = |hosts: &[(&str, u16)]| {
        let urls: Vec<String> = hosts
            .iter()
            .map(|(h, p)| format!("'http://{h}:{p}/'"))
            .collect();
        strings(&[
            "/usr/bin/python3",
            "-c",
            &format!(
                "import urllib.request, urllib.error\n\
                 for u in [{}]:\n\
                 \x20   try: print(urllib.request.urlopen(u, timeout=10).status)\n\
                 \x20   except urllib.error.HTTPError as e: print(e.code)\n",
                urls.join(", ")
            ),
        ])
    };
    let wide = strings(&[
        "--allow-net",
        "*.test:*",
        "--allow-net",
        "127.0.0.2:*",
        "--allow-net",
        "127.0.0.3:*",
        "--allow-net",
        "127.0.0.4:*",
        "--add-host",
        "a.test:127.0.0.2",
        "--add-host",
        "b.test:127.0.0.3",
        "--add-host",
        "c.test:127.0.0.4",
    ]);
    let task = script(&[("a.test", a.port), ("b.test", b.port)]);
    let o = learn_until_passes(&file, &strings(&["--profile", "default"]), &wide, &task);
    assert_eq!(o["stdout"], "200\n200\n", "{o}");
    let o = replay_task(&file, &task);
    assert_eq!(o["stdout"], "200\n200\n", "{o}");
    let before = c.hits.load(Ordering::SeqCst);
    let o = replay_task(&file, &script(&[("a.test", a.port), ("c.test", c.port)]));
    assert_eq!(o["stdout"], "200\n403\n", "{o}");
    assert!(refused(&o, "c.test"), "{o}");
    assert_eq!(
        c.hits.load(Ordering::SeqCst),
        before,
        "the third host was reached"
    );
}

/// The escape suite, each attack printing `NAME done` or `NAME <errno>`.
const ESCAPES: &str = r#"
import ctypes, os, shutil, socket, subprocess, sys, urllib.request, urllib.error
libc = ctypes.CDLL(None, use_errno=True)
secret, outside, ro, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def attempt(name, f):
    try:
        r = f()
        print(name, "done" if r is None else r)
    except OSError as e:
        print(name, e.errno)
def c_call(r):
    return "done" if r == 0 else ctypes.get_errno()
def write(p):
    with open(p, "w") as f: f.write("owned")
attempt("read_secret", lambda: print(open(secret + "/id_ed25519").read()))
attempt("list_secret", lambda: os.listdir(secret) and None)
attempt("write_outside", lambda: write(outside + "/owned"))
attempt("mkdir_outside", lambda: os.mkdir(outside + "/dir"))
attempt("write_ro_bind", lambda: write(ro + "/owned"))
attempt("write_etc", lambda: write("/etc/owned"))
attempt("ptrace_init", lambda: c_call(libc.ptrace(16, 1, 0, 0)))
os.makedirs("/tmp/m", exist_ok=True)
attempt("mount", lambda: c_call(libc.mount(b"none", b"/tmp/m", b"tmpfs", 0, None)))
attempt("unshare_user", lambda: c_call(libc.unshare(0x10000000)))
def via_proxy():
    try:
        return urllib.request.urlopen("http://c.test:%d/" % port, timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code
attempt("proxy_other_host", via_proxy)
attempt("direct_connect", lambda: socket.create_connection(("127.0.0.3", port), timeout=5) and None)
def run_copied():
    shutil.copy("/usr/bin/true", "/tmp/mine")
    os.chmod("/tmp/mine", 0o755)
    subprocess.run(["/tmp/mine"], check=True)
attempt("exec_copied", run_copied)
attempt("exec_shell", lambda: subprocess.run(["/bin/sh", "-c", "true"], check=True) and None)
"#;

/// Learn mode never weakens the run it watches: the escape suite (host secrets, writes
/// outside, ptrace, mount, a user namespace, a host the allowlist does not name, direct
/// connects, a copied binary and a shell under a programs allowlist) gets exactly the same
/// answers with `--learn` as without it, root and rootless, and the host is untouched.
#[test]
fn the_escape_suite_gets_no_more_in_learn_mode_than_without_it() {
    let c = Upstream::start("127.0.0.3");
    let secret = planted_secret();
    let outside = HostDir::new("learn-esc-out");
    common::set_mode(&outside.path, 0o777);
    let ro = HostDir::new("learn-esc-ro");
    common::set_mode(&ro.path, 0o777);
    let dir = HostDir::new("learn-esc");
    let file = dir.join("learned.toml");
    let run = |learn: bool| {
        let mut args: Vec<String> = Vec::new();
        if learn {
            args.extend(["--learn".into(), file.display().to_string()]);
        }
        args.extend(strings(&[
            "--ro",
            ro.str(),
            "--allow-net",
            "a.test:*",
            "--add-host",
            "c.test:127.0.0.3",
            "--exec-allow",
            "/usr/bin/python3",
            "--",
            "/usr/bin/python3",
            "-c",
            ESCAPES,
            secret.str(),
            outside.str(),
            ro.str(),
            &c.port.to_string(),
        ]));
        cordon(&args).0
    };
    let without = run(false);
    let with = run(true);
    let out = with["stdout"].as_str().unwrap();
    assert_eq!(with["stdout"], without["stdout"], "{with}\n{without}");
    assert!(out.contains("proxy_other_host 403"), "{out}");
    for line in out.lines() {
        assert!(
            !line.ends_with(" done"),
            "an escape worked in learn mode: {line}\n{out}"
        );
    }
    assert_eq!(out.lines().count(), 13, "{out}");
    assert!(!with.to_string().contains("PLANTED-PRIVATE-KEY"), "{with}");
    assert!(refused(&with, "c.test"), "{with}");
    assert_eq!(
        c.hits.load(Ordering::SeqCst),
        0,
        "the other host was reached"
    );
    assert!(std::fs::read_dir(&outside.path).unwrap().next().is_none());
    assert!(std::fs::read_dir(&ro.path).unwrap().next().is_none());
    assert!(!Path::new("/etc/owned").exists());
}
