//! The gateway's state directory: pins (approved and pending tool definitions), held calls
//! waiting for a person, and the history of answered ones. Files, so that another process —
//! `cordon gateway approve`, or the console of a `cordon serve` the gateway registered with —
//! can answer a running gateway; written whole and renamed into place, so a reader never sees
//! half. Here, in the service, because every door that answers approvals (the gateway's own
//! HTTP and console, the server's native API and console, the CLI) must answer them one way.
//!
//! Threat model: a held call's arguments are the agent's (hostile) input: stored as JSON, with
//! secret-looking fields already masked by the gateway, and shown by doors as text only. An
//! answer is bound to the call's argument digest, its rule and its expiry; call ids are checked
//! to be ours (`call-` and hex) before they name a file. A registration names a state
//! directory; only the server's own user can write the (private) data directory holding it.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use cordon_gateway::pin::PinFile;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ServiceError;

/// Answered calls kept in a state directory's history (the file is trimmed to these).
pub const HISTORY_KEEP: usize = 200;
/// A person's reason is cut to this many characters (it goes into the agent's error too).
pub const MAX_REASON: usize = 500;

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    {
        let mut f = crate::datadir::open_private(
            &tmp,
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true),
        )?;
        std::io::Write::write_all(&mut f, bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

pub struct StateDir {
    pub dir: PathBuf,
    /// The pins as last read, with the file's (mtime, size, inode): a call costs a stat, not
    /// a read and a parse, and `cordon gateway approve` (a rename) is seen at the next call.
    pins_cache: std::sync::Mutex<Option<(FileStamp, PinFile)>>,
}

type FileStamp = (std::time::SystemTime, u64, u64);

fn stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

impl StateDir {
    pub fn open(dir: &Path) -> std::io::Result<StateDir> {
        crate::datadir::prepare(dir)?;
        std::fs::create_dir_all(dir.join("approvals"))?;
        Ok(StateDir {
            dir: dir.to_path_buf(),
            pins_cache: Default::default(),
        })
    }

    /// An existing state directory, as another process (the server) opens it: nothing is
    /// created.
    pub fn open_existing(dir: &Path) -> std::io::Result<StateDir> {
        if !dir.join("approvals").is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "not a gateway state directory",
            ));
        }
        Ok(StateDir {
            dir: dir.to_path_buf(),
            pins_cache: Default::default(),
        })
    }

    fn pins_path(&self) -> PathBuf {
        self.dir.join("pins.json")
    }

    pub fn load_pins(&self) -> std::io::Result<PinFile> {
        let now = stamp(&self.pins_path());
        if let (Some(st), Ok(cache)) = (now, self.pins_cache.lock()) {
            if let Some((_, p)) = cache.as_ref().filter(|(s, _)| *s == st) {
                return Ok(p.clone());
            }
        }
        let pins = self.read_pins()?;
        if let (Some(st), Ok(mut cache)) = (now, self.pins_cache.lock()) {
            *cache = Some((st, pins.clone()));
        }
        Ok(pins)
    }

    fn read_pins(&self) -> std::io::Result<PinFile> {
        match std::fs::read(self.pins_path()) {
            Ok(b) => serde_json::from_slice(&b).map_err(std::io::Error::other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(PinFile::default()),
            Err(e) => Err(e),
        }
    }

    pub fn save_pins(&self, pins: &PinFile) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(pins).map_err(std::io::Error::other)?;
        write_atomic(&self.pins_path(), &bytes)
    }

    fn approval_path(&self, id: &str) -> Option<PathBuf> {
        // Ids are ours (hex); anything else never names a file.
        (id.starts_with("call-") && id[5..].bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| self.dir.join("approvals").join(format!("{id}.json")))
    }

    pub fn save_approval(&self, a: &Approval) -> std::io::Result<()> {
        let p = self
            .approval_path(&a.id)
            .ok_or_else(|| std::io::Error::other("bad approval id"))?;
        let bytes = serde_json::to_vec_pretty(a).map_err(std::io::Error::other)?;
        write_atomic(&p, &bytes)
    }

    pub fn load_approval(&self, id: &str) -> Option<Approval> {
        let p = self.approval_path(id)?;
        serde_json::from_slice(&std::fs::read(p).ok()?).ok()
    }

    pub fn remove_approval(&self, id: &str) {
        if let Some(p) = self.approval_path(id) {
            let _ = std::fs::remove_file(p);
        }
    }

    pub fn approvals(&self) -> Vec<Approval> {
        let mut out: Vec<Approval> = std::fs::read_dir(self.dir.join("approvals"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                self.load_approval(name.strip_suffix(".json")?)
            })
            .collect();
        out.sort_by_key(|a| a.requested_ms);
        out
    }

    fn history_path(&self) -> PathBuf {
        self.dir.join("history.jsonl")
    }

    /// Adds an answered (or expired) call to the history; past twice [`HISTORY_KEEP`] records
    /// the file is rewritten with the last [`HISTORY_KEEP`], so it stays small.
    pub fn record_history(&self, a: &Approval) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(a).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let path = self.history_path();
        {
            let mut f = crate::datadir::open_private(
                &path,
                std::fs::OpenOptions::new().create(true).append(true),
            )?;
            f.write_all(&line)?;
        }
        let lines = self.history_lines()?;
        if lines.len() > 2 * HISTORY_KEEP {
            let keep = lines[lines.len() - HISTORY_KEEP..].join("\n") + "\n";
            write_atomic(&path, keep.as_bytes())?;
        }
        Ok(())
    }

    fn history_lines(&self) -> std::io::Result<Vec<String>> {
        match std::fs::File::open(self.history_path()) {
            Ok(f) => Ok(std::io::BufReader::new(f)
                .lines()
                .map_while(Result::ok)
                .filter(|l| !l.trim().is_empty())
                .collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Answered calls, newest first, at most `limit`.
    pub fn history(&self, limit: usize) -> Vec<Approval> {
        let lines = self.history_lines().unwrap_or_default();
        lines
            .iter()
            .rev()
            .filter_map(|l| serde_json::from_str(l).ok())
            .take(limit)
            .collect()
    }

    /// Answers a held call: the one way every door does it. A grant must name the digest of
    /// the arguments the person saw (`None` only from the CLI, which shows that digest); a
    /// call already answered or past its expiry cannot be answered.
    pub fn answer(
        &self,
        id: &str,
        ans: &ApprovalAnswer,
        by: &str,
    ) -> Result<Approval, ServiceError> {
        let mut a = self.load_approval(id).ok_or_else(|| {
            ServiceError::not_found(format!(
                "no call {id} is waiting (answered, expired, or never held)"
            ))
        })?;
        if a.answer != Answer::Pending {
            return Err(ServiceError::conflict(format!(
                "call {id} is already answered"
            )));
        }
        if now_ms() > a.expires_ms {
            return Err(ServiceError::conflict(format!(
                "call {id} expired; the gateway refused it"
            )));
        }
        let digest = match &ans.args_digest {
            Some(d) => d.clone(),
            None => a.args_digest.clone(),
        };
        if ans.approve && digest != a.args_digest {
            return Err(ServiceError::conflict(
                "args_digest is not the digest of the held call's arguments",
            ));
        }
        a.answer = if ans.approve {
            Answer::Granted
        } else {
            Answer::Refused
        };
        a.answered_digest = Some(digest);
        a.answered_by = Some(by.to_string());
        a.answered_ms = Some(now_ms());
        a.reason = ans
            .reason
            .as_deref()
            .map(|r| {
                r.chars()
                    .filter(|c| !c.is_control() || *c == ' ')
                    .take(MAX_REASON)
                    .collect::<String>()
            })
            .filter(|r| !r.trim().is_empty());
        self.save_approval(&a)
            .map_err(|e| ServiceError::io("the gateway's state", &e))?;
        Ok(a)
    }

    /// What a door shows of this state directory: calls waiting, then the last answered.
    pub fn view(&self, reg: Registration, running: bool, history: usize) -> GatewayApprovals {
        GatewayApprovals {
            name: reg.name,
            config: reg.config,
            state_dir: self.dir.display().to_string(),
            running,
            pending: self
                .approvals()
                .into_iter()
                .filter(|a| a.answer == Answer::Pending)
                .collect(),
            history: self.history(history),
        }
    }
}

fn now_ms() -> u64 {
    crate::registry::now_ms()
}

/// A person's answer to a held call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalAnswer {
    pub approve: bool,
    /// The digest of the arguments the person saw; a grant binds to it (required to grant
    /// over HTTP).
    #[serde(default)]
    pub args_digest: Option<String>,
    /// Why (shown in the history, and to the agent when refused).
    #[serde(default)]
    pub reason: Option<String>,
}

/// One gateway's calls waiting for a person, and the last answered ones.
#[derive(Debug, Clone, Serialize)]
pub struct GatewayApprovals {
    /// The gateway's name (its config file's stem).
    pub name: String,
    /// Its config file.
    pub config: String,
    pub state_dir: String,
    /// Whether its process is running (a stopped gateway's calls can no longer proceed).
    pub running: bool,
    pub pending: Vec<Approval>,
    /// Newest first.
    pub history: Vec<Approval>,
}

/// What `GET …/gateway/approvals` answers.
#[derive(Debug, Clone, Serialize)]
pub struct ApprovalsView {
    pub gateways: Vec<GatewayApprovals>,
}

/// A gateway's note, in a server's data directory, of where its state lives: how the server's
/// console finds the approvals of a gateway sharing its data directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Registration {
    pub name: String,
    pub config: String,
    pub state_dir: PathBuf,
    pub pid: u32,
}

