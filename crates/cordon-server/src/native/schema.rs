//! The native HTTP API's OpenAPI schemas: one schema-only twin of each request and response
//! type of the service (same name, same fields, the document's words and bounds), so that the
//! service carries no OpenAPI. Each twin mirrors the serde shape of its type in
//! `cordon_service`; `schemas_match_the_service_types` below and schemathesis (CI, against a
//! real server) catch a twin that drifts from what the server sends and takes.
//!
//! Threat model: none of its own — nothing here parses input; a wrong schema misleads clients
//! and fuzzers, which is what the drift checks are for.
#![allow(dead_code)] // schema only: the twins are never built

use std::collections::BTreeMap;

use cordon_policy::network::NetworkPolicy;
use cordon_policy::{Enforcement, LimitHit, NetworkEvent, Outcome, Status};
use cordon_service::types::{
    signal_pattern, Amount, DURATION_PATTERN, ENV_NAME_PATTERN, MAX_SECONDS, METADATA_MAX_KEY,
    METADATA_MAX_VALUE, NO_NUL_PATTERN, SIZE_PATTERN,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// Built-in profiles a client may name.
#[derive(ToSchema, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileName {
    Default,
    Strict,
}

/// Schema of a size field.
pub struct SizeSchema;

impl PartialSchema for SizeSchema {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Number)
                    .minimum(Some(0.0)),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(SIZE_PATTERN)),
            )
            .description(Some(
                "Bytes as a number, or text such as \"512K\", \"256M\", \"1G\" (powers of 1024)",
            ))
            .into()
    }
}
impl ToSchema for SizeSchema {}

/// Schema of a duration field.
pub struct DurationSchema;

impl PartialSchema for DurationSchema {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Number)
                    .exclusive_minimum(Some(0.0))
                    .exclusive_maximum(Some(MAX_SECONDS)),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(DURATION_PATTERN)),
            )
            .description(Some(
                "Seconds as a number, or text such as \"500ms\", \"30s\", \"5m\", \"2h\"; at most what the server allows for the field",
            ))
            .into()
    }
}
impl ToSchema for DurationSchema {}

/// Schema of a signal field.
pub struct SignalSchema;

impl PartialSchema for SignalSchema {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(1))
                    .maximum(Some(64)),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(signal_pattern())),
            )
            .description(Some(
                "A signal number, or a name such as \"TERM\" or \"SIGKILL\"",
            ))
            .into()
    }
}
impl ToSchema for SignalSchema {}

/// Schema of an environment map: variable names, values without NUL bytes.
pub struct EnvSchema;

impl PartialSchema for EnvSchema {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property_names(Some(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(ENV_NAME_PATTERN)),
            ))
            .additional_properties(Some(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(r"^[^\x00]*$")),
            ))
            .description(Some(
                "Variables by name (letters, digits, _); values without NUL bytes",
            ))
            .into()
    }
}
impl ToSchema for EnvSchema {}

/// Schema of sandbox metadata.
pub struct MetadataSchema;

impl PartialSchema for MetadataSchema {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property_names(Some(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .max_length(Some(METADATA_MAX_KEY)),
            ))
            .additional_properties(Some(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .max_length(Some(METADATA_MAX_VALUE)),
            ))
            .description(Some(
                "Free-form labels: keys up to 128 characters, values up to 1024",
            ))
            .into()
    }
}
impl ToSchema for MetadataSchema {}

/// Schema of a command: an argv array, or a shell string.
#[derive(Deserialize)]
pub struct Cmd(Value);

