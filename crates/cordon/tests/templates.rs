//! Named templates (`cordon serve --templates FILE`) over the native API, with a real server on
//! loopback: a template gives its image (built in the test with `cordon image build` from a
//! busybox root), limits and env; a request's own fields win; the built-in `base` is
//! redefined by the file; an unknown name is a 404 listing the known ones; a bad file stops
//! the server at start with an error naming the file, the template and the key.
//!
//! Root and rootless: scripts/test.sh runs this suite as an unprivileged user too. busybox
//! comes from scripts/test.sh's apt list; without it the test skips, except under `CI=true`.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

mod fixtures;
use fixtures::{busybox, Tmp};
mod serve;

fn cordon_bin() -> &'static str {
    env!("CARGO_BIN_EXE_cordon")
}

/// `tiny:1` in `data`'s store: a busybox root with a file the host has not (`/etc/greeting`)
/// and an `ENV`.
fn build_tiny(bb: &Path, dir: &Path, data: &Path) {
    build_tiny_as(bb, dir, data, "tiny:1")
}

/// `build_tiny`, under the name `tag`.
fn build_tiny_as(bb: &Path, dir: &Path, data: &Path, tag: &str) {
    let ctx = dir.join("ctx");
    let root = ctx.join("rootfs");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::copy(bb, root.join("bin/busybox")).unwrap();
    for tool in ["sh", "cat", "echo", "ls", "env"] {
        symlink("busybox", root.join("bin").join(tool)).unwrap();
    }
    std::fs::write(root.join("etc/greeting"), "from the image\n").unwrap();
    std::fs::write(ctx.join(".dockerignore"), "rootfs\n").unwrap();
    std::fs::write(
        ctx.join("Dockerfile"),
        "FROM ./rootfs\nENV FROM_IMAGE=yes\n",
    )
    .unwrap();
    let out = Command::new(cordon_bin())
        .args(["image", "build", "-t", tag])
        .arg(&ctx)
        .arg("--data-dir")
        .arg(data)
        .stdin(Stdio::null())
        .output()
        .expect("cordon image build");
    assert!(
        out.status.success(),
        "build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const FILE: &str = r#"
[templates.tiny]
image = "tiny:1"
memory = "300M"
disk = "16M"
cpus = 0.5
env = { A = "from-template", B = "from-template" }

[templates.base]
memory = "200M"
"#;

fn exec(s: &serve::Server, id: &str, cmd: &str) -> String {
    let (st, out) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({ "cmd": cmd })),
    );
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["status"], "exited", "{out}");
    out["stdout"].as_str().unwrap_or_default().to_string()
}

fn create(s: &serve::Server, body: Value) -> Value {
    let (st, info) = s.call("POST", "/v1/sandboxes", Some(body.clone()));
    assert_eq!(st, 201, "{body}: {info}");
    info
}

#[test]
fn a_template_gives_its_image_limits_and_env_and_the_request_overrides_them() {
    let Some(bb) = busybox() else { return };
    let t = Tmp::new("use");
    let data = t.0.join("data");
    build_tiny(&bb, &t.0, &data);
    let file = t.0.join("templates.toml");
    std::fs::write(&file, FILE).unwrap();
    let file_arg = file.to_str().expect("utf-8 path");
    let s = serve::Server::start_in(data, &["--templates", file_arg]);

    // The template's image, limits and env; the request's B wins over the template's.
    let info = create(
        &s,
        json!({"template": "tiny", "env": {"B": "from-request"}}),
    );
    let id = info["id"].as_str().expect("id");
    assert_eq!(info["limits"]["memory_bytes"], 300u64 << 20, "{info}");
    assert_eq!(info["limits"]["disk_bytes"], 16u64 << 20, "{info}");
    assert_eq!(info["limits"]["cpus"], 0.5, "{info}");
    let out = exec(&s, id, "cat /etc/greeting; echo $A $B $FROM_IMAGE");
    assert_eq!(
        out, "from the image\nfrom-template from-request yes\n",
        "the image's root and env, the template's env, the request's override"
    );

    // An explicit limit wins over the template's.
    let info = create(&s, json!({"template": "tiny", "memory": "100M"}));
    assert_eq!(info["limits"]["memory_bytes"], 100u64 << 20, "{info}");
    assert_eq!(info["limits"]["disk_bytes"], 16u64 << 20, "{info}");

    // The file redefines the built-in `base`: its memory, on the host's system directories.
    let info = create(&s, json!({"template": "base"}));
    assert_eq!(info["limits"]["memory_bytes"], 200u64 << 20, "{info}");
    let id = info["id"].as_str().expect("id");
    let out = exec(&s, id, "test -e /etc/greeting && echo image || echo host");
    assert_eq!(out, "host\n");
    // The other built-in stays as it was: room for a data-stack install.
    let info = create(&s, json!({"template": "code-interpreter-v1"}));
    assert_eq!(info["limits"]["memory_bytes"], 2u64 << 30, "{info}");
    assert_eq!(info["limits"]["disk_bytes"], 2u64 << 30, "{info}");

    // An unknown name: 404, naming the known ones.
    let (st, err) = s.call("POST", "/v1/sandboxes", Some(json!({"template": "nope"})));
    assert_eq!(st, 404, "{err}");
    let msg = err["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("'nope'") && msg.contains("base, code-interpreter-v1, tiny"),
        "{msg}"
    );
    // Not a name the document allows: refused before the service sees it.
    let (st, _) = s.call("POST", "/v1/sandboxes", Some(json!({"template": "../x"})));
    assert!(st == 400 || st == 404, "{st}");
}