fn registrations_dir(server_data_dir: &Path) -> PathBuf {
    server_data_dir.join("gateways")
}

/// Registers a gateway with the server whose data directory is `server_data_dir`; returns the
/// note's path. One note per state directory: a gateway started again rewrites its own.
pub fn register(server_data_dir: &Path, reg: &Registration) -> std::io::Result<PathBuf> {
    let dir = registrations_dir(server_data_dir);
    std::fs::create_dir_all(&dir)?;
    let tag = crate::keys::hash(&reg.state_dir.display().to_string());
    let name: String = reg
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let path = dir.join(format!("{name}-{}.json", &tag[..tag.len().min(12)]));
    let bytes = serde_json::to_vec_pretty(reg).map_err(std::io::Error::other)?;
    write_atomic(&path, &bytes)?;
    Ok(path)
}

/// The gateways registered in `server_data_dir`, with whether each one's process still runs.
pub fn registered(server_data_dir: &Path) -> Vec<(Registration, bool)> {
    let mut out: Vec<(Registration, bool)> = std::fs::read_dir(registrations_dir(server_data_dir))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| {
            let r: Registration = serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok()?;
            let running = r.pid > 0 && Path::new(&format!("/proc/{}", r.pid)).exists();
            // A stopped gateway whose state directory is gone (a removed config, a test's
            // temporary one) has nothing left to show: its note goes.
            if !running && !r.state_dir.join("approvals").is_dir() {
                let _ = std::fs::remove_file(e.path());
                return None;
            }
            Some((r, running))
        })
        .collect();
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Answer {
    Pending,
    Granted,
    Refused,
}