impl PartialSchema for Cmd {
    fn schema() -> RefOr<Schema> {
        let arg = || {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(NO_NUL_PATTERN))
        };
        OneOfBuilder::new()
            .item(
                utoipa::openapi::schema::ArrayBuilder::new()
                    .prefix_items([arg().min_length(Some(1))])
                    .items(arg())
                    .min_items(Some(1)),
            )
            .item(arg().min_length(Some(1)))
            .description(Some(
                "An argv array (its first element the program), or a shell string run with /bin/sh -c",
            ))
            .into()
    }
}
impl ToSchema for Cmd {}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    /// A template of the server's (`cordon serve --templates`; `base` and
    /// `code-interpreter-v1` are built in): its image, profile and defaults apply to every
    /// field this request leaves out (env: variable by variable). Unknown names are a 404
    /// listing the known ones.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
    )]
    pub template: Option<String>,
    /// Built-in profile: `default` or `strict`.
    #[schema(value_type = Option<ProfileName>)]
    pub profile: Option<String>,
    /// Memory limit (at least 8M), e.g. `"512M"`.
    #[schema(value_type = Option<SizeSchema>)]
    pub memory: Option<Amount>,
    /// CPU quota in cores.
    #[schema(minimum = 0.01, maximum = 1024)]
    pub cpus: Option<f64>,
    /// Processes and threads at once.
    #[schema(minimum = 1, maximum = 1000000)]
    pub pids: Option<u32>,
    /// Size of /tmp and /workspace (at least 1M), e.g. `"256M"`.
    #[schema(value_type = Option<SizeSchema>)]
    pub disk: Option<Amount>,
    /// Bytes of each command's stdout and stderr kept, e.g. `"64K"`; the rest is dropped
    /// (`limits_hit: ["output"]`).
    #[schema(value_type = Option<SizeSchema>)]
    pub output_limit: Option<Amount>,
    /// CPU time each command may use (at least 1s), e.g. `"5s"` (`status: "cpu_time"` when it
    /// runs out).
    #[schema(value_type = Option<DurationSchema>)]
    pub cpu_time: Option<Amount>,
    /// Time to live, e.g. `"10m"` or seconds; at most the server's `--max-ttl`.
    #[schema(value_type = Option<DurationSchema>)]
    pub ttl: Option<Amount>,
    /// Environment variables every command gets.
    #[serde(default)]
    #[schema(value_type = EnvSchema)]
    pub env: BTreeMap<String, String>,
    /// Free-form labels, filterable on list.
    #[serde(default)]
    #[schema(value_type = MetadataSchema)]
    pub metadata: BTreeMap<String, String>,
    /// Egress allowlist; none means no network.
    pub network: Option<NetworkPolicy>,
    /// An image in the server's store (e.g. `python:3.12-slim`, or a manifest digest) whose
    /// root replaces the host's system directories; its `Env` and `WorkingDir` apply to every
    /// command. Unknown images are refused (400) unless the server pulls on demand.
    #[schema(max_length = 4096)]
    pub image: Option<String>,
    /// The caller's volumes to mount: `[{name, path, readonly}]` (see `/v1/volumes`).
    #[serde(default)]
    pub volumes: Vec<VolumeMount>,
    /// A snapshot of the caller's (see `/v1/snapshots`) whose files the sandbox starts with;
    /// its profile, limits and volumes are this request's.
    #[schema(max_length = 63)]
    pub from: Option<String>,
    /// When its time to live runs out, pause it (processes frozen, memory kept) instead of
    /// ending it; a resume brings it back with a new time to live. A paused sandbox is kept
    /// for at most the server's `--max-ttl`, then ended.
    #[serde(default)]
    pub pause_on_timeout: bool,
    /// With `pause_on_timeout`: `false` pauses it to disk instead — its files kept, its
    /// memory, processes and quota slot released; a resume starts it afresh with its files
    /// (E2B's `keep_memory: false`). Absent or `true`: frozen, memory kept.
    #[serde(default)]
    pub pause_keep_memory: Option<bool>,
    /// Stored secrets of the caller's (see `/v1/secrets`) given to the sandbox as
    /// placeholders: its proxy puts each value into requests to the secret's `hosts` only.
    #[serde(default)]
    pub secrets: Vec<SandboxSecret>,
    /// Learn mode: the sandbox runs exactly as without it, and records what its commands use
    /// (network destinations from its egress proxy, programs executed, each command's peaks)
    /// for `GET /v1/sandboxes/{id}/learned-profile`.
    #[serde(default)]
    pub learn: bool,
    /// The programs allowlist (`[exec] allow`): only these files may be executed (absolute
    /// paths in the sandbox, `*` and `?` in the last component; a script's `#!` interpreter
    /// must be listed too). Needs Landlock. Absent: any file the sandbox can read.
    pub exec_allow: Option<Vec<String>>,
}

/// A learning sandbox's learned profile.
#[derive(ToSchema, Serialize)]
pub struct LearnedProfile {
    pub sandbox_id: String,
    /// The sandbox has ended: what it used in all (else what it used so far).
    pub ended: bool,
    /// Commands that ended while it learned (their peaks are the learned limits).
    pub commands: u64,
    /// The profile as the TOML file `cordon run --profile` takes: it `extends` the sandbox's
    /// built-in, each entry with a comment saying why.
    pub toml: String,
    /// The same profile as JSON (the TOML's tables and keys: `extends`, `network.allow`,
    /// `exec.allow`, `limits`, ...).
    #[schema(value_type = Object)]
    pub profile: serde_json::Value,
}

/// A stored secret a sandbox is given (`secrets` in `POST /v1/sandboxes`).
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSecret {
    /// The secret's name under the caller's key.
    #[schema(min_length = 1, max_length = 128)]
    pub name: String,
    /// The variable holding the placeholder in the sandbox (default `CORDON_SECRET_<NAME>`).
    #[schema(pattern = r"^[A-Za-z_][A-Za-z0-9_]*$", max_length = 128)]
    pub env: Option<String>,
    /// Host names (no IPs, no wildcards) the value may go to; the network allowlist must
    /// allow each.
    #[schema(min_items = 1)]
    pub hosts: Vec<String>,
    /// A header the proxy adds to requests to `hosts` that have none of that name.
    #[schema(pattern = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")]
    pub header: Option<String>,
    /// The added header's value, `{value}` standing for the secret (default `{value}`).
    #[schema(pattern = r"\{value\}")]
    pub format: Option<String>,
}

/// `POST /v1/secrets`.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSecret {
    /// Unique under the key: 1-128 characters, no `{`, `}` or control characters.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[^{}\u0000-\u001f\u007f-\u009f]+$"
    )]
    pub name: String,
    /// Write-only: never returned. One line, 1-16384 characters (it travels in a header).
    #[schema(min_length = 1, max_length = 16384, pattern = r"^[^\r\n\u0000]+$")]
    pub value: String,
    #[serde(default)]
    #[schema(value_type = MetadataSchema)]
    pub metadata: BTreeMap<String, String>,
}

/// `PUT /v1/secrets/{name}`: a new version.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateSecret {
    /// Write-only: never returned. One line, 1-16384 characters.
    #[schema(min_length = 1, max_length = 16384, pattern = r"^[^\r\n\u0000]+$")]
    pub value: String,
    /// Replaces the stored metadata when given.
    #[schema(value_type = Option<MetadataSchema>)]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// A stored secret as the API shows it: never its value.
#[derive(ToSchema, Serialize, Deserialize)]
pub struct SecretInfo {
    /// `sec_…`; routes take it or the name.
    pub id: String,
    pub name: String,
    /// 1 when created; each update adds one.
    pub version: u32,
    pub metadata: BTreeMap<String, String>,
    /// Milliseconds since the epoch.
    pub created_at: u64,
    pub updated_at: u64,
}