#[test]
fn a_bad_template_file_stops_the_server_naming_the_file_the_template_and_the_key() {
    let t = Tmp::new("bad");
    for (text, want) in [
        (
            "[templates.big]\ndisk = \"lots\"\n",
            "[templates.big] disk: 'lots'",
        ),
        (
            "[templates.web]\nallow_net = [\"exa mple.com\"]\n",
            "[templates.web] allow_net",
        ),
        (
            "[templates.host]\nimage = \"/\"\n",
            "[templates.host] image: '/'",
        ),
        ("[templates.x]\nmemroy = \"1G\"\n", "unknown field `memroy`"),
    ] {
        let file = t.0.join("templates.toml");
        std::fs::write(&file, text).unwrap();
        let out = Command::new(cordon_bin())
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--no-auth",
                "--data-dir",
            ])
            .arg(t.0.join("data"))
            .arg("--templates")
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .expect("cordon serve");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{text}: {err}");
        assert!(
            err.contains(&format!("--templates {}: ", file.display())) && err.contains(want),
            "{text}: {err}"
        );
    }
}

#[test]
fn serve_help_teaches_the_template_file() {
    let out = Command::new(cordon_bin())
        .args(["serve", "--help"])
        .output()
        .expect("cordon serve --help");
    let help = String::from_utf8_lossy(&out.stdout);
    for want in [
        "--templates <FILE>",
        "[templates.data-science]",
        "allow_net",
        "code-interpreter-v1",
    ] {
        assert!(help.contains(want), "{want} missing from:\n{help}");
    }
}

/// The built-in `code-interpreter-v1` runs on the host's system directories, and says so in
/// its create answer, until the store has `code-interpreter:latest` (what
/// scripts/code-interpreter-image.sh builds); from then on it runs on that image, unless the
/// request names an image of its own.
#[test]
fn code_interpreter_v1_runs_on_the_code_interpreter_image_once_the_store_has_it() {
    let Some(bb) = busybox() else { return };
    let t = Tmp::new("ci-image");
    let data = t.0.join("data");
    let s = serve::Server::start_in(data.clone(), &[]);
    let info = create(&s, json!({"template": "code-interpreter-v1"}));
    let note = info["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("host's /usr/bin/python3")
            && note.contains("scripts/code-interpreter-image.sh"),
        "{info}"
    );
    let id = info["id"].as_str().expect("id");
    assert_eq!(
        exec(&s, id, "test -e /etc/greeting && echo image || echo host"),
        "host\n"
    );
    let key = s.key.clone();
    drop(s);

    // The stand-in for the data-stack image: a busybox root under the name the script gives.
    build_tiny_as(&bb, &t.0, &data, "code-interpreter:latest");

    let mut s = serve::Server::start_in(data, &[]);
    s.key = key;
    s.scratch = true;
    let info = create(&s, json!({"template": "code-interpreter-v1"}));
    assert!(info.get("note").is_none(), "{info}");
    assert_eq!(
        info["limits"]["memory_bytes"],
        2u64 << 30,
        "the template's limits stay: {info}"
    );
    let id = info["id"].as_str().expect("id");
    assert_eq!(exec(&s, id, "cat /etc/greeting"), "from the image\n");
    // Another template, or no template, is not touched.
    let info = create(&s, json!({"template": "base"}));
    let id = info["id"].as_str().expect("id");
    assert_eq!(
        exec(&s, id, "test -e /etc/greeting && echo image || echo host"),
        "host\n"
    );
}
