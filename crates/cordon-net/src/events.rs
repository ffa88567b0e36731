//! The decision log: every allow/deny becomes one [`NetworkEvent`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use cordon_policy::network::Verdict;
use cordon_policy::NetworkEvent;

use crate::Shared;

/// Longest host string an event carries (client input is untrusted).
const MAX_HOST_CHARS: usize = 256;

struct Entry {
    event: NetworkEvent,
    /// Byte counter of a connection still open.
    live: Option<Arc<AtomicU64>>,
}

pub(crate) struct EventLog {
    max: usize,
    entries: Vec<Entry>,
    dropped: u64,
}

impl EventLog {
    pub fn new(max: usize) -> EventLog {
        EventLog {
            max,
            entries: Vec::new(),
            dropped: 0,
        }
    }

    fn push(&mut self, event: NetworkEvent, live: Option<Arc<AtomicU64>>) -> Option<usize> {
        if self.entries.len() >= self.max {
            self.dropped += 1;
            return None;
        }
        self.entries.push(Entry { event, live });
        Some(self.entries.len() - 1)
    }
}

/// Every event so far, live byte counts read now; a last summary event if the log overflowed.
pub(crate) fn snapshot(shared: &Shared) -> Vec<NetworkEvent> {
    let log = match shared.log.lock() {
        Ok(l) => l,
        Err(poisoned) => poisoned.into_inner(),
    };
    let mut out: Vec<NetworkEvent> = log
        .entries
        .iter()
        .map(|e| {
            let mut ev = e.event.clone();
            if let Some(live) = &e.live {
                ev.bytes = live.load(Ordering::Acquire);
            }
            ev
        })
        .collect();
    if log.dropped > 0 {
        out.push(NetworkEvent {
            time_ms: now_ms(),
            host: String::new(),
            port: 0,
            verdict: Verdict::Deny.as_str().to_string(),
            reason: format!(
                "{} further decisions not recorded: event log full",
                log.dropped
            ),
            bytes: 0,
        });
    }
    out
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Client-supplied text made safe for a log line: printable ASCII kept, the rest escaped, cut
/// to a bounded length.
pub(crate) fn sanitize(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if out.len() >= MAX_HOST_CHARS {
            out.push('…');
            break;
        }
        if c.is_ascii_graphic() {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    out
}

enum State {
    /// No request seen yet: nothing to record.
    Empty,
    /// A decision that is not final yet (e.g. a tunnel waiting for its ClientHello).
    Pending(Verdict, String),
    /// Allowed and relaying; the log entry is updated when the connection ends.
    Live {
        reason: String,
        slot: Option<usize>,
    },
    Done,
}

/// The decision record of one client connection. Recorded at the latest when dropped — also
/// when the proxy shuts down and drops the task that owns it.
pub(crate) struct Record {
    shared: Arc<Shared>,
    time_ms: u64,
    host: String,
    port: u16,
    state: State,
    notes: Vec<String>,
    pub bytes: Arc<AtomicU64>,
}

impl Record {
    pub fn new(shared: Arc<Shared>) -> Record {
        Record {
            shared,
            time_ms: now_ms(),
            host: String::new(),
            port: 0,
            state: State::Empty,
            notes: Vec::new(),
            bytes: Arc::new(AtomicU64::new(0)),
        }
    }

    /// What the client asked for, as it wrote it.
    pub fn target(&mut self, host: &str, port: u16) {
        self.host = sanitize(host);
        self.port = port;
        self.time_ms = now_ms();
    }

    /// A final denial, recorded now.
    pub fn deny(&mut self, reason: impl Into<String>) {
        self.state = State::Pending(Verdict::Deny, reason.into());
        self.finish();
    }

    /// A provisional decision, recorded as is if the connection ends before [`Record::allow`]
    /// or [`Record::deny`].
    pub fn pending(&mut self, verdict: Verdict, reason: impl Into<String>) {
        self.state = State::Pending(verdict, reason.into());
    }

    /// Allowed and relaying from now on: visible in snapshots with live byte counts.
    pub fn allow(&mut self, reason: impl Into<String>) {
        let reason = reason.into();
        let event = self.event(Verdict::Allow, reason.clone());
        let slot = lock(&self.shared).push(event, Some(self.bytes.clone()));
        self.state = State::Live { reason, slot };
    }

    /// Something about how the connection ended, appended to the reason.
    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    fn event(&self, verdict: Verdict, reason: String) -> NetworkEvent {
        NetworkEvent {
            time_ms: self.time_ms,
            host: self.host.clone(),
            port: self.port,
            verdict: verdict.as_str().to_string(),
            reason,
            bytes: self.bytes.load(Ordering::Acquire),
        }
    }

    fn with_notes(&self, reason: String) -> String {
        if self.notes.is_empty() {
            reason
        } else {
            format!("{reason}; {}", self.notes.join("; "))
        }
    }

    /// Record the final event (idempotent).
    pub fn finish(&mut self) {
        let event = match std::mem::replace(&mut self.state, State::Done) {
            State::Empty | State::Done => return,
            State::Pending(verdict, reason) => {
                let event = self.event(verdict, self.with_notes(reason));
                lock(&self.shared).push(event.clone(), None);
                event
            }
            State::Live { reason, slot } => {
                let event = self.event(Verdict::Allow, self.with_notes(reason));
                let mut log = lock(&self.shared);
                if let Some(entry) = slot.and_then(|i| log.entries.get_mut(i)) {
                    entry.event = event.clone();
                    entry.live = None;
                }
                event
            }
        };
        if let Some(callback) = &self.shared.on_event {
            callback(&event);
        }
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        self.finish();
    }
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, EventLog> {
    match shared.log.lock() {
        Ok(l) => l,
        Err(poisoned) => poisoned.into_inner(),
    }
}
