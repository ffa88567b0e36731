//! Programs run to completion, one-shot, the way code evaluation for reinforcement learning
//! asks: source code in a named language (compiled first when the language is compiled, each
//! step in a fresh sandbox of its own) or a command, with files written into `/workspace`
//! before and read back after, stdin per run, and optional tests. Batches of them run with
//! bounded concurrency, each item's result reported as soon as it is known ([`batch`]).
//! SandboxFusion's door and the native API's `/v1/batch` are both thin over this.
//!
//! Threat model: everything in a request is client input, and everything the program leaves
//! in its workspace is hostile (symlinks to host files, `..`, FIFOs). The workspace is a
//! private directory of the server's (`<data>/runs/<random>`, 0700), mounted as the sandbox's
//! `/workspace` and removed after the run; files go in and come out through
//! `cordon_linux::fsview` resolved inside it (`RESOLVE_IN_ROOT`), and a path that names
//! anything outside the workspace (absolute elsewhere, `..`) is refused before any lookup.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use cordon_linux::fsview::SandboxFs;
use cordon_policy::{Outcome, Status};
use serde::{Deserialize, Serialize};

use crate::error::{ErrorKind, ServiceError};
use crate::files::fs_error;
use crate::types::{Amount, Cmd, RunRequest};
use crate::{Caller, Service};

/// A language a program may be written in, as SandboxFusion names it.
#[derive(Debug)]
pub struct Language {
    pub name: &'static str,
    /// The source file's name in `/workspace`.
    source: &'static str,
    /// The compile step's argv (run in `/workspace`), if the language is compiled.
    compile: Option<&'static [&'static str]>,
    /// The run step's argv (run in `/workspace`).
    run: &'static [&'static str],
    /// Programs that must be on the sandbox's `PATH` for the language to work.
    tools: &'static [&'static str],
}

const fn lang(
    name: &'static str,
    source: &'static str,
    compile: Option<&'static [&'static str]>,
    run: &'static [&'static str],
    tools: &'static [&'static str],
) -> Language {
    Language {
        name,
        source,
        compile,
        run,
        tools,
    }
}

/// Every language served when its toolchain is present (SandboxFusion's names; `c` besides).
pub const LANGUAGES: &[Language] = &[
    lang(
        "python",
        "main.py",
        None,
        &["python3", "main.py"],
        &["python3"],
    ),
    lang(
        "python2",
        "main.py",
        None,
        &["python2", "main.py"],
        &["python2"],
    ),
    lang("bash", "main.sh", None, &["bash", "main.sh"], &["bash"]),
    lang(
        "cpp",
        "main.cpp",
        Some(&["g++", "-std=c++17", "-O2", "-o", "main", "main.cpp"]),
        &["./main"],
        &["g++"],
    ),
    lang(
        "c",
        "main.c",
        Some(&["gcc", "-O2", "-o", "main", "main.c", "-lm"]),
        &["./main"],
        &["gcc"],
    ),
    lang("nodejs", "main.js", None, &["node", "main.js"], &["node"]),
    lang(
        "typescript",
        "main.ts",
        Some(&["tsc", "--outDir", ".", "main.ts"]),
        &["node", "main.js"],
        &["tsc", "node"],
    ),
    lang(
        "go",
        "main.go",
        Some(&["go", "build", "-o", "main", "main.go"]),
        &["./main"],
        &["go"],
    ),
    lang(
        "java",
        "Main.java",
        Some(&["javac", "Main.java"]),
        &["java", "-cp", ".", "Main"],
        &["javac", "java"],
    ),
    lang(
        "rust",
        "main.rs",
        Some(&["rustc", "-O", "-o", "main", "main.rs"]),
        &["./main"],
        &["rustc"],
    ),
    lang("perl", "main.pl", None, &["perl", "main.pl"], &["perl"]),
    lang("php", "main.php", None, &["php", "main.php"], &["php"]),
    lang("ruby", "main.rb", None, &["ruby", "main.rb"], &["ruby"]),
    lang("lua", "main.lua", None, &["lua", "main.lua"], &["lua"]),
    lang("R", "main.R", None, &["Rscript", "main.R"], &["Rscript"]),
    lang("julia", "main.jl", None, &["julia", "main.jl"], &["julia"]),
    lang(
        "racket",
        "main.rkt",
        None,
        &["racket", "main.rkt"],
        &["racket"],
    ),
    lang(
        "swift",
        "main.swift",
        None,
        &["swift", "main.swift"],
        &["swift"],
    ),
    lang(
        "scala",
        "main.scala",
        None,
        &["scala", "main.scala"],
        &["scala"],
    ),
    lang(
        "csharp",
        "main.cs",
        Some(&["mcs", "-out:main.exe", "main.cs"]),
        &["mono", "main.exe"],
        &["mcs", "mono"],
    ),
];

