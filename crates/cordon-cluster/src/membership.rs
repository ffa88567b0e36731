//! What the router knows of the cluster: the latest view streamed by the membership process
//! (`python -m cordon_sdk.ray.cli membership`), one JSON object per line, which asks Ray which
//! nodes are alive and the cluster's control actor where each node's cordon listens. The
//! process is restarted when it exits; until a new view arrives the last one stands. The same
//! process carries the router's calls to the cluster's control actor ([`Control`]: a key's
//! quota reservations), one JSON line each way, matched by id.
//!
//! Threat model: the membership process is trusted (it runs as the router's user and speaks
//! for Ray); a line it cannot parse is skipped, never half-applied. A call it does not answer
//! fails after [`CALL_TIMEOUT`]; a call in flight when it exits fails at once.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};

/// How long a call to the control actor may take before the router gives up on it.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// One cordon node as membership sees it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct NodeView {
    /// The node's name, the prefix of its sandboxes' ids.
    pub node: String,
    /// Where its `cordon serve` listens (`IP:PORT`).
    pub addr: String,
    /// Ray says the node is alive and its actor reported within the bound.
    pub alive: bool,
    /// Takes no new sandboxes (`cordon cluster drain`); existing ones run on.
    #[serde(default)]
    pub draining: bool,
    /// Sandboxes it may hold at once.
    #[serde(default)]
    pub slots: u32,
    /// Sandboxes it holds now (as of its last report).
    #[serde(default)]
    pub live: u32,
    /// The Ray node it runs on.
    #[serde(default)]
    pub ray_node_id: String,
}

impl NodeView {
    /// Slots left, as last reported.
    pub fn free(&self) -> u32 {
        self.slots.saturating_sub(self.live)
    }
}

/// The cluster as of one membership line.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct View {
    /// The secret the nodes demand of their routers.
    #[serde(default)]
    pub secret: String,
    #[serde(default)]
    pub nodes: Vec<NodeView>,
    /// The control actor has just (re)started: a node missing from `nodes` may only not have
    /// reported to it yet, so "no such node" is not yet an answer.
    #[serde(default)]
    pub settling: bool,
}

impl View {
    pub fn node(&self, name: &str) -> Option<&NodeView> {
        self.nodes.iter().find(|n| n.node == name)
    }
    /// Nodes that may take a new sandbox.
    pub fn eligible(&self) -> impl Iterator<Item = &NodeView> {
        self.nodes.iter().filter(|n| n.alive && !n.draining)
    }
    pub fn alive(&self) -> impl Iterator<Item = &NodeView> {
        self.nodes.iter().filter(|n| n.alive)
    }
    /// Sandboxes per node, for status.
    pub fn summary(&self) -> BTreeMap<String, (bool, u32, u32)> {
        self.nodes
            .iter()
            .map(|n| (n.node.clone(), (n.alive, n.live, n.slots)))
            .collect()
    }
}

/// A call to the control actor could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("the cluster's control actor did not answer in time")]
    Timeout,
    #[error("the membership process is gone")]
    Gone,
    #[error("the control actor failed: {0}")]
    Failed(String),
}

type Call = (Value, oneshot::Sender<Result<Value, CallError>>);

/// The router's line to the cluster's control actor (through the membership process).
#[derive(Clone)]
pub struct Control {
    calls: mpsc::Sender<Call>,
}

impl Control {
    /// Calls `op` on the control actor with `args` (an object), answering its result.
    pub async fn call(&self, op: &str, mut args: Value) -> Result<Value, CallError> {
        if let Value::Object(m) = &mut args {
            m.insert("op".into(), Value::String(op.into()));
        }
        let (tx, rx) = oneshot::channel();
        let sent = async {
            self.calls
                .send((args, tx))
                .await
                .map_err(|_| CallError::Gone)?;
            rx.await.map_err(|_| CallError::Gone)?
        };
        tokio::time::timeout(CALL_TIMEOUT, sent)
            .await
            .map_err(|_| CallError::Timeout)?
    }
}