/// `GET /v1/secrets`.
#[derive(ToSchema, Serialize, Deserialize)]
pub struct SecretList {
    pub secrets: Vec<SecretInfo>,
    /// The `after` of the next page; none on the last.
    pub next: Option<String>,
}

#[derive(ToSchema, Serialize)]
pub struct LimitsView {
    pub memory_bytes: u64,
    pub cpus: f64,
    pub pids: u32,
    pub disk_bytes: u64,
    pub output_limit_bytes: u64,
}

/// The states a sandbox passes through.
#[derive(ToSchema, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    Running,
    Paused,
    Deleted,
    Expired,
    Reaped,
    Failed,
}

#[derive(ToSchema, Serialize)]
pub struct SandboxInfo {
    pub id: String,
    #[schema(value_type = SandboxState)]
    pub state: String,
    pub profile: String,
    pub created_at: u64,
    pub expires_at: u64,
    pub metadata: BTreeMap<String, String>,
    /// What the host enforces for this sandbox; null once it has ended.
    #[schema(required = true)]
    pub enforcement: Option<Enforcement>,
    /// Its limits; null once it has ended.
    pub limits: Option<LimitsView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_reason: Option<String>,
    /// While paused: how its processes are held, `cgroup-freezer` (the kernel's freezer) or
    /// `sigstop` (no freezer cgroup this server may create, e.g. rootless); `disk` when it is
    /// paused to disk (files kept, no process left: a resume starts it afresh).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused_by: Option<String>,
    /// It is paused, not ended, when its time to live runs out.
    #[serde(default)]
    pub pause_on_timeout: bool,
    /// Something a create's caller should know (e.g. that `code-interpreter-v1` runs the
    /// host's Python until its image is built); only in a create's answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A key's audit records and the log's chain.
#[derive(ToSchema, Serialize)]
pub struct AuditView {
    /// The key's records, newest first: `seq`, `prev`, `time_ms`, `event`, `key_id`,
    /// `sandbox`, `details`, and the record's seal (`mac` or `hash`).
    pub records: Vec<Value>,
    pub chain: ChainStatus,
}

/// The log's hash chain, checked against its key and head.
#[derive(ToSchema, Serialize)]
pub struct ChainStatus {
    pub intact: bool,
    /// Records in the whole log (every key's).
    pub records: u64,
    /// The first break, as `cordon audit verify` names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broken: Option<String>,
    /// Its line in the log, 1-based.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
}

/// One point of a sandbox's use.
#[derive(ToSchema, Serialize)]
pub struct UsageSample {
    /// When (the point's first sample), in milliseconds since the epoch.
    pub t_ms: u64,
    /// CPU used over the point's span, of all its CPUs together, 0 to 100.
    pub cpu_pct: f64,
    /// Memory in use (the point's highest sample), in bytes.
    pub mem_bytes: u64,
}

/// A running sandbox's use at the server's last sample.
#[derive(ToSchema, Serialize)]
pub struct UsageNow {
    pub id: String,
    /// When it was sampled, in milliseconds since the epoch.
    pub t_ms: u64,
    /// CPU over the last interval, of all its CPUs together, 0 to 100.
    pub cpu_pct: f64,
    pub mem_bytes: u64,
    pub mem_total: u64,
    /// Its processes (its cgroup's count; absent without a pids counter).
    pub processes: Option<u64>,
    pub processes_max: u64,
    /// Its scratch filesystems' use (absent where it has no filesystems of its own).
    pub disk_used: Option<u64>,
    pub disk_total: Option<u64>,
}

/// `GET /v1/usage`.
#[derive(ToSchema, Serialize)]
pub struct UsageList {
    pub sandboxes: Vec<UsageNow>,
}

/// A sandbox's CPU and memory over its whole life.
#[derive(ToSchema, Serialize)]
pub struct UsageHistory {
    /// The span of one point, in milliseconds (doubles as a long life is merged).
    pub interval_ms: u64,
    /// `cgroup`, or `none` where the host gives the sandbox no cgroup to read (no points).
    pub source: String,
    /// The memory limit, in bytes.
    pub mem_total: u64,
    /// Oldest first; at most 512.
    pub samples: Vec<UsageSample>,
}

/// What a running sandbox uses now.
#[derive(ToSchema, Serialize)]
pub struct SandboxMetrics {
    /// When it was measured, in milliseconds since the epoch.
    pub timestamp_ms: u64,
    /// CPUs it may use (its `cpus` limit, rounded up).
    pub cpu_count: u64,
    /// CPU used since the previous request for this sandbox (or since it started), of all its
    /// CPUs together, 0 to 100.
    pub cpu_used_pct: f64,
    /// Resident memory of its processes, in bytes, against its memory limit.
    pub mem_used: u64,
    pub mem_total: u64,
    /// Used and total bytes of its writable filesystems together.
    pub disk_used: u64,
    pub disk_total: u64,
    /// Its live processes (its init included), against its process limit.
    pub processes: u64,
    pub processes_max: u64,
}

/// A sandbox's processes, by their pid inside it.
#[derive(ToSchema, Serialize)]
pub struct ProcessList {
    pub processes: Vec<ProcessRow>,
}

/// One process. Its command line is the sandbox's own text: show it as text, never markup.
#[derive(ToSchema, Serialize)]
pub struct ProcessRow {
    /// Its pid inside the sandbox (the init is 1).
    pub pid: i32,
    /// Its parent's pid inside the sandbox; 0 for the init.
    pub ppid: i32,
    /// The kernel's one-letter state: `R` running, `S` sleeping, `D` waiting on I/O, `T`
    /// stopped, `Z` ended and not yet reaped.
    pub state: String,
    /// The command line, arguments joined by spaces: its first 1024 bytes, what is not UTF-8
    /// replaced; `[name]` when it has none (a zombie).
    pub command: String,
    /// CPU it has used (user and system, its reaped children's too), in nanoseconds.
    pub cpu_ns: u64,
    /// Its resident memory, in bytes.
    pub rss_bytes: u64,
}

#[derive(ToSchema, Serialize)]
pub struct SandboxList {
    pub sandboxes: Vec<SandboxInfo>,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtendTtl {
    /// New time to live from now, e.g. `"30m"`; at most the server's `--max-ttl`.
    #[schema(value_type = DurationSchema)]
    pub ttl: Amount,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    pub cmd: Cmd,
    /// Working directory inside the sandbox, absolute (default `/workspace`).
    #[schema(pattern = r"^/[^\x00]*$")]
    pub cwd: Option<String>,
    #[serde(default)]
    #[schema(value_type = EnvSchema)]
    pub env: BTreeMap<String, String>,
    /// Text fed to the command's stdin.
    pub stdin: Option<String>,
    /// Wall-clock limit for this command, e.g. `"30s"`.
    #[schema(value_type = Option<DurationSchema>)]
    pub timeout: Option<Amount>,
    /// Start and return at once with a `command_id`.
    #[serde(default)]
    pub background: bool,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    pub cmd: Cmd,
    #[schema(value_type = Option<ProfileName>)]
    pub profile: Option<String>,
    #[schema(value_type = Option<SizeSchema>)]
    pub memory: Option<Amount>,
    #[schema(minimum = 0.01, maximum = 1024)]
    pub cpus: Option<f64>,
    #[schema(minimum = 1, maximum = 1000000)]
    pub pids: Option<u32>,
    #[schema(value_type = Option<SizeSchema>)]
    pub disk: Option<Amount>,
    #[schema(value_type = Option<DurationSchema>)]
    pub timeout: Option<Amount>,
    #[serde(default)]
    #[schema(value_type = EnvSchema)]
    pub env: BTreeMap<String, String>,
    pub stdin: Option<String>,
    /// Working directory inside the sandbox, absolute (default `/workspace`).
    #[schema(pattern = r"^/[^\x00]*$")]
    pub cwd: Option<String>,
    pub network: Option<NetworkPolicy>,
    /// A WebAssembly module or component (WASI), base64: run by the wasm runtime inside the
    /// one-shot sandbox, with `cmd` as its argv (`cmd[0]` names it).
    pub wasm: Option<String>,
    /// An image in the server's store whose root replaces the host's system directories
    /// (its `Env`, `WorkingDir` and `Entrypoint` apply; `cmd` replaces its `Cmd`).
    #[schema(max_length = 4096)]
    pub image: Option<String>,
}

/// One test of a batch item: a run with this stdin, passed when the program exits 0 and, if
/// `expected_stdout` is given, prints it (trailing whitespace of each line ignored).
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestCase {
    pub stdin: Option<String>,
    pub expected_stdout: Option<String>,
}

/// One program of a batch: source in a language (`language` and `code`; compiled first when
/// the language is compiled), or a `cmd`. Each step runs in a fresh one-shot sandbox with the
/// item's own `/workspace`.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Program {
    /// `python`, `bash`, `cpp`, `c`, `nodejs`, `typescript`, `go`, `java`, `rust`, `perl`, …
    /// (SandboxFusion's names): served when its toolchain is on the server; otherwise the
    /// item's line carries an error naming the missing toolchain.
    pub language: Option<String>,
    /// The source, written to the language's file in `/workspace`.
    pub code: Option<String>,
    /// A command to run instead of source code, in `/workspace`.
    pub cmd: Option<Cmd>,
    /// Text fed to the run's stdin (without `tests`).
    pub stdin: Option<String>,
    /// Files written into `/workspace` first: a path (relative, or under `/workspace/`) to
    /// base64 content.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Files read back from `/workspace` after the run (missing ones are left out).
    #[serde(default)]
    pub fetch_files: Vec<String>,
    /// Wall-clock limit of each run (default 10 s).
    #[schema(value_type = Option<DurationSchema>)]
    pub timeout: Option<Amount>,
    /// Wall-clock limit of the compile step (default 10 s).
    #[schema(value_type = Option<DurationSchema>)]
    pub compile_timeout: Option<Amount>,
    /// One run per test, each with its stdin; none: one run with `stdin`.
    #[serde(default)]
    pub tests: Vec<TestCase>,
    #[schema(value_type = Option<ProfileName>)]
    pub profile: Option<String>,
    #[schema(value_type = Option<SizeSchema>)]
    pub memory: Option<Amount>,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    #[schema(max_items = 10000)]
    pub items: Vec<Program>,
    /// How many items run at once (default: the server's CPUs).
    #[schema(minimum = 1, maximum = 256)]
    pub concurrency: Option<u32>,
}

#[derive(ToSchema, Serialize)]
pub struct TestResult {
    pub passed: bool,
    pub outcome: Outcome,
}

/// Why a batch item did not run (the others ran on).
#[derive(ToSchema, Serialize)]
pub struct BatchError {
    pub code: String,
    pub message: String,
}

/// One line of a batch's NDJSON answer, sent as soon as its item is done: its `index` in the
/// request, and either its result or its `error`.
#[derive(ToSchema, Serialize)]
pub struct BatchLine {
    pub index: usize,
    /// Every step exited 0 and every test passed.
    pub passed: Option<bool>,
    /// The compile step's Outcome, for a compiled language.
    pub compile: Option<Outcome>,
    /// The run's Outcome (absent when the compile failed, and with `tests`).
    pub outcome: Option<Outcome>,
    pub tests: Option<Vec<TestResult>>,
    /// The `fetch_files` that existed, base64.
    pub files: Option<BTreeMap<String, String>>,
    pub error: Option<BatchError>,
}

#[derive(ToSchema, Serialize)]
pub struct CommandInfo {
    pub command_id: String,
    pub cmd: Vec<String>,
    pub running: bool,
    pub started_at_ms: u64,
    pub stdout: String,
    pub stderr: String,
    /// How it ended; null while it runs.
    pub outcome: Option<Outcome>,
}

#[derive(ToSchema, Serialize)]
pub struct CommandList {
    pub commands: Vec<CommandInfo>,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdinRequest {
    #[serde(default)]
    pub data: String,
    #[serde(default)]
    pub close: bool,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// A number or a name (`TERM`, `SIGKILL`, `INT`, …).
    #[schema(value_type = SignalSchema)]
    pub signal: Amount,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MkdirRequest {
    /// A path inside the sandbox; relative paths are under `/workspace`.
    #[schema(pattern = r"^[^\x00]+$")]
    pub path: String,
    #[serde(default)]
    pub parents: bool,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoveRequest {
    #[schema(pattern = r"^[^\x00]+$")]
    pub from: String,
    #[schema(pattern = r"^[^\x00]+$")]
    pub to: String,
}

/// A sandbox's egress policy and every decision its proxy made so far.
#[derive(ToSchema, Serialize)]
pub struct NetworkInfo {
    pub policy: NetworkPolicy,
    pub events: Vec<NetworkEvent>,
}

/// The egress policy now in force.
#[derive(ToSchema, Serialize)]
pub struct NetworkSet {
    pub policy: NetworkPolicy,
}

/// Kinds of file system entries.
#[derive(ToSchema, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileType {
    File,
    Dir,
    Symlink,
    Other,
}

/// One file system entry (the engine's `fsview::Entry`, as it serializes).
#[derive(ToSchema, Serialize)]
#[schema(as = Entry)]
pub struct FileEntry {
    /// Last component (`/` for the sandbox root).
    name: String,
    /// Absolute path inside the sandbox.
    path: String,
    r#type: FileType,
    /// Bytes (for a symlink: the length of its target).
    size: u64,
    /// Permission bits.
    mode: u32,
    /// Last modification, seconds since the Unix epoch.
    modified: u64,
    /// For a symlink, its target as stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<String>,
}

#[derive(ToSchema, Serialize)]
pub struct FileList {
    entries: Vec<FileEntry>,
}

/// What an upload wrote.
#[derive(ToSchema, Serialize)]
pub struct Written {
    pub path: String,
    pub bytes: u64,
}

#[derive(ToSchema, Serialize)]
pub struct ContextList {
    pub contexts: Vec<ContextInfo>,
}

#[derive(ToSchema, Serialize)]
pub struct Health {
    /// Always `ok` while the server answers.
    pub status: String,
}

/// One image in the node's store.
#[derive(ToSchema, Serialize, Deserialize)]
pub struct ImageView {
    /// Normalised references that name it (`docker.io/library/python:3.12-slim`); empty when
    /// only its digest does.
    pub names: Vec<String>,
    /// The image manifest's digest (`sha256:…`): what the image is.
    pub digest: String,
    /// `os/arch[/variant]`.
    pub platform: String,
    /// Number of layers.
    pub layers: usize,
    /// Sum of the layers' compressed sizes, in bytes.
    pub size_bytes: u64,
    /// Sum of the layers' unpacked file sizes, in bytes.
    pub unpacked_bytes: u64,
    /// When the image was built (from its config), as the image states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// When it entered this store (Unix seconds).
    pub added: u64,
    /// Where it came from: `pull REGISTRY` or `import PATH`.
    pub source: String,
}

/// `GET /v1/images`.
#[derive(ToSchema, Serialize, Deserialize)]
pub struct ImageList {
    pub images: Vec<ImageView>,
}

/// `POST /v1/images/pull`.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PullRequest {
    /// `NAME[:TAG][@DIGEST]`, Docker's way: `python:3.12-slim`, `ghcr.io/org/app:1`,
    /// `127.0.0.1:5000/team/tool@sha256:…`.
    #[schema(min_length = 1, max_length = 512)]
    pub reference: String,
    /// `os/arch[/variant]` to pick from a multi-platform image; the server's own by default.
    #[serde(default)]
    #[schema(pattern = r"^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$")]
    pub platform: Option<String>,
}

/// What a pull did.
#[derive(ToSchema, Serialize, Deserialize)]
pub struct PullResult {
    /// The normalised reference pulled.
    pub reference: String,
    pub image: ImageView,
}

/// A pull's progress, as `POST /v1/images/pull` streams it (`Accept: text/event-stream`).
#[derive(ToSchema, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum PullEvent {
    /// The manifest is fetched and verified: what will be fetched is known.
    Resolved {
        reference: String,
        digest: String,
        layers: usize,
    },
    /// A layer the store already has (shared with another image, or pulled before).
    LayerCached { digest: String },
    /// Download of a layer starts (`from` > 0: resumed where an interrupted one stopped).
    LayerStart {
        digest: String,
        size: u64,
        from: u64,
    },
    /// Bytes of a layer so far (at most a few per second per layer, and at its end).
    LayerProgress {
        digest: String,
        bytes: u64,
        size: u64,
    },
    /// The layer's blob is verified; it is being unpacked.
    LayerUnpacking { digest: String },
    /// The layer is in the store.
    LayerDone { digest: String },
    /// A download broke and is retried from byte `from`.
    Retry {
        digest: String,
        from: u64,
        error: String,
    },
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeRequest {
    /// `python` (default; or `python3`, `py`), `javascript` (`js`, `node`) or `bash` (`sh`,
    /// `shell`), any case.
    #[serde(default)]
    #[schema(
        pattern = r"^([pP][yY][tT][hH][oO][nN]3?|[pP][yY]|[jJ][aA][vV][aA][sS][cC][rR][iI][pP][tT]|[jJ][sS]|[nN][oO][dD][eE]|[bB][aA][sS][hH]|[sS][hH]|[sS][hH][eE][lL][lL])$"
    )]
    pub language: String,
    pub code: String,
    /// Named context; each has its own state. Default: `default`.
    #[schema(pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    pub context: Option<String>,
    /// Per-cell limit, e.g. `"30s"`.
    #[schema(value_type = Option<DurationSchema>)]
    pub timeout: Option<Amount>,
    /// Environment variables for this cell only (its code and what it starts see them; the
    /// context's later cells do not).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[schema(value_type = Option<EnvSchema>)]
    pub env: std::collections::BTreeMap<String, String>,
}

