//! `files.watch_dir`, for the sync SDKs (`CreateWatcher`, `GetWatcherEvents`, `RemoveWatcher`)
//! and the async ones (the `WatchDir` stream, which polls every 200 ms): a poller. Each `GetWatcherEvents` lists the watched directory again (inside the sandbox,
//! as its user, like any file call) and answers what changed since the previous look. It needs
//! no inotify in the sandbox and works the same rootless; what it cannot see is a change undone
//! between two looks, and a rename shows as a remove and a create. A file that appeared is
//! reported as envd's inotify reports an upload — create, chmod (its owner was set), write (if
//! it has bytes) — and with `include_entry` each event of a path that still exists carries its
//! entry.

use std::collections::{BTreeMap, HashMap};

use cordon_service::files::{self, EntryType};
use serde_json::{json, Value};

use crate::error::{ApiError, ErrorKind};
use cordon_service::{Caller, Service};

/// Watchers one sandbox may hold at once.
const MAX_PER_SANDBOX: usize = 64;
/// Deepest a recursive watcher looks, and most entries it keeps.
const MAX_DEPTH: u32 = 16;
const MAX_ENTRIES: usize = 50_000;

/// What tells one entry's state from another: directory or not, size, mode, mtime.
type Sig = (bool, u64, u32, u64);

/// One look at the watched tree: each entry's signature and what E2B shows of it.
#[derive(Default)]
struct Look {
    sigs: BTreeMap<String, Sig>,
    entries: HashMap<String, Value>,
}

pub(super) struct Watcher {
    sandbox: String,
    key_id: String,
    path: String,
    recursive: bool,
    include_entry: bool,
    seen: BTreeMap<String, Sig>,
}

#[derive(Default)]
pub(super) struct Watchers(std::sync::Mutex<HashMap<String, Watcher>>);

/// The watched tree now, by path relative to the watched directory.
async fn scan(
    svc: &Service,
    caller: &Caller,
    id: &str,
    path: &str,
    recursive: bool,
    include_entry: bool,
) -> Result<Look, ApiError> {
    let depth = if recursive { MAX_DEPTH } else { 1 };
    let entries = files::snapshot(svc, caller, id, path, depth, MAX_ENTRIES).await?;
    let prefix = format!("{}/", path.trim_end_matches('/'));
    let mut look = Look::default();
    for e in entries {
        let dir = e.r#type == EntryType::Dir;
        let rel = e.path.strip_prefix(&prefix).unwrap_or(&e.name).to_string();
        look.sigs
            .insert(rel.clone(), (dir, e.size, e.mode, e.modified));
        if include_entry {
            look.entries.insert(rel, super::filesystem::entry_info(&e));
        }
    }
    Ok(look)
}

fn event(name: &str, t: &str) -> Value {
    json!({"name": name, "type": t})
}

/// What changed from `old` to `new`, as E2B's events.
fn diff(old: &BTreeMap<String, Sig>, new: &BTreeMap<String, Sig>) -> Vec<Value> {
    let mut out = Vec::new();
    for (name, sig) in new {
        match old.get(name) {
            None => {
                out.push(event(name, "EVENT_TYPE_CREATE"));
                if !sig.0 {
                    out.push(event(name, "EVENT_TYPE_CHMOD"));
                    if sig.1 > 0 {
                        out.push(event(name, "EVENT_TYPE_WRITE"));
                    }
                }
            }
            Some(o) if o.0 != sig.0 => {
                out.push(event(name, "EVENT_TYPE_REMOVE"));
                out.push(event(name, "EVENT_TYPE_CREATE"));
            }
            Some(o) => {
                if !sig.0 && (o.1 != sig.1 || o.3 != sig.3) {
                    out.push(event(name, "EVENT_TYPE_WRITE"));
                }
                if o.2 != sig.2 {
                    out.push(event(name, "EVENT_TYPE_CHMOD"));
                }
            }
        }
    }
    for name in old.keys().filter(|n| !new.contains_key(*n)) {
        out.push(event(name, "EVENT_TYPE_REMOVE"));
    }
    out
}

impl Watchers {
    pub(super) async fn create(
        &self,
        svc: &Service,
        caller: &Caller,
        id: &str,
        path: String,
        recursive: bool,
        include_entry: bool,
    ) -> Result<String, ApiError> {
        let seen = scan(svc, caller, id, &path, recursive, false).await?.sigs;
        let mut w = self.0.lock().map_err(|_| ApiError::internal("lock"))?;
        // Watchers of sandboxes that ended go now, so the table stays bounded.
        w.retain(|_, x| {
            svc.get_live(
                &Caller {
                    key_id: x.key_id.clone(),
                    max_sandboxes: 0,
                },
                &x.sandbox,
            )
            .is_ok()
        });
        if w.values().filter(|x| x.sandbox == id).count() >= MAX_PER_SANDBOX {
            return Err(ApiError::too_many(
                format!("a sandbox may have at most {MAX_PER_SANDBOX} directory watchers; stop one first"),
                1,
            ));
        }
        let wid = cordon_service::keys::random_hex(12);
        w.insert(
            wid.clone(),
            Watcher {
                sandbox: id.to_string(),
                key_id: caller.key_id.clone(),
                path,
                recursive,
                include_entry,
                seen,
            },
        );
        Ok(wid)
    }