/// A call held for a person's approval. The answer is bound to the call's argument digest,
/// its rule and its expiry: a grant for other arguments, another rule or after the expiry
/// lets nothing through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    pub id: String,
    pub tool: String,
    pub rule: String,
    pub client: String,
    pub args_digest: String,
    pub requested_ms: u64,
    pub expires_ms: u64,
    pub answer: Answer,
    /// The digest the person approved (what `cordon gateway approvals` showed).
    pub answered_digest: Option<String>,
    /// The call's arguments as the person sees them (secret-looking fields masked).
    #[serde(default)]
    pub arguments: Option<Value>,
    /// Who answered: the API key's id (`cli` from `cordon gateway approve`).
    #[serde(default)]
    pub answered_by: Option<String>,
    #[serde(default)]
    pub answered_ms: Option<u64>,
    /// The person's reason.
    #[serde(default)]
    pub reason: Option<String>,
    /// In the history: how the call ended (`granted`, `refused`, `expired`, `mismatch`).
    #[serde(default)]
    pub outcome: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!(
            "cordon-gwstate-{tag}-{}",
            crate::keys::random_hex(6)
        ))
    }

    fn held(state: &StateDir, id: &str, expires_in_ms: u64) -> Approval {
        let a = Approval {
            id: id.into(),
            tool: "files.wipe".into(),
            rule: "rules[0]".into(),
            client: "agent".into(),
            args_digest: "sha256:aa".into(),
            requested_ms: now_ms(),
            expires_ms: now_ms() + expires_in_ms,
            answer: Answer::Pending,
            answered_digest: None,
            arguments: Some(serde_json::json!({"folder": "<script>x</script>"})),
            answered_by: None,
            answered_ms: None,
            reason: None,
            outcome: None,
        };
        state.save_approval(&a).expect("save");
        a
    }

    fn ans(approve: bool, digest: Option<&str>, reason: Option<&str>) -> ApprovalAnswer {
        ApprovalAnswer {
            approve,
            args_digest: digest.map(str::to_string),
            reason: reason.map(str::to_string),
        }
    }

    #[test]
    fn a_grant_binds_to_the_digest_shown_and_a_call_is_answered_once() {
        let d = dir("grant");
        let state = StateDir::open(&d).expect("open");
        held(&state, "call-01", 60_000);
        let e = state.answer("call-01", &ans(true, Some("sha256:bb"), None), "k");
        assert_eq!(
            e.err().map(|e| e.kind),
            Some(crate::error::ErrorKind::Conflict)
        );
        let a = state
            .answer("call-01", &ans(true, Some("sha256:aa"), None), "key_1")
            .expect("granted");
        assert_eq!(
            (a.answer, a.answered_by.as_deref()),
            (Answer::Granted, Some("key_1"))
        );
        let again = state.answer("call-01", &ans(false, None, None), "key_1");
        assert_eq!(
            again.err().map(|e| e.kind),
            Some(crate::error::ErrorKind::Conflict)
        );
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn a_refusal_keeps_its_reason_without_control_characters_and_cut_to_length() {
        let d = dir("refuse");
        let state = StateDir::open(&d).expect("open");
        held(&state, "call-02", 60_000);
        let long = format!("no\x1b[31m\n{}", "x".repeat(2 * MAX_REASON));
        let a = state
            .answer("call-02", &ans(false, None, Some(&long)), "key_1")
            .expect("refused");
        let r = a.reason.unwrap_or_default();
        assert!(
            r.starts_with("no[31m") && r.chars().count() == MAX_REASON,
            "{r}"
        );
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn an_expired_call_or_a_foreign_id_cannot_be_answered() {
        let d = dir("expired");
        let state = StateDir::open(&d).expect("open");
        let mut a = held(&state, "call-03", 0);
        a.expires_ms = now_ms().saturating_sub(1000);
        state.save_approval(&a).expect("save");
        let e = state.answer("call-03", &ans(false, None, None), "k");
        assert_eq!(
            e.err().map(|e| e.kind),
            Some(crate::error::ErrorKind::Conflict)
        );
        for id in ["../pins", "call-../../x", "call-zz"] {
            let e = state.answer(id, &ans(false, None, None), "k");
            assert_eq!(
                e.err().map(|e| e.kind),
                Some(crate::error::ErrorKind::NotFound),
                "{id}"
            );
        }
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn the_history_is_newest_first_and_stays_bounded() {
        let d = dir("history");
        let state = StateDir::open(&d).expect("open");
        let a = held(&state, "call-04", 60_000);
        for i in 0..(2 * HISTORY_KEEP + 5) {
            let mut x = a.clone();
            x.requested_ms = i as u64;
            state.record_history(&x).expect("history");
        }
        let h = state.history(10);
        assert_eq!(h.len(), 10);
        assert_eq!(h[0].requested_ms, (2 * HISTORY_KEEP + 4) as u64);
        let lines = std::fs::read_to_string(d.join("history.jsonl")).unwrap_or_default();
        assert!(
            lines.lines().count() <= 2 * HISTORY_KEEP,
            "{}",
            lines.lines().count()
        );
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn a_registered_gateway_is_found_by_the_server_and_rewritten_when_started_again() {
        let server = dir("server");
        let gw = dir("gw");
        std::fs::create_dir_all(&server).expect("server dir");
        let state = StateDir::open(&gw).expect("open");
        let reg = |pid| Registration {
            name: "tools".into(),
            config: "/etc/cordon/tools.toml".into(),
            state_dir: state.dir.clone(),
            pid,
        };
        register(&server, &reg(u32::MAX)).expect("register");
        register(&server, &reg(std::process::id())).expect("register again");
        let found = registered(&server);
        assert_eq!(found.len(), 1, "one note per state directory");
        assert!(found[0].1, "this process runs");
        assert!(StateDir::open_existing(&found[0].0.state_dir).is_ok());
        assert!(
            StateDir::open_existing(&server).is_err(),
            "not a state directory"
        );
        let _ = std::fs::remove_dir_all(server);
        let _ = std::fs::remove_dir_all(gw);
    }
}