#[derive(ToSchema, Serialize)]
pub struct CodeError {
    pub name: String,
    pub value: String,
    pub traceback: Vec<String>,
}

#[derive(ToSchema, Serialize)]
pub struct CodeResult {
    pub stdout: String,
    pub stderr: String,
    /// MIME bundles; one has `is_main_result: true` (the last expression's value).
    #[schema(value_type = Vec<Object>)]
    pub results: Vec<Value>,
    pub error: Option<CodeError>,
    pub execution_count: u64,
    /// True when the kernel had to be restarted and earlier state was lost.
    pub state_lost: bool,
    /// Output past the profile's output limit was dropped.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// Results past the first 100 were dropped.
    pub results_truncated: bool,
    /// How the cell ended, in the words of an exec's Outcome: `exited` when it ran to its
    /// end (`error` says whether it raised), `timeout`, `oom`, `signaled`, `cpu_time` when
    /// its kernel was killed so, `error` when the kernel failed otherwise.
    pub status: Status,
    /// Every limit that ended the cell or refused it something while it ran, as an exec's
    /// Outcome lists them (`memory`, `pids`, `cpu_time`, `wall_time`, `output`, `disk`,
    /// `files`).
    pub limits_hit: Vec<LimitHit>,
}

#[derive(ToSchema, Serialize)]
pub struct ContextInfo {
    pub language: String,
    pub name: String,
    pub execution_count: u64,
    pub alive: bool,
}