/// The directories of the sandbox's `PATH` that come from the host's system view.
const SYSTEM_PATH: [&str; 4] = ["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin"];

/// Whether `tool` is an executable file in the host's system directories (what a sandbox
/// without an image sees on its `PATH`). Looked up once per tool and process.
fn tool_present(tool: &str) -> bool {
    static SEEN: OnceLock<std::sync::Mutex<BTreeMap<String, bool>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    if let Some(v) = seen.lock().ok().and_then(|m| m.get(tool).copied()) {
        return v;
    }
    use std::os::unix::fs::PermissionsExt;
    let present = SYSTEM_PATH.iter().any(|d| {
        std::fs::metadata(Path::new(d).join(tool))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    });
    if let Ok(mut m) = seen.lock() {
        m.insert(tool.to_string(), present);
    }
    present
}

/// The language called `name`, if its toolchain is here: unknown names are `Invalid`, known
/// ones without their toolchain `Unsupported`, with a message naming what is missing.
pub fn language(name: &str) -> Result<&'static Language, ServiceError> {
    let lang = LANGUAGES.iter().find(|l| l.name == name).ok_or_else(|| {
        let known: Vec<&str> = LANGUAGES.iter().map(|l| l.name).collect();
        ServiceError::new(
            ErrorKind::Invalid,
            "unknown_language",
            format!(
                "language: '{name}' is not one this server runs (it knows {})",
                known.join(", ")
            ),
        )
    })?;
    let missing: Vec<&str> = lang
        .tools
        .iter()
        .copied()
        .filter(|t| !tool_present(t))
        .collect();
    if !missing.is_empty() {
        return Err(ServiceError::new(
            ErrorKind::Unsupported,
            "toolchain_missing",
            format!(
                "language {name}: its toolchain is not installed on this server (missing: {})",
                missing.join(", ")
            ),
        ));
    }
    Ok(lang)
}

/// The names of the languages whose toolchains are here.
pub fn available_languages() -> Vec<&'static str> {
    LANGUAGES
        .iter()
        .filter(|l| l.tools.iter().all(|t| tool_present(t)))
        .map(|l| l.name)
        .collect()
}

/// A list of JSON objects, each read as a `T`: serde would also take a struct written as an
/// array of its fields, which the API does not define and must refuse.
fn objects<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::Error;
    let values = Vec::<serde_json::Value>::deserialize(d)?;
    values
        .into_iter()
        .map(|v| {
            if !v.is_object() {
                return Err(D::Error::custom("expected an object"));
            }
            serde_json::from_value(v).map_err(D::Error::custom)
        })
        .collect()
}

/// One test of a program: a run with this stdin, passed when the program exits 0 and, if
/// `expected_stdout` is given, prints it (trailing whitespace of each line ignored).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestCase {
    #[serde(default)]
    pub stdin: Option<String>,
    #[serde(default)]
    pub expected_stdout: Option<String>,
}

