//! The service on its own, as every door and the CLI call it — no HTTP, no MCP: keys and
//! their rate limit, quotas, error kinds, and file operations inside a real sandbox, attacked
//! through a link the sandbox plants. Sandboxes need the `cordon` binary (the per-sandbox
//! helper): `CORDON_BIN`, or the one `cargo build` put beside this test's directory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cordon_service::error::ErrorKind;
use cordon_service::types::{Cmd, CreateSandbox, ExecRequest};
use cordon_service::{files, Caller, Config, Service};

static SEQ: AtomicU32 = AtomicU32::new(0);

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "cordon-service-{tag}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// The cordon binary: `CORDON_BIN`, else `target/<profile>/cordon` next to `deps/`.
fn cordon_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("CORDON_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("test exe");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("cordon"))
        .expect("target dir");
    assert!(
        bin.is_file(),
        "{} is missing: build it first (cargo build -p cordon) or set CORDON_BIN",
        bin.display()
    );
    bin
}

fn config(dir: &Path, helper: PathBuf) -> Config {
    Config {
        helper_exe: helper,
        data_dir: dir.to_path_buf(),
        node: "node".into(),
        default_ttl: Duration::from_secs(120),
        max_ttl: Duration::from_secs(600),
        max_upload: 1 << 20,
        max_download: 1 << 20,
        default_exec_timeout: Duration::from_secs(30),
        max_exec_timeout: Duration::from_secs(60),
        ..Default::default()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn caller(max: u32) -> Caller {
    Caller {
        key_id: "k".into(),
        max_sandboxes: max,
    }
}

/// A create that fails after taking its slot gives the slot back: with a helper that cannot
/// start sandboxes, every create on a one-sandbox key fails for that reason, never for quota.
#[test]
fn a_failed_create_releases_its_quota_slot() {
    let dir = scratch("failed-create");
    let errors = runtime().block_on(async {
        // Not cordon: the sandbox helper never comes up.
        let svc = Service::new(config(&dir, "/bin/false".into())).expect("service");
        let mut errors = Vec::new();
        for _ in 0..3 {
            match svc.create(&caller(1), CreateSandbox::default()).await {
                Ok(info) => panic!("created with /bin/false as the helper: {info:?}"),
                Err(e) => errors.push((e.kind, e.code)),
            }
        }
        errors
    });
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(errors, vec![(ErrorKind::Internal, "sandbox_failed"); 3]);
}

#[test]
fn a_key_is_known_by_its_secret_and_held_to_its_rate() {
    let dir = scratch("keys");
    let svc = Service::new(config(&dir, "/bin/false".into())).expect("service");
    let (secret, id) = svc.create_key("ci", 3, 2).expect("key");
    let who = svc
        .authenticate(Some(&secret), "send a key")
        .expect("first");
    assert_eq!((who.key_id.as_str(), who.max_sandboxes), (id.as_str(), 3));
    svc.authenticate(Some(&secret), "send a key")
        .expect("second, within the burst");
    let over = svc
        .authenticate(Some(&secret), "send a key")
        .expect_err("third in the same second");
    assert_eq!(over.kind, ErrorKind::RateLimited);
    assert_eq!(over.retry_after, Some(1));
    let wrong = svc
        .authenticate(Some("cdn_not-a-key"), "send a key")
        .expect_err("unknown secret");
    assert_eq!(wrong.kind, ErrorKind::Unauthenticated);
    let none = svc.authenticate(None, "send a key").expect_err("no secret");
    assert_eq!(
        (none.kind, none.message.as_str()),
        (ErrorKind::Unauthenticated, "send a key")
    );
    // The secret is never kept: only its hash is in the registry's file.
    let db = std::fs::read(dir.join("cordon.db")).expect("registry");
    assert!(
        !db.windows(secret.len()).any(|w| w == secret.as_bytes()),
        "the key's secret is stored in clear"
    );
    drop(svc);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unknown_sandbox_is_not_found_for_every_operation() {
    let dir = scratch("unknown");
    let rt = runtime();
    let svc = Service::new(config(&dir, "/bin/false".into())).expect("service");
    let c = caller(1);
    rt.block_on(async {
        let kinds = [
            svc.get(&c, "nope").err().map(|e| e.kind),
            svc.delete(&c, "nope").await.err().map(|e| e.kind),
            files::stat(&svc, &c, "nope", "/workspace")
                .await
                .err()
                .map(|e| e.kind),
            files::read(&svc, &c, "nope", "/etc/hostname")
                .await
                .err()
                .map(|e| e.kind),
        ];
        assert_eq!(kinds, [Some(ErrorKind::NotFound); 4]);
    });
    drop(svc);
    let _ = std::fs::remove_dir_all(&dir);
}

/// File operations resolve inside the sandbox as its user: what the sandbox plants (a link
/// to the host's paths) leads nowhere outside it, and the operations themselves work.
#[test]
fn file_operations_stay_inside_the_sandbox_whatever_it_plants() {
    let dir = scratch("files");
    let host = scratch("files-host");
    let bait = host.join("bait");
    std::fs::write(&bait, "host secret").expect("bait");
    let rt = runtime();
    let svc: Arc<Service> = Service::new(config(&dir, cordon_bin())).expect("service");
    let c = caller(2);
    rt.block_on(async {
        let sb = svc
            .create(&c, CreateSandbox::default())
            .await
            .expect("create");
        let id = sb.id.clone();
        // The sandbox plants links to the host's paths (as it sees them: its own root).
        let plant = format!(
            "ln -s {} /workspace/out && ln -s / /workspace/root && ln -s {} /workspace/file",
            host.display(),
            bait.display()
        );
        let o = svc
            .exec(
                &c,
                &id,
                ExecRequest {
                    cmd: Cmd::Shell(plant),
                    cwd: None,
                    env: Default::default(),
                    stdin: None,
                    timeout: None,
                    background: false,
                    pty: None,
                    tag: None,
                },
                None,
            )
            .await
            .expect("exec");
        assert_eq!(o.exit_code, Some(0), "{o:?}");

        // Through the links: nothing of the host is read or written.
        let read = files::read(&svc, &c, &id, "/workspace/file").await;
        assert!(
            !matches!(&read, Ok(b) if b.as_slice() == b"host secret"),
            "a read through a planted link reached the host"
        );
        let w = files::write(&svc, &c, &id, "/workspace/out/planted", b"x".to_vec()).await;
        let w2 = files::write(
            &svc,
            &c,
            &id,
            &format!("/workspace/root{}/planted2", host.display()),
            b"x".to_vec(),
        )
        .await;
        let _ = files::remove(&svc, &c, &id, "/workspace/file", false).await;
        let _ = files::rename(
            &svc,
            &c,
            &id,
            "/workspace/root/etc/hostname",
            "/workspace/h",
        )
        .await;

        // The operations themselves, inside.
        let made = files::mkdir_new(&svc, &c, &id, "/workspace/a/b")
            .await
            .expect("mkdir_new");
        assert_eq!(made.path, "/workspace/a/b");
        let again = files::mkdir_new(&svc, &c, &id, "/workspace/a")
            .await
            .expect_err("exists");
        assert_eq!(again.kind, ErrorKind::Conflict);
        assert_eq!(
            files::write(&svc, &c, &id, "/workspace/a/b/c.txt", b"hello".to_vec())
                .await
                .expect("write"),
            5
        );
        let deep = files::list(&svc, &c, &id, "/workspace/a", 2, 100)
            .await
            .expect("list");
        let names: Vec<&str> = deep.iter().map(|e| e.path.as_str()).collect();
        assert!(names.contains(&"/workspace/a/b/c.txt"), "{names:?}");
        let one = files::list(&svc, &c, &id, "/workspace/a", 1, 100)
            .await
            .expect("list");
        assert_eq!(one.len(), 1, "{one:?}");
        let capped = files::list(&svc, &c, &id, "/workspace", 3, 2)
            .await
            .expect("list");
        assert_eq!(capped.len(), 2, "the cap holds");
        let moved = files::rename(&svc, &c, &id, "/workspace/a/b/c.txt", "/workspace/c.txt")
            .await
            .expect("rename");
        assert_eq!((moved.path.as_str(), moved.size), ("/workspace/c.txt", 5));
        assert_eq!(
            files::read(&svc, &c, &id, "/workspace/c.txt")
                .await
                .expect("read"),
            b"hello"
        );
        files::remove(&svc, &c, &id, "/workspace/a", true)
            .await
            .expect("remove");
        let gone = files::stat(&svc, &c, &id, "/workspace/a")
            .await
            .expect_err("removed");
        assert_eq!(gone.kind, ErrorKind::NotFound);
        svc.delete(&c, &id).await.expect("delete");
        // Checked from outside: the host is as it was.
        assert!(
            !host.join("planted").exists(),
            "a write through a planted link reached the host: {w:?}"
        );
        assert!(
            !host.join("planted2").exists(),
            "a write through / reached the host: {w2:?}"
        );
        assert_eq!(std::fs::read_to_string(&bait).expect("bait"), "host secret");
        assert_eq!(std::fs::read_dir(&host).expect("host").count(), 1);
    });
    rt.block_on(svc.shutdown_all());
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&host);
}
