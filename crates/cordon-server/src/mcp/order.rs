//! Tool calls of one session run one at a time, in the order the session received them.
//!
//! rmcp reads a session's messages in order but runs each request in a task of its own, so two
//! calls read one after the other may start in either order: a `read_file` sent right after a
//! `write_file` could run first. [`Ordered`] wraps a session's transport and, as each tool call
//! comes out of it, gives the call a [`Turn`]: a link in a chain that the call's handler waits
//! on before it touches the sandbox and releases when it is done. Order is fixed at receipt,
//! where it is still known.
//!
//! Over HTTP, "received" needs more: each request is its own POST, and two POSTs a client sends
//! back to back race through the network and the server's middleware. Clients number their
//! requests with a counter, so a session's HTTP transport also puts tool calls back into id
//! order: a call whose id is ahead of the lowest id not yet seen waits (at most [`HOLD`]) for
//! the ones before it. A client whose ids turn out to have gaps is not made to wait again.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ClientJsonRpcMessage, ClientRequest, GetExtensions, JsonRpcMessage, RequestId};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The longest a call waits for a lower-numbered request that has not arrived. On a loaded host
/// a large POST sent first (a `write_file` of a few hundred KB) was seen arriving more than 1 s
/// after the small one sent right behind it, and the read then ran first; a client whose ids
/// really have gaps pays this wait once per session (it is then marked sparse), so it is kept
/// generous.
pub const HOLD: Duration = Duration::from_millis(3000);

/// Ids further ahead than this are not from one counter: no waiting for them.
const WINDOW: i64 = 64;

/// A tool call's place in its session's chain (in the request's extensions).
#[derive(Clone)]
pub struct Turn(Arc<Mutex<Option<Link>>>);

struct Link {
    /// Resolves (or errs: the earlier call's turn was dropped) when the earlier call is done.
    after: Option<oneshot::Receiver<()>>,
    /// Dropped when this call is done: the next one may start.
    done: Option<oneshot::Sender<()>>,
}

impl Drop for Link {
    /// A call dropped while still waiting must not let the next one overtake the one before:
    /// its release is passed on only once the earlier call is done.
    fn drop(&mut self) {
        if let (Some(after), Some(done)) = (self.after.take(), self.done.take()) {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let _ = after.await;
                    drop(done);
                });
            }
        }
    }
}

/// Held while a call runs; dropping it lets the next call of the session start.
pub struct Running {
    _done: Option<oneshot::Sender<()>>,
}

impl Turn {
    fn new(after: Option<oneshot::Receiver<()>>, done: oneshot::Sender<()>) -> Turn {
        Turn(Arc::new(Mutex::new(Some(Link {
            after,
            done: Some(done),
        }))))
    }

    /// Waits until every call the session received before this one has finished.
    pub async fn wait(&self) -> Running {
        let link = self.0.lock().ok().and_then(|mut l| l.take());
        let Some(mut link) = link else {
            return Running { _done: None };
        };
        if let Some(after) = link.after.as_mut() {
            let _ = after.await;
        }
        link.after = None;
        Running {
            _done: link.done.take(),
        }
    }
}

/// Lowest-id-first release of a session's tool calls (HTTP).
#[derive(Default)]
struct Reorder {
    /// The lowest numeric request id not received yet.
    next: Option<i64>,
    /// Ids received above `next`.
    seen: BTreeSet<i64>,
    /// Tool calls waiting for lower ids, with when to stop waiting.
    held: BTreeMap<i64, (ClientJsonRpcMessage, Instant)>,
    /// Set when a missing id never came: this client's ids have gaps (a counter shared with
    /// other sessions, say), so waiting would only slow every call down.
    sparse: bool,
}

impl Reorder {
    fn accept(
        &mut self,
        m: ClientJsonRpcMessage,
        now: Instant,
        ready: &mut VecDeque<ClientJsonRpcMessage>,
    ) {
        let (n, call) = match &m {
            JsonRpcMessage::Request(r) => match &r.id {
                RequestId::Number(n) => (*n, is_call(&r.request)),
                RequestId::String(_) => return ready.push_back(m),
            },
            _ => return ready.push_back(m),
        };
        let next = *self.next.get_or_insert(n);
        if n < next {
            // Late, or a counter that went back: nothing to wait for.
            return ready.push_back(m);
        }
        if n - next > WINDOW {
            // Not one counter (or a jump): start over from here.
            self.give_up_below(n, ready);
        }
        self.seen.insert(n);
        if call && Some(n) != self.next && !self.sparse {
            self.held.insert(n, (m, now + HOLD));
        } else {
            ready.push_back(m);
        }
        self.advance(ready);
    }