/// Per-key limits.
#[derive(ToSchema, Serialize)]
pub struct KeyRecord {
    pub id: String,
    pub name: String,
    pub max_sandboxes: u32,
    pub requests_per_second: u32,
    pub created_at: u64,
    pub revoked: bool,
}

/// `POST /v1/sandboxes/{id}/snapshots`.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSnapshot {
    /// 1 to 63 characters: lower-case letters, digits, `-`, `_`, `.`; unique per key.
    #[schema(pattern = r"^[a-z0-9][a-z0-9._-]{0,62}$")]
    pub name: String,
}

/// A snapshot as the API shows it.
#[derive(ToSchema, Serialize, Deserialize)]
pub struct SnapshotInfo {
    pub name: String,
    /// The sandbox it was taken of.
    pub sandbox: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Bytes of its files (each hard link counted, and stored, as a file of its own).
    pub bytes: u64,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Entries not carried (FIFOs, sockets, device nodes, files their owner cannot read,
    /// mount points), the first 50 named with why.
    pub skipped: Vec<String>,
    pub skipped_count: u64,
    /// How long the sandbox's processes were frozen for the copy, in milliseconds (0 if it
    /// was paused already: it stays paused).
    pub frozen_ms: u64,
    /// `cgroup-freezer`, `sigstop`, or `already-paused`.
    pub freeze_method: String,
    /// The paths it holds.
    pub carried: Vec<String>,
    /// What it does not hold.
    pub not_carried: Vec<String>,
}

#[derive(ToSchema, Serialize)]
pub struct SnapshotList {
    pub snapshots: Vec<SnapshotInfo>,
}

/// `POST /v1/sandboxes/{id}/commit`.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitRequest {
    /// The new image's name, `NAME[:TAG]` (`my-agent:2`); no image of the store may have it
    /// yet (409 `already_exists`).
    #[schema(example = "my-agent:2")]
    pub reference: String,
    /// Dockerfile lines applied to the image's config, as `docker commit --change`: `ENV`,
    /// `CMD`, `ENTRYPOINT`, `WORKDIR`, `USER`, `LABEL` (no variable expansion); at most 64.
    #[serde(default)]
    pub changes: Vec<String>,
}