/// A program to run: source in a language, or a command.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Program {
    /// A language of [`LANGUAGES`] (with `code`), or absent for a `cmd`.
    #[serde(default)]
    pub language: Option<String>,
    /// The source, written to the language's file in `/workspace`.
    #[serde(default)]
    pub code: Option<String>,
    /// A command to run instead of source code, in `/workspace`.
    #[serde(default)]
    pub cmd: Option<Cmd>,
    #[serde(default)]
    pub stdin: Option<String>,
    /// Files written into `/workspace` before anything runs: path (relative, or under
    /// `/workspace/`) to base64 content.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Files read back from `/workspace` after the run (paths as for `files`); a missing one
    /// is left out of the answer.
    #[serde(default)]
    pub fetch_files: Vec<String>,
    /// Seconds (or a duration like `"1500ms"`) for the run (each test's run).
    #[serde(default)]
    pub timeout: Option<Amount>,
    /// Seconds (or a duration) for the compile step.
    #[serde(default)]
    pub compile_timeout: Option<Amount>,
    /// Runs of the compiled program, one per test; none: one run with `stdin`.
    #[serde(default, deserialize_with = "objects")]
    pub tests: Vec<TestCase>,
    /// A built-in profile (default `default`).
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    pub memory: Option<Amount>,
}

/// One run of a test.
#[derive(Debug, Clone, Serialize)]
pub struct TestResult {
    pub passed: bool,
    pub outcome: Outcome,
}

/// What a program did.
#[derive(Debug, Clone, Serialize)]
pub struct ProgramResult {
    /// Exited 0 (every step), and every test passed.
    pub passed: bool,
    /// The compile step's Outcome, for a compiled language.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compile: Option<Outcome>,
    /// The run's Outcome (absent when the compile failed, or with `tests`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tests: Vec<TestResult>,
    /// The `fetch_files` that existed, base64.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
}

/// The path in the workspace that `path` names: relative, or absolute under `/workspace/`;
/// returned relative to the workspace (the workspace is the root of the run's `SandboxFs`,
/// where it is named with a leading `/`).
/// Anything else (another absolute path, a `..` component, a NUL) is refused: the run's
/// files are the only ones a request may name.
pub fn workspace_path(path: &str) -> Result<String, ServiceError> {
    let refuse = |why: &str| {
        ServiceError::new(
            ErrorKind::Forbidden,
            "outside_workspace",
            format!("file '{path}': {why}; name files relative to the run's /workspace"),
        )
    };
    if path.contains('\0') {
        return Err(ServiceError::bad_request(format!(
            "file '{}': a path cannot contain NUL bytes",
            path.replace('\0', "\\0")
        )));
    }
    let rel = match path.strip_prefix('/') {
        None => path,
        Some(_) => match path.strip_prefix("/workspace/") {
            Some(rest) => rest,
            None => return Err(refuse("outside the run's /workspace")),
        },
    };
    let parts: Vec<&str> = rel
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if parts.contains(&"..") {
        return Err(refuse("'..' is not allowed"));
    }
    if parts.is_empty() {
        return Err(ServiceError::bad_request(format!(
            "file '{path}': names no file"
        )));
    }
    Ok(parts.join("/"))
}

/// A run's private workspace on the host, removed when dropped.
struct Workdir {
    path: PathBuf,
    owner: (u32, u32),
}

impl Workdir {
    fn create(data_dir: &Path) -> Result<Workdir, ServiceError> {
        use std::os::unix::fs::DirBuilderExt;
        let runs = data_dir.join("runs");
        let io = |e: std::io::Error| ServiceError::internal(format!("run directory: {e}"));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(&runs)
            .map_err(io)?;
        let mut id = [0u8; 12];
        getrandom::getrandom(&mut id).map_err(|e| ServiceError::internal(e.to_string()))?;
        let path = runs.join(hex::encode(id));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(io)?;
        let owner = (
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        );
        Ok(Workdir { path, owner })
    }