/// Runs `command` (the membership process) for ever, restarting it a second after it exits,
/// and publishes each view it prints; the [`Control`] carries calls through it.
pub fn follow(command: Vec<OsString>) -> (watch::Receiver<Arc<View>>, Control) {
    let (tx, rx) = watch::channel(Arc::new(View::default()));
    let (calls_tx, mut calls) = mpsc::channel::<Call>(1024);
    tokio::spawn(async move {
        loop {
            if let Err(e) = run_once(&command, &tx, &mut calls).await {
                eprintln!("cordon cluster: membership: {e}");
            }
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    (rx, Control { calls: calls_tx })
}

async fn run_once(
    command: &[OsString],
    tx: &watch::Sender<Arc<View>>,
    calls: &mut mpsc::Receiver<Call>,
) -> std::io::Result<()> {
    let (prog, args) = command
        .split_first()
        .ok_or_else(|| std::io::Error::other("no membership command"))?;
    let mut child = tokio::process::Command::new(prog)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let out = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("membership: no stdout"))?;
    let mut input = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("membership: no stdin"))?;
    let mut lines = tokio::io::BufReader::new(out).lines();
    // Calls sent and not yet answered; dropped (so failed) when the process ends.
    let mut waiting: HashMap<u64, oneshot::Sender<Result<Value, CallError>>> = HashMap::new();
    let mut next_id: u64 = 0;
    loop {
        tokio::select! {
            line = lines.next_line() => {
                let Some(line) = line? else { break };
                if !apply_line(&line, tx, &mut waiting) {
                    return Ok(());
                }
            }
            Some((mut req, reply)) = calls.recv() => {
                next_id += 1;
                if let Value::Object(m) = &mut req {
                    m.insert("id".into(), next_id.into());
                }
                let mut bytes = req.to_string().into_bytes();
                bytes.push(b'\n');
                input.write_all(&bytes).await?;
                waiting.insert(next_id, reply);
            }
        }
    }
    let status = child.wait().await?;
    Err(std::io::Error::other(format!(
        "membership process ended ({status})"
    )))
}

/// One line of the membership process: an answer to a call, or a view. False when nobody
/// follows the views any more.
fn apply_line(
    line: &str,
    tx: &watch::Sender<Arc<View>>,
    waiting: &mut HashMap<u64, oneshot::Sender<Result<Value, CallError>>>,
) -> bool {
    let Ok(Value::Object(mut m)) = serde_json::from_str::<Value>(line) else {
        eprintln!("cordon cluster: membership: skipped a line that is no JSON object");
        return true;
    };
    if let Some(id) = m.get("reply").map(|v| v.as_u64()) {
        if let Some(reply) = id.and_then(|id| waiting.remove(&id)) {
            let out = match (m.remove("result"), m.remove("error")) {
                (Some(r), None) => Ok(r),
                (_, e) => Err(CallError::Failed(
                    e.and_then(|e| e.as_str().map(str::to_string))
                        .unwrap_or_default(),
                )),
            };
            let _ = reply.send(out);
        }
        return true;
    }
    match serde_json::from_value::<View>(Value::Object(m)) {
        Ok(v) => tx.send(Arc::new(v)).is_ok(),
        Err(e) => {
            eprintln!("cordon cluster: membership: skipped a line: {e}");
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_line_parses_and_says_which_nodes_take_sandboxes() {
        let v: View = serde_json::from_str(
            r#"{"secret":"s","nodes":[
                {"node":"a","addr":"127.0.0.1:1","alive":true,"slots":4,"live":1},
                {"node":"b","addr":"127.0.0.1:2","alive":true,"draining":true,"slots":4},
                {"node":"c","addr":"127.0.0.1:3","alive":false,"slots":4}]}"#,
        )
        .expect("view");
        let names: Vec<&str> = v.eligible().map(|n| n.node.as_str()).collect();
        assert_eq!(names, ["a"]);
        assert_eq!(v.node("a").map(NodeView::free), Some(3));
    }

    #[test]
    fn an_answer_to_a_call_is_never_taken_for_a_view() {
        let (tx, rx) = watch::channel(Arc::new(View::default()));
        let (reply, mut answer) = oneshot::channel();
        let mut waiting = HashMap::from([(7, reply)]);
        assert!(apply_line(
            r#"{"reply":7,"result":{"ok":true,"rid":"r"}}"#,
            &tx,
            &mut waiting
        ));
        assert!(!rx.has_changed().unwrap_or(true));
        let got = answer.try_recv().expect("answered").expect("ok");
        assert_eq!(got["rid"], "r");
        assert!(apply_line(r#"{"reply":8,"error":"x"}"#, &tx, &mut waiting));
        assert!(!rx.has_changed().unwrap_or(true));
        assert!(apply_line(
            r#"{"secret":"s","nodes":[{"node":"a","addr":"127.0.0.1:1","alive":true}]}"#,
            &tx,
            &mut waiting
        ));
        assert_eq!(rx.borrow().nodes.len(), 1);
    }
}