/// The image a commit made.
#[derive(ToSchema, Serialize, Deserialize)]
pub struct CommitResult {
    /// The name it was given, in full (`docker.io/library/my-agent:2`).
    pub reference: String,
    /// The new image's manifest digest.
    pub digest: String,
    /// The image the sandbox was made from (manifest digest).
    pub base: String,
    /// Its layers: the base image's, then the new one.
    pub layers: usize,
    /// The new layer (a tar of what the sandbox changed in its root, deletions as whiteouts).
    pub layer_digest: String,
    pub layer_size: u64,
    /// How long the sandbox's processes were frozen, in milliseconds (0 if it was paused
    /// already: it stays paused).
    pub frozen_ms: u64,
    /// What the image does not hold (`/workspace`, the home, `/tmp`, volumes, …).
    pub not_carried: Vec<String>,
}

/// `POST /v1/sandboxes/{id}/pause`.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PauseRequest {
    /// `false`: pause to disk — its files kept, its memory, processes and quota slot released;
    /// a resume starts it afresh with its files. Absent or `true`: every process frozen, memory
    /// kept (its files are copied to disk too, for a restart of the server).
    pub keep_memory: Option<bool>,
}

/// `POST /v1/sandboxes/{id}/fork`.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// How many sandboxes (1 when absent).
    #[schema(minimum = 1, maximum = 16)]
    pub count: Option<u32>,
    /// Each fork's time to live; the server's default when absent.
    #[schema(value_type = Option<DurationSchema>)]
    pub ttl: Option<Amount>,
    /// Labels of the forks; the parent's when absent.
    #[schema(value_type = Option<MetadataSchema>)]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// What a fork made.