    fn advance(&mut self, ready: &mut VecDeque<ClientJsonRpcMessage>) {
        let Some(mut next) = self.next else { return };
        while self.seen.remove(&next) {
            next += 1;
        }
        self.next = Some(next);
        while let Some(entry) = self.held.first_entry() {
            if *entry.key() >= next {
                break;
            }
            ready.push_back(entry.remove().0);
        }
    }

    /// Stops waiting for any id below `n`.
    fn give_up_below(&mut self, n: i64, ready: &mut VecDeque<ClientJsonRpcMessage>) {
        if self.next.is_some_and(|next| next >= n) {
            return;
        }
        self.next = Some(n);
        self.seen = self.seen.split_off(&n);
        while let Some(entry) = self.held.first_entry() {
            if *entry.key() >= n {
                break;
            }
            ready.push_back(entry.remove().0);
        }
    }

    fn deadline(&self) -> Option<Instant> {
        self.held.values().map(|(_, d)| *d).min()
    }

    fn expire(&mut self, now: Instant, ready: &mut VecDeque<ClientJsonRpcMessage>) {
        let due = self
            .held
            .iter()
            .filter(|(_, (_, d))| *d <= now)
            .map(|(k, _)| *k)
            .max();
        if let Some(k) = due {
            self.sparse = true;
            self.give_up_below(k, ready);
            self.advance(ready);
        }
    }

    fn flush(&mut self, ready: &mut VecDeque<ClientJsonRpcMessage>) {
        while let Some((_, (m, _))) = self.held.pop_first() {
            ready.push_back(m);
        }
    }
}

fn is_call(r: &ClientRequest) -> bool {
    matches!(r, ClientRequest::CallToolRequest(_))
}

/// A session's transport that hands out [`Turn`]s (and, with `reorder`, restores id order).
pub struct Ordered<T> {
    inner: T,
    /// Released when the session's latest call is done.
    tail: Option<oneshot::Receiver<()>>,
    reorder: Option<Reorder>,
    ready: VecDeque<ClientJsonRpcMessage>,
    ended: bool,
}

impl<T> Ordered<T> {
    pub fn new(inner: T, reorder: bool) -> Ordered<T> {
        Ordered {
            inner,
            tail: None,
            reorder: reorder.then(Reorder::default),
            ready: VecDeque::new(),
            ended: false,
        }
    }

    fn stamp(&mut self, mut m: ClientJsonRpcMessage) -> ClientJsonRpcMessage {
        if let JsonRpcMessage::Request(r) = &mut m {
            if is_call(&r.request) {
                let (done, next) = oneshot::channel();
                let after = self.tail.replace(next);
                r.request.extensions_mut().insert(Turn::new(after, done));
            }
        }
        m
    }
}

enum Event {
    Message(Option<Box<ClientJsonRpcMessage>>),
    Deadline,
}