    fn fs(&self) -> Result<SandboxFs, ServiceError> {
        SandboxFs::open(&self.path, self.owner).map_err(fs_error)
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Removes what runs left behind when the server stopped mid-run.
pub(crate) fn clean_runs(data_dir: &Path) {
    let _ = std::fs::remove_dir_all(data_dir.join("runs"));
}

fn seconds(a: Option<&Amount>, default: f64) -> Amount {
    a.cloned().unwrap_or(Amount::Number(default))
}

fn decode(path: &str, b64: &str) -> Result<Vec<u8>, ServiceError> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| ServiceError::bad_request(format!("file '{path}': not base64: {e}")))
}

/// Whether `stdout` is `expected`, ignoring trailing whitespace on each line and at the end.
fn same_output(stdout: &str, expected: &str) -> bool {
    let norm = |s: &str| -> Vec<String> {
        let mut v: Vec<String> = s.lines().map(|l| l.trim_end().to_string()).collect();
        while v.last().is_some_and(|l| l.is_empty()) {
            v.pop();
        }
        v
    };
    norm(stdout) == norm(expected)
}

fn exited_zero(o: &Outcome) -> bool {
    o.status == Status::Exited && o.exit_code == Some(0)
}

/// A file to write into a workspace: its path there, and its bytes.
type WorkspaceFile = (String, Vec<u8>);

/// Checks a program before anything runs: its language (and toolchain) or command, its
/// paths and files. Returns the files decoded, at their workspace paths.
fn check(
    p: &Program,
    max_upload: u64,
) -> Result<(Option<&'static Language>, Vec<WorkspaceFile>), ServiceError> {
    let lang = match (&p.language, &p.code, &p.cmd) {
        (Some(l), Some(_), None) => Some(language(l)?),
        (None, None, Some(_)) => None,
        _ => {
            return Err(ServiceError::bad_request(
                "give either `language` and `code`, or `cmd`",
            ))
        }
    };
    let mut files = Vec::new();
    let mut total = 0u64;
    for (path, b64) in &p.files {
        let at = workspace_path(path)?;
        let bytes = decode(path, b64)?;
        total += bytes.len() as u64;
        if total > max_upload {
            return Err(ServiceError::too_large("files", max_upload));
        }
        files.push((at, bytes));
    }
    for f in &p.fetch_files {
        workspace_path(f)?;
    }
    Ok((lang, files))
}