#[derive(ToSchema, Serialize)]
pub struct ForkResult {
    /// The new sandboxes: the parent's files, profile, limits, environment, network policy
    /// and volumes; the parent runs on untouched.
    pub sandboxes: Vec<SandboxInfo>,
    pub frozen_ms: u64,
    pub freeze_method: String,
    pub carried: Vec<String>,
    pub not_carried: Vec<String>,
    /// Said in words: memory and processes are not carried on this host.
    pub note: String,
    pub skipped: Vec<String>,
}

/// `POST /v1/gateway/approvals/{id}`: a person's answer to a held call.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalAnswer {
    /// `true` lets the call through, `false` refuses it.
    pub approve: bool,
    /// The digest of the arguments the person saw (`args_digest` of the held call): required
    /// to grant, and a grant binds to it.
    #[schema(pattern = r"^[^\x00]*$")]
    pub args_digest: Option<String>,
    /// Why: kept in the history, and told to the agent when refused (cut to 500 characters).
    #[schema(pattern = r"^[^\x00]*$")]
    pub reason: Option<String>,
}

/// A tool call a gateway holds for a person (or, in the history, how one ended).
#[derive(ToSchema, Serialize)]
pub struct HeldCall {
    /// `call-` and hex.
    pub id: String,
    /// The tool, as `server.tool` (or a script tool's name).
    pub tool: String,
    /// The rule that asked for approval.
    pub rule: String,
    pub client: String,
    /// The digest of the call's arguments: a grant names it.
    pub args_digest: String,
    pub requested_ms: u64,
    pub expires_ms: u64,
    /// `pending`, `granted` or `refused`.
    pub answer: String,
    pub answered_digest: Option<String>,
    /// The arguments (secret-looking fields masked): the agent's input, to be shown as text.
    pub arguments: Option<Value>,
    /// The API key that answered (`cli` for `cordon gateway approve`).
    pub answered_by: Option<String>,
    pub answered_ms: Option<u64>,
    pub reason: Option<String>,
    /// In the history: `granted`, `refused`, `expired` or `mismatch`.
    pub outcome: Option<String>,
}

/// One gateway's held calls and its last answered ones.
#[derive(ToSchema, Serialize)]
pub struct GatewayApprovals {
    /// Its config file's stem.
    pub name: String,
    pub config: String,
    pub state_dir: String,
    /// Whether its process runs (a stopped gateway's calls can no longer proceed).
    pub running: bool,
    pub pending: Vec<HeldCall>,
    /// Newest first.
    pub history: Vec<HeldCall>,
}

/// `GET /v1/gateway/approvals`.
#[derive(ToSchema, Serialize)]
pub struct ApprovalsView {
    /// The gateways registered with this server (`cordon gateway --keys-dir DATA_DIR`).
    pub gateways: Vec<GatewayApprovals>,
}

/// An API key as an admin sees it (never its secret).
#[derive(ToSchema, Serialize)]
pub struct KeyView {
    /// `key_…`.
    pub id: String,
    pub name: String,
    pub max_sandboxes: u32,
    pub requests_per_second: u32,
    /// Seconds since the epoch.
    pub created_at: u64,
    pub revoked: bool,
    /// May see and answer the gateways' held calls, the keys and the host's enforcement.
    pub admin: bool,
    /// Its sandboxes alive on this server now.
    pub sandboxes: u64,
}

/// `GET /v1/keys`.
#[derive(ToSchema, Serialize)]
pub struct KeyList {
    pub keys: Vec<KeyView>,
}

/// `POST /v1/keys`.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    /// A label: 1 to 64 characters, not only spaces, no control characters.
    #[schema(
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x1f\x7f-\x9f\s][^\x00-\x1f\x7f-\x9f]*$",
        min_length = 1,
        max_length = 64
    )]
    pub name: String,
    /// Sandboxes it may run at once (default 50).
    #[schema(minimum = 1, maximum = 100000)]
    pub max_sandboxes: Option<u32>,
    /// Requests per second it may make (default 100).
    #[schema(minimum = 1, maximum = 1000000)]
    pub requests_per_second: Option<u32>,
    /// An admin key (default false).
    pub admin: Option<bool>,
}

/// A new key.
#[derive(ToSchema, Serialize)]
pub struct CreatedKey {
    /// The secret (`cdn_…`): shown here once, stored only as a hash.
    pub secret: String,
    pub key: KeyView,
}