impl<T> rmcp::transport::Transport<rmcp::RoleServer> for Ordered<T>
where
    T: rmcp::transport::Transport<rmcp::RoleServer>,
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::model::ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    /// Cancel-safe (rmcp drops it whenever another event comes first): every change of state
    /// happens between awaits, and the inner receive is itself cancel-safe.
    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            if let Some(m) = self.ready.pop_front() {
                return Some(self.stamp(m));
            }
            if self.ended {
                return None;
            }
            let deadline = self.reorder.as_ref().and_then(Reorder::deadline);
            let event = tokio::select! {
                m = self.inner.receive() => Event::Message(m.map(Box::new)),
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => Event::Deadline,
            };
            let now = Instant::now();
            match (event, self.reorder.as_mut()) {
                (Event::Message(Some(m)), Some(r)) => r.accept(*m, now, &mut self.ready),
                (Event::Message(Some(m)), None) => self.ready.push_back(*m),
                (Event::Message(None), r) => {
                    if let Some(r) = r {
                        r.flush(&mut self.ready);
                    }
                    self.ended = true;
                }
                (Event::Deadline, Some(r)) => r.expire(now, &mut self.ready),
                (Event::Deadline, None) => {}
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::transport::Transport;
    use serde_json::json;

    fn msg(id: i64, method: &str) -> ClientJsonRpcMessage {
        let params = if method == "tools/call" {
            json!({"name": "read_file", "arguments": {"path": "a"}})
        } else {
            json!({})
        };
        serde_json::from_value(
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn id_of(m: &ClientJsonRpcMessage) -> i64 {
        match m {
            JsonRpcMessage::Request(r) => match r.id {
                RequestId::Number(n) => n,
                RequestId::String(_) => -1,
            },
            _ => -2,
        }
    }

    /// A transport fed from a channel, standing in for the session's HTTP worker.
    struct Feed(tokio::sync::mpsc::UnboundedReceiver<ClientJsonRpcMessage>);

    impl Transport<rmcp::RoleServer> for Feed {
        type Error = std::io::Error;
        fn send(
            &mut self,
            _: rmcp::model::ServerJsonRpcMessage,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
            std::future::ready(Ok(()))
        }
        fn receive(&mut self) -> impl Future<Output = Option<ClientJsonRpcMessage>> + Send {
            self.0.recv()
        }
        async fn close(&mut self) -> Result<(), Self::Error> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn calls_come_out_in_id_order_and_a_gap_is_waited_for_only_so_long() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut t = Ordered::new(Feed(rx), true);
        let send = |id, m: &str| tx.send(msg(id, m)).unwrap_or_else(|e| panic!("{e}"));
        send(0, "initialize");
        assert_eq!(t.receive().await.as_ref().map(id_of), Some(0));
        // 2 overtook 1: it waits for 1, a non-call (3) does not wait.
        send(2, "tools/call");
        send(3, "tools/list");
        assert_eq!(t.receive().await.as_ref().map(id_of), Some(3));
        send(1, "tools/call");
        assert_eq!(t.receive().await.as_ref().map(id_of), Some(1));
        assert_eq!(t.receive().await.as_ref().map(id_of), Some(2));
        // 5 arrives without 4 ever coming: released after HOLD.
        send(5, "tools/call");
        let t0 = Instant::now();
        assert_eq!(t.receive().await.as_ref().map(id_of), Some(5));
        assert!(t0.elapsed() >= HOLD, "{:?}", t0.elapsed());
        // 4, late, is not held back.
        send(4, "tools/call");
        assert_eq!(t.receive().await.as_ref().map(id_of), Some(4));
        // This client's ids have gaps: later gaps are not waited for.
        send(8, "tools/call");
        let t0 = Instant::now();
        assert_eq!(t.receive().await.as_ref().map(id_of), Some(8));
        assert!(t0.elapsed() < HOLD);
        // Far jumps are not waited for.
        send(1000, "tools/call");
        let t0 = Instant::now();
        assert_eq!(t.receive().await.as_ref().map(id_of), Some(1000));
        assert!(t0.elapsed() < HOLD);
        drop(tx);
        assert!(t.receive().await.is_none());
    }

    #[tokio::test]
    async fn each_call_waits_for_the_one_received_before_it() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut t = Ordered::new(Feed(rx), false);
        for id in 0..3 {
            tx.send(msg(id, "tools/call"))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let mut turns = Vec::new();
        for _ in 0..3 {
            let m = t.receive().await;
            let turn = match m {
                Some(JsonRpcMessage::Request(mut r)) => {
                    r.request.extensions_mut().get::<Turn>().cloned()
                }
                _ => None,
            };
            turns.push(turn.unwrap_or_else(|| panic!("a tool call without a turn")));
        }
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Started last first: they must still run first to last.
        for (i, turn) in turns.into_iter().enumerate().rev() {
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                let _running = turn.wait().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                order.lock().unwrap_or_else(|e| e.into_inner()).push(i);
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        assert_eq!(
            *order.lock().unwrap_or_else(|e| e.into_inner()),
            vec![0, 1, 2]
        );
    }

    #[tokio::test]
    async fn a_call_dropped_while_waiting_does_not_let_the_next_overtake() {
        let (d0, a1) = oneshot::channel();
        let (d1, a2) = oneshot::channel();
        let (d2, _) = oneshot::channel();
        let first = Turn::new(None, d0);
        let second = Turn::new(Some(a1), d1);
        let third = Turn::new(Some(a2), d2);
        let running = first.wait().await;
        // The second call is abandoned before its turn.
        drop(second);
        let third_started = tokio::spawn(async move {
            let _r = third.wait().await;
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!third_started.is_finished(), "overtook a running call");
        drop(running);
        tokio::time::timeout(Duration::from_secs(5), third_started)
            .await
            .unwrap_or_else(|_| panic!("the chain stalled"))
            .unwrap_or_else(|e| panic!("{e}"));
    }
}
