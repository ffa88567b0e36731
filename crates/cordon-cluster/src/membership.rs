//! What the router knows of the cluster: the latest view streamed by the membership process
//! (`python -m cordon_sdk.ray.cli membership`), one JSON object per line, which asks Ray which
//! nodes are alive and the cluster's control actor where each node's cordon listens. The
//! process is restarted when it exits; until a new view arrives the last one stands.
//!
//! Threat model: the membership process is trusted (it runs as the router's user and speaks
//! for Ray); a line it cannot parse is skipped, never half-applied.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::AsyncBufReadExt;
use tokio::sync::watch;

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

/// Runs `command` (the membership process) for ever, restarting it a second after it exits,
/// and publishes each view it prints.
pub fn follow(command: Vec<OsString>) -> watch::Receiver<Arc<View>> {
    let (tx, rx) = watch::channel(Arc::new(View::default()));
    tokio::spawn(async move {
        loop {
            if let Err(e) = run_once(&command, &tx).await {
                eprintln!("cordon cluster: membership: {e}");
            }
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    rx
}

async fn run_once(command: &[OsString], tx: &watch::Sender<Arc<View>>) -> std::io::Result<()> {
    let (prog, args) = command
        .split_first()
        .ok_or_else(|| std::io::Error::other("no membership command"))?;
    let mut child = tokio::process::Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let out = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("membership: no stdout"))?;
    let mut lines = tokio::io::BufReader::new(out).lines();
    while let Some(line) = lines.next_line().await? {
        match serde_json::from_str::<View>(&line) {
            Ok(v) => {
                if tx.send(Arc::new(v)).is_err() {
                    return Ok(());
                }
            }
            Err(e) => eprintln!("cordon cluster: membership: skipped a line: {e}"),
        }
    }
    let status = child.wait().await?;
    Err(std::io::Error::other(format!(
        "membership process ended ({status})"
    )))
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
}