/// What this host enforces.
#[derive(ToSchema, Serialize)]
pub struct HostEnforcement {
    /// `full` (every layer), `no_namespaces` (Landlock, seccomp, rlimits and a cgroup only,
    /// one-shot runs only) or `none`.
    pub mode: String,
    /// `cordon check --json`'s document: `kernel`, `features` (each `name`, `available`,
    /// `detail`, `cost_if_missing`), `environment`, `obstacles` (each with its `fixes`),
    /// `wasm_backend`.
    pub report: Value,
}

/// `POST /v1/volumes`.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateVolume {
    /// 1 to 63 characters: lower-case letters, digits, `-`, `_`, `.`; starting with a letter
    /// or digit.
    #[schema(pattern = r"^[a-z0-9][a-z0-9._-]{0,62}$")]
    pub name: String,
    /// Its cap, e.g. `"10G"` (see the README's *State* section for where it is enforced);
    /// 1G when absent.
    #[schema(value_type = Option<SizeSchema>)]
    pub size: Option<Amount>,
}

/// A volume as the API shows it.
#[derive(ToSchema, Serialize, Deserialize)]
pub struct VolumeInfo {
    pub name: String,
    /// The cap, in bytes.
    pub size_bytes: u64,
    /// Bytes its files take now (each hard-linked file once); absent when the tree is too
    /// large to walk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// Unix seconds.
    pub created_at: u64,
    /// The key's running sandboxes that mount it.
    #[serde(default)]
    pub mounted_by: Vec<String>,
}

#[derive(ToSchema, Serialize)]
pub struct VolumeList {
    pub volumes: Vec<VolumeInfo>,
}

/// One volume of a sandbox create: `volumes: [{name, path, readonly}]`.
#[derive(ToSchema, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeMount {
    /// A volume of the caller's key.
    pub name: String,
    /// Where it appears inside the sandbox: an absolute path, not `/` and not in `/proc`,
    /// `/sys`, `/dev`, `/etc`, `/usr`, `/bin`, `/sbin`, `/lib*`.
    #[schema(max_length = 1024)]
    pub path: String,
    #[serde(default)]
    pub readonly: bool,
}

#[cfg(test)]
mod tests {
    use serde::de::{self, Deserializer, Visitor};

    /// The field names a `Deserialize` type takes, as serde's derive lists them.
    fn fields_of<'de, T: serde::Deserialize<'de>>() -> Vec<&'static str> {
        struct Probe(Option<&'static [&'static str]>);
        #[derive(Debug)]
        struct Found;
        impl std::fmt::Display for Found {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("found")
            }
        }
        impl std::error::Error for Found {}
        impl de::Error for Found {
            fn custom<M: std::fmt::Display>(_: M) -> Self {
                Found
            }
        }
        impl<'de> Deserializer<'de> for &mut Probe {
            type Error = Found;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Found> {
                Err(Found)
            }
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Found> {
                self.0 = Some(fields);
                Err(Found)
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
                enum identifier ignored_any
            }
        }
        let mut probe = Probe(None);
        let _ = T::deserialize(&mut probe);
        let mut f = probe.0.unwrap_or_default().to_vec();
        f.sort_unstable();
        f
    }

    /// Each request type's twin takes exactly the fields the service's type takes: a field
    /// added to the service and not to the document (or the other way round) fails here.
    #[test]
    fn schemas_match_the_service_types() {
        macro_rules! same {
            ($($t:ident),* $(,)?) => {$(
                assert_eq!(
                    fields_of::<super::$t>(),
                    fields_of::<cordon_service::types::$t>(),
                    stringify!($t)
                );
            )*};
        }
        same!(
            CreateSandbox,
            ExtendTtl,
            ExecRequest,
            RunRequest,
            StdinRequest,
            SignalRequest,
            MkdirRequest,
            MoveRequest,
        );
        assert_eq!(
            fields_of::<super::CodeRequest>(),
            fields_of::<cordon_service::interpreter::CodeRequest>()
        );
        assert_eq!(
            fields_of::<super::PullRequest>(),
            fields_of::<cordon_service::PullRequest>()
        );
        assert_eq!(
            fields_of::<super::CreateSnapshot>(),
            fields_of::<cordon_service::snapshots::CreateSnapshot>()
        );
        assert_eq!(
            fields_of::<super::CommitRequest>(),
            fields_of::<cordon_service::commit::CommitRequest>()
        );
        assert_eq!(
            fields_of::<super::CommitResult>(),
            fields_of::<cordon_service::commit::CommitResult>()
        );
        assert_eq!(
            fields_of::<super::ForkRequest>(),
            fields_of::<cordon_service::snapshots::ForkRequest>()
        );
        assert_eq!(
            fields_of::<super::PauseRequest>(),
            fields_of::<cordon_service::types::PauseRequest>()
        );
        assert_eq!(
            fields_of::<super::Program>(),
            fields_of::<cordon_service::programs::Program>()
        );
        assert_eq!(
            fields_of::<super::TestCase>(),
            fields_of::<cordon_service::programs::TestCase>()
        );
        assert_eq!(
            fields_of::<super::BatchRequest>(),
            fields_of::<cordon_service::programs::BatchRequest>()
        );
        assert_eq!(
            fields_of::<super::CreateVolume>(),
            fields_of::<cordon_service::volumes::CreateVolume>()
        );
        assert_eq!(
            fields_of::<super::VolumeMount>(),
            fields_of::<cordon_service::volumes::VolumeMount>()
        );
        assert!(fields_of::<super::CreateSandbox>().contains(&"memory"));
        assert_eq!(
            fields_of::<super::CreateSandbox>(),
            fields_of::<cordon_service::types::CreateSandbox>()
        );
        assert_eq!(
            fields_of::<super::SandboxSecret>(),
            fields_of::<cordon_service::types::SandboxSecret>()
        );
    }
}