/// Runs a program: its files written into a fresh workspace, compiled (when its language is)
/// in one sandbox, run (once, or once per test) in a fresh sandbox each, its `fetch_files`
/// read back; the workspace removed.
pub async fn run(
    svc: &Service,
    caller: &Caller,
    p: Program,
) -> Result<ProgramResult, ServiceError> {
    let max = svc.cfg.max_upload;
    let (lang, files) = check(&p, max)?;
    let dir = Workdir::create(&svc.cfg.data_dir)?;
    let fs = dir.fs()?;
    let mut to_write = files;
    if let (Some(l), Some(code)) = (lang, &p.code) {
        to_write.push((l.source.to_string(), code.clone().into_bytes()));
    }
    let fs = tokio::task::spawn_blocking(move || -> Result<SandboxFs, ServiceError> {
        for (at, bytes) in to_write {
            fs.write(&format!("/{at}"), &mut bytes.as_slice(), u64::MAX, true)
                .map_err(fs_error)?;
        }
        Ok(fs)
    })
    .await
    .map_err(|e| ServiceError::internal(e.to_string()))??;
    let request = |argv: Vec<String>, timeout: Amount, stdin: Option<String>| RunRequest {
        cmd: Cmd::Argv(argv),
        profile: p.profile.clone(),
        memory: p.memory.clone(),
        cpus: None,
        pids: None,
        disk: None,
        timeout: Some(timeout),
        env: BTreeMap::new(),
        stdin,
        cwd: Some("/workspace".into()),
        network: None,
        wasm: None,
        image: None,
    };
    let mut result = ProgramResult {
        passed: false,
        compile: None,
        outcome: None,
        tests: Vec::new(),
        files: BTreeMap::new(),
    };
    let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    if let Some(compile) = lang.and_then(|l| l.compile) {
        let req = request(
            owned(compile),
            seconds(p.compile_timeout.as_ref(), 10.0),
            None,
        );
        let o = crate::oneshot::run_in(svc, caller, req, Some(dir.path.clone())).await?;
        let ok = exited_zero(&o);
        result.compile = Some(o);
        if !ok {
            return Ok(result);
        }
    }
    let argv = match (lang, &p.cmd) {
        (Some(l), _) => owned(l.run),
        (None, Some(cmd)) => cmd.checked_argv()?,
        (None, None) => return Err(ServiceError::bad_request("no program to run")),
    };
    let timeout = seconds(p.timeout.as_ref(), 10.0);
    if p.tests.is_empty() {
        let req = request(argv, timeout, p.stdin.clone());
        let o = crate::oneshot::run_in(svc, caller, req, Some(dir.path.clone())).await?;
        result.passed = exited_zero(&o);
        result.outcome = Some(o);
    } else {
        result.passed = true;
        for t in &p.tests {
            let req = request(argv.clone(), timeout.clone(), t.stdin.clone());
            let o = crate::oneshot::run_in(svc, caller, req, Some(dir.path.clone())).await?;
            let passed = exited_zero(&o)
                && t.expected_stdout
                    .as_deref()
                    .is_none_or(|e| same_output(&o.stdout, e));
            result.passed &= passed;
            result.tests.push(TestResult { passed, outcome: o });
        }
    }
    if !p.fetch_files.is_empty() {
        let wanted = p.fetch_files.clone();
        result.files = tokio::task::spawn_blocking(move || -> Result<_, ServiceError> {
            use base64::Engine;
            let mut out = BTreeMap::new();
            let mut total = 0u64;
            for name in wanted {
                let at = workspace_path(&name)?;
                match fs.read(&format!("/{at}"), max.saturating_sub(total)) {
                    Ok(bytes) => {
                        total += bytes.len() as u64;
                        out.insert(
                            name,
                            base64::engine::general_purpose::STANDARD.encode(bytes),
                        );
                    }
                    // What the program did not leave (or left as something other than a
                    // file, or planted as a link out) is not there to fetch.
                    Err(cordon_linux::fsview::FsError::NotFound { .. })
                    | Err(cordon_linux::fsview::FsError::NotAFile { .. })
                    | Err(cordon_linux::fsview::FsError::IsADirectory { .. }) => {}
                    Err(e) => return Err(fs_error(e)),
                }
            }
            Ok(out)
        })
        .await
        .map_err(|e| ServiceError::internal(e.to_string()))??;
    }
    drop(dir);
    Ok(result)
}

/// The most items one batch takes, and the most of them run at once.
pub const MAX_BATCH: usize = 10_000;
pub const MAX_CONCURRENCY: usize = 256;

/// One line of a batch's answer: the item's index in the request and its result, or why it
/// could not run.
#[derive(Debug, Clone, Serialize)]
pub struct BatchLine {
    pub index: usize,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub result: Option<ProgramResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<BatchError>,
}

/// Why one item did not run (the others run on).
#[derive(Debug, Clone, Serialize)]
pub struct BatchError {
    pub code: &'static str,
    pub message: String,
}

/// A batch request.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    #[serde(deserialize_with = "objects")]
    pub items: Vec<Program>,
    /// How many items run at once (default: the host's CPUs). A number, as JSON has them
    /// (`4.0` is 4); it must be whole.
    #[serde(default)]
    pub concurrency: Option<f64>,
}

/// What a request's own shape gets wrong in an item (a limit that does not parse, an empty
/// command): the whole batch is refused, as `/v1/run` would refuse the item. What only
/// running tells (an unknown language, a missing toolchain, a path outside the workspace) is
/// the item's own error line instead.
fn precheck(i: usize, p: &Program) -> Result<(), ServiceError> {
    let at =
        |e: ServiceError| ServiceError::new(e.kind, e.code, format!("items[{i}]: {}", e.message));
    let none = BTreeMap::new();
    crate::profile_from(
        p.profile.as_deref(),
        p.memory.as_ref(),
        None,
        None,
        None,
        p.timeout.as_ref(),
        &none,
        None,
    )
    .map_err(at)?;
    if p.compile_timeout.is_some() {
        crate::profile_from(
            None,
            None,
            None,
            None,
            None,
            p.compile_timeout.as_ref(),
            &none,
            None,
        )
        .map_err(at)?;
    }
    if let Some(cmd) = &p.cmd {
        cmd.checked_argv().map_err(at)?;
    }
    Ok(())
}