    fn find(&self, caller: &Caller, id: &str, wid: &str) -> Result<(String, bool, bool), ApiError> {
        let w = self.0.lock().map_err(|_| ApiError::internal("lock"))?;
        match w.get(wid) {
            Some(x) if x.sandbox == id && x.key_id == caller.key_id => {
                Ok((x.path.clone(), x.recursive, x.include_entry))
            }
            _ => Err(ApiError::not_found(format!("no watcher '{wid}'"))),
        }
    }

    pub(super) async fn events(
        &self,
        svc: &Service,
        caller: &Caller,
        id: &str,
        wid: &str,
    ) -> Result<Vec<Value>, ApiError> {
        let (path, recursive, include_entry) = self.find(caller, id, wid)?;
        // An ended sandbox ends its watchers (rather than reading as an emptied directory).
        svc.get_live(caller, id)?;
        let now = scan(svc, caller, id, &path, recursive, include_entry).await;
        let mut w = self.0.lock().map_err(|_| ApiError::internal("lock"))?;
        let Some(x) = w.get_mut(wid) else {
            return Err(ApiError::not_found(format!("no watcher '{wid}'")));
        };
        let now = match now {
            Ok(n) => n,
            // The watched directory itself went away: everything in it is removed.
            Err(e) if e.kind == ErrorKind::NotFound => Look::default(),
            Err(e) => return Err(e),
        };
        let mut ev = diff(&x.seen, &now.sigs);
        x.seen = now.sigs;
        // Best effort, as envd's: the entry of a path that still exists.
        for e in &mut ev {
            let entry = e["name"].as_str().and_then(|n| now.entries.get(n)).cloned();
            if let (Some(entry), Some(o)) = (entry, e.as_object_mut()) {
                o.insert("entry".into(), entry);
            }
        }
        Ok(ev)
    }

    pub(super) fn remove(&self, caller: &Caller, id: &str, wid: &str) -> Result<(), ApiError> {
        self.find(caller, id, wid)?;
        if let Ok(mut w) = self.0.lock() {
            w.remove(wid);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_each_kind_of_change() {
        let old: BTreeMap<String, Sig> = [
            ("a".to_string(), (false, 1, 0o644, 10)),
            ("b".to_string(), (false, 1, 0o644, 10)),
            ("c".to_string(), (false, 1, 0o644, 10)),
        ]
        .into();
        let new: BTreeMap<String, Sig> = [
            ("a".to_string(), (false, 2, 0o644, 10)),
            ("b".to_string(), (false, 1, 0o600, 10)),
            ("d".to_string(), (true, 0, 0o755, 11)),
        ]
        .into();
        let ev: Vec<(String, String)> = diff(&old, &new)
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap_or("").into(),
                    e["type"].as_str().unwrap_or("").into(),
                )
            })
            .collect();
        assert_eq!(
            ev,
            [
                ("a".into(), "EVENT_TYPE_WRITE".into()),
                ("b".into(), "EVENT_TYPE_CHMOD".into()),
                ("d".into(), "EVENT_TYPE_CREATE".into()),
                ("c".into(), "EVENT_TYPE_REMOVE".into()),
            ]
        );
    }

    #[test]
    fn a_new_file_reads_as_envd_reports_an_upload_create_chmod_write() {
        let old = BTreeMap::new();
        let new: BTreeMap<String, Sig> = [
            ("empty".to_string(), (false, 0, 0o644, 10)),
            ("full".to_string(), (false, 5, 0o644, 10)),
        ]
        .into();
        let ev: Vec<String> = diff(&old, &new)
            .iter()
            .map(|e| {
                format!(
                    "{} {}",
                    e["name"].as_str().unwrap_or(""),
                    e["type"].as_str().unwrap_or("")
                )
            })
            .collect();
        assert_eq!(
            ev,
            [
                "empty EVENT_TYPE_CREATE",
                "empty EVENT_TYPE_CHMOD",
                "full EVENT_TYPE_CREATE",
                "full EVENT_TYPE_CHMOD",
                "full EVENT_TYPE_WRITE",
            ]
        );
    }
}