/// Starts a batch: every item runs (at most `concurrency` at once), and its line is sent on
/// the returned channel as soon as it is done, in the order they finish. An item that fails
/// to run gets a line with its error; the others run on.
pub fn batch(
    svc: Arc<Service>,
    caller: Caller,
    req: BatchRequest,
) -> Result<tokio::sync::mpsc::Receiver<BatchLine>, ServiceError> {
    if req.items.len() > MAX_BATCH {
        return Err(ServiceError::bad_request(format!(
            "items: at most {MAX_BATCH} programs in one batch"
        )));
    }
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let n = match req.concurrency {
        Some(n) if n.fract() == 0.0 && (1.0..=MAX_CONCURRENCY as f64).contains(&n) => n as usize,
        Some(_) => {
            return Err(ServiceError::bad_request(format!(
                "concurrency: a whole number from 1 to {MAX_CONCURRENCY}"
            )))
        }
        None => cpus,
    };
    for (i, p) in req.items.iter().enumerate() {
        precheck(i, p)?;
    }
    let (tx, rx) = tokio::sync::mpsc::channel(req.items.len().clamp(1, 1024));
    let gate = Arc::new(tokio::sync::Semaphore::new(n));
    tokio::spawn(async move {
        let mut running = tokio::task::JoinSet::new();
        for (index, item) in req.items.into_iter().enumerate() {
            // Taken before spawning: at most `n` items are past this point at once.
            let Ok(permit) = gate.clone().acquire_owned().await else {
                break;
            };
            if tx.is_closed() {
                // The client went away: start nothing more.
                break;
            }
            let (svc, caller, tx) = (svc.clone(), caller.clone(), tx.clone());
            running.spawn(async move {
                let line = match run(&svc, &caller, item).await {
                    Ok(r) => BatchLine {
                        index,
                        result: Some(r),
                        error: None,
                    },
                    Err(e) => BatchLine {
                        index,
                        result: None,
                        error: Some(BatchError {
                            code: e.code,
                            message: e.message,
                        }),
                    },
                };
                drop(permit);
                let _ = tx.send(line).await;
            });
        }
        while running.join_next().await.is_some() {}
    });
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_paths_never_leave_the_workspace() {
        assert_eq!(workspace_path("a/b.txt").unwrap(), "a/b.txt");
        assert_eq!(workspace_path("/workspace/x").unwrap(), "x");
        assert_eq!(workspace_path("./x").unwrap(), "x");
        for bad in [
            "/etc/shadow",
            "../x",
            "a/../../x",
            "/workspace/../etc/passwd",
            "/tmp/x",
        ] {
            let e = workspace_path(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Forbidden, "{bad}");
        }
        assert!(workspace_path("").is_err());
        assert!(workspace_path("a\0b").is_err());
    }

    #[test]
    fn output_comparison_ignores_trailing_whitespace_only() {
        assert!(same_output("1 2 \n3\n\n", "1 2\n3"));
        assert!(!same_output("1 2\n3", "1 2\n4"));
        assert!(!same_output(" 1", "1"));
    }

    #[test]
    fn an_unknown_language_is_invalid_and_a_missing_toolchain_named() {
        assert_eq!(language("cobol").unwrap_err().kind, ErrorKind::Invalid);
        // `swift` is on no host this runs on; its message names the missing program.
        if !tool_present("swift") {
            let e = language("swift").unwrap_err();
            assert_eq!(e.kind, ErrorKind::Unsupported);
            assert!(e.message.contains("swift"), "{}", e.message);
        }
    }
}
