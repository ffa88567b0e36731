//! JSON-RPC framing in front of rmcp. rmcp's stdio transport drops what it cannot parse
//! (garbage, invalid UTF-8, `NaN`) without a word, drops an over-long line silently (the
//! client waits forever), answers invalid requests without `"id": null`, and hands a known
//! method with malformed params to the catch-all "method not found". Here every message is
//! classified first: what rmcp can use passes on, everything else is answered with the error
//! JSON-RPC 2.0 names for it — over stdio (one message per line) and over HTTP (`/mcp`).

use std::future::Future;
use std::sync::Arc;

use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// The largest message accepted, on stdio and over HTTP.
pub const MAX_MESSAGE: usize = 16 << 20;

/// How much of an over-long message is kept to find its id.
const PEEK: usize = 64 << 10;

pub const PARSE_ERROR: i32 = -32700;
pub const INVALID_REQUEST: i32 = -32600;
pub const INVALID_PARAMS: i32 = -32602;

/// Methods rmcp implements: one of them arriving as rmcp's catch-all `CustomRequest` means
/// its params did not fit (rmcp would answer "method not found").
fn is_known_method(m: &str) -> bool {
    use rmcp::model::*;
    [
        InitializeResultMethod::VALUE,
        PingRequestMethod::VALUE,
        DiscoverRequestMethod::VALUE,
        CompleteRequestMethod::VALUE,
        SetLevelRequestMethod::VALUE,
        GetPromptRequestMethod::VALUE,
        ListPromptsRequestMethod::VALUE,
        ListResourcesRequestMethod::VALUE,
        ListResourceTemplatesRequestMethod::VALUE,
        ReadResourceRequestMethod::VALUE,
        SubscriptionsListenRequestMethod::VALUE,
        SubscribeRequestMethod::VALUE,
        UnsubscribeRequestMethod::VALUE,
        CallToolRequestMethod::VALUE,
        ListToolsRequestMethod::VALUE,
        GetTaskMethod::VALUE,
        UpdateTaskMethod::VALUE,
        CancelTaskMethod::VALUE,
        ListSkillsRequestMethod::VALUE,
        GetSkillRequestMethod::VALUE,
        ReadResourceDirectoryRequestMethod::VALUE,
    ]
    .contains(&m)
}

/// What to do with one incoming message.
#[derive(Debug)]
pub enum Verdict {
    /// A message rmcp can use.
    Pass(Box<ClientJsonRpcMessage>),
    /// Unusable: `error` is the JSON-RPC error response. `answer` is false for a notification
    /// (JSON-RPC never answers one on a stream; over HTTP the status code carries the refusal).
    Reject { error: Value, answer: bool },
    /// Nothing at all (an empty line between messages).
    Blank,
}

/// A JSON-RPC error response; `id` is `null` when the message's id could not be read.
pub fn error_response(id: Option<Value>, code: i32, message: impl Into<String>) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(Value::Null),
        "error": {"code": code, "message": message.into()},
    })
}

fn reject(id: Option<Value>, code: i32, message: impl Into<String>) -> Verdict {
    Verdict::Reject {
        error: error_response(id, code, message),
        answer: true,
    }
}

/// An id MCP allows: a string or an integer (never null).
fn usable_id(v: &Value) -> bool {
    v.is_string() || v.is_i64() || v.is_u64()
}

/// Classifies one message (a line without its newline, or an HTTP body).
pub fn classify(bytes: &[u8]) -> Verdict {
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            return reject(
                None,
                PARSE_ERROR,
                format!(
                    "Parse error: the message is not valid UTF-8 (at byte {})",
                    e.valid_up_to()
                ),
            )
        }
    };
    if text.trim().is_empty() {
        return Verdict::Blank;
    }
    // serde_json refuses NaN and Infinity, which JSON does not have.
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return reject(None, PARSE_ERROR, format!("Parse error: {e}")),
    };
    let obj = match value {
        Value::Object(o) => o,
        Value::Array(a) if a.is_empty() => {
            return reject(None, INVALID_REQUEST, "Invalid Request: an empty batch")
        }
        Value::Array(_) => {
            return reject(
                None,
                INVALID_REQUEST,
                "Invalid Request: batches are not supported (MCP removed them in protocol \
                 2025-06-18); send one message at a time",
            )
        }
        _ => {
            return reject(
                None,
                INVALID_REQUEST,
                "Invalid Request: a message must be a JSON object",
            )
        }
    };
    classify_object(obj)
}

fn classify_object(obj: Map<String, Value>) -> Verdict {
    let raw_id = obj.get("id").cloned();
    let id = raw_id.clone().filter(usable_id);
    if raw_id.is_some() && id.is_none() {
        return reject(
            None,
            INVALID_REQUEST,
            "Invalid Request: id must be a string or an integer",
        );
    }
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return reject(
            id,
            INVALID_REQUEST,
            "Invalid Request: jsonrpc must be \"2.0\"",
        );
    }
    let method = match obj.get("method") {
        Some(Value::String(m)) => m.clone(),
        Some(_) => {
            return reject(
                id,
                INVALID_REQUEST,
                "Invalid Request: method must be a string",
            )
        }
        None if id.is_some() && (obj.contains_key("result") || obj.contains_key("error")) => {
            // A response to one of our requests: rmcp matches it, or ignores it.
            return match serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(obj)) {
                Ok(m) => Verdict::Pass(Box::new(m)),
                Err(e) => Verdict::Reject {
                    error: error_response(id, INVALID_REQUEST, format!("Invalid Request: {e}")),
                    answer: false,
                },
            };
        }
        None => return reject(id, INVALID_REQUEST, "Invalid Request: no method"),
    };
    let is_request = id.is_some();
    if let Some(p) = obj.get("params") {
        if !(p.is_object() || p.is_array()) {
            return Verdict::Reject {
                error: error_response(
                    id,
                    INVALID_REQUEST,
                    "Invalid Request: params must be an object or an array",
                ),
                answer: is_request,
            };
        }
    }
    let params = obj.get("params").cloned();
    match serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(obj)) {
        Ok(JsonRpcMessage::Request(r))
            if matches!(&r.request, ClientRequest::CustomRequest(_))
                && is_known_method(&method) =>
        {
            reject(
                id,
                INVALID_PARAMS,
                format!(
                    "Invalid params for '{method}'{}",
                    params_problem(&method, params).map_or(String::new(), |e| format!(": {e}"))
                ),
            )
        }
        Ok(m) => Verdict::Pass(Box::new(m)),
        Err(e) => {
            let code = if is_known_method(&method) {
                INVALID_PARAMS
            } else {
                INVALID_REQUEST
            };
            Verdict::Reject {
                error: error_response(id, code, format!("Invalid Request: {e}")),
                answer: is_request,
            }
        }
    }
}

/// Why the params of the most used methods do not fit (rmcp's catch-all hides it).
fn params_problem(method: &str, params: Option<Value>) -> Option<String> {
    use rmcp::model::*;
    let params = params.unwrap_or(Value::Null);
    let err = match method {
        m if m == CallToolRequestMethod::VALUE => {
            serde_json::from_value::<CallToolRequestParams>(params).err()
        }
        m if m == InitializeResultMethod::VALUE => {
            serde_json::from_value::<InitializeRequestParams>(params).err()
        }
        _ => None,
    };
    err.map(|e| e.to_string())
}

/// The top-level `"id"` of a JSON object whose text begins with `prefix` (cut anywhere), if
/// it is there and usable — how an over-long message is answered with its own id without
/// reading it all. Keys and values before the id are skipped; nested ones are not searched.
pub fn peek_id(prefix: &[u8]) -> Option<Value> {
    let mut s = Scan { b: prefix, i: 0 };
    s.ws();
    s.eat(b'{')?;
    loop {
        s.ws();
        let key_at = s.i;
        s.string()?;
        let key = serde_json::from_slice::<String>(&prefix[key_at..s.i]).ok()?;
        s.ws();
        s.eat(b':')?;
        s.ws();
        let value_at = s.i;
        s.value()?;
        if key == "id" {
            let v = serde_json::from_slice::<Value>(&prefix[value_at..s.i]).ok()?;
            return usable_id(&v).then_some(v);
        }
        s.ws();
        s.eat(b',')?;
    }
}

/// A forward-only scanner over possibly cut JSON text: every step is `None` at the cut.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }
    fn string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                b'\\' => self.i += 2,
                _ => self.i += 1,
            }
        }
    }
    fn value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            _ => {
                let start = self.i;
                while !matches!(
                    self.peek()?,
                    b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n'
                ) {
                    self.i += 1;
                }
                (self.i > start).then_some(())
            }
        }
    }
}

/// The error for a message of `size` bytes, over `limit`.
pub fn too_large(prefix: &[u8], size: usize, limit: usize) -> Value {
    let human = if limit.is_multiple_of(1 << 20) {
        format!("{} MiB ({limit} bytes)", limit >> 20)
    } else {
        format!("{limit} bytes")
    };
    error_response(
        peek_id(prefix),
        INVALID_REQUEST,
        format!(
            "Invalid Request: the message is {size} bytes, over the limit of {human} per message"
        ),
    )
}

/// Serialised server message. rmcp leaves out the id of an error whose request it could not
/// read (MCP 2026-07-28); JSON-RPC 2.0 wants `"id": null`, and older clients need it.
pub fn encode(item: &rmcp::model::ServerJsonRpcMessage) -> serde_json::Result<Vec<u8>> {
    if let JsonRpcMessage::Error(e) = item {
        if e.id.is_none() {
            let mut v = serde_json::to_value(e)?;
            if let Some(o) = v.as_object_mut() {
                o.insert("id".into(), Value::Null);
            }
            return serde_json::to_vec(&v);
        }
    }
    serde_json::to_vec(item)
}

/// Writes whole lines; shared by rmcp's replies and the framing's own.
#[derive(Clone)]
pub struct LineWriter(Arc<tokio::sync::Mutex<Box<dyn AsyncWrite + Send + Unpin>>>);

impl LineWriter {
    pub fn new(w: impl AsyncWrite + Send + Unpin + 'static) -> LineWriter {
        LineWriter(Arc::new(tokio::sync::Mutex::new(Box::new(w))))
    }

    pub async fn line(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut w = self.0.lock().await;
        w.write_all(bytes).await?;
        w.write_all(b"\n").await?;
        w.flush().await
    }
}

/// MCP over a byte stream, one message per line (stdio).
pub struct LineTransport {
    rx: mpsc::Receiver<ClientJsonRpcMessage>,
    out: LineWriter,
    reader: tokio::task::JoinHandle<()>,
}

impl LineTransport {
    pub fn new(
        input: impl AsyncRead + Send + Unpin + 'static,
        output: impl AsyncWrite + Send + Unpin + 'static,
    ) -> LineTransport {
        let out = LineWriter::new(output);
        // Small: reading stops while rmcp is behind, instead of queueing without bound.
        let (tx, rx) = mpsc::channel(16);
        let reader = tokio::spawn(read_lines(input, tx, out.clone(), MAX_MESSAGE));
        LineTransport { rx, out, reader }
    }
}

impl rmcp::transport::Transport<rmcp::RoleServer> for LineTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: rmcp::model::ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let out = self.out.clone();
        async move { out.line(&encode(&item)?).await }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ClientJsonRpcMessage>> + Send {
        self.rx.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        Ok(())
    }
}

/// A line longer than the limit, being skipped up to its newline.
struct Skipping {
    prefix: Vec<u8>,
    size: usize,
}

/// Splits `input` into lines of at most `limit` bytes: good messages go to `tx`, every other
/// line that deserves an answer is answered on `out`. An over-long line is never held in
/// memory: its first bytes are kept (for its id), the rest is counted and dropped.
pub async fn read_lines(
    mut input: impl AsyncRead + Unpin,
    tx: mpsc::Sender<ClientJsonRpcMessage>,
    out: LineWriter,
    limit: usize,
) {
    let mut line: Vec<u8> = Vec::new();
    let mut skipping: Option<Skipping> = None;
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = match input.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let mut data = &chunk[..n];
        while !data.is_empty() {
            let (part, rest, ends) = match data.iter().position(|&b| b == b'\n') {
                Some(p) => (&data[..p], &data[p + 1..], true),
                None => (data, &[][..], false),
            };
            data = rest;
            if let Some(s) = skipping.as_mut() {
                s.size += part.len();
            } else if line.len() + part.len() > limit {
                let mut prefix = std::mem::take(&mut line);
                let size = prefix.len() + part.len();
                prefix
                    .extend_from_slice(&part[..part.len().min(PEEK.saturating_sub(prefix.len()))]);
                prefix.truncate(PEEK);
                skipping = Some(Skipping { prefix, size });
            } else {
                line.extend_from_slice(part);
            }
            if ends {
                let go_on = match skipping.take() {
                    Some(s) => answer(&out, &too_large(&s.prefix, s.size, limit)).await,
                    None => handle(&std::mem::take(&mut line), &tx, &out).await,
                };
                if !go_on {
                    return;
                }
            }
        }
    }
    // The input ended; a last line without its newline still counts.
    match skipping {
        Some(s) => {
            answer(&out, &too_large(&s.prefix, s.size, limit)).await;
        }
        None => {
            handle(&line, &tx, &out).await;
        }
    }
}

/// False once nobody listens any more.
async fn handle(line: &[u8], tx: &mpsc::Sender<ClientJsonRpcMessage>, out: &LineWriter) -> bool {
    match classify(line) {
        Verdict::Pass(m) => tx.send(*m).await.is_ok(),
        Verdict::Reject {
            error,
            answer: true,
        } => answer(out, &error).await,
        Verdict::Reject { answer: false, .. } | Verdict::Blank => true,
    }
}

async fn answer(out: &LineWriter, error: &Value) -> bool {
    match serde_json::to_vec(error) {
        Ok(b) => out.line(&b).await.is_ok(),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code_and_id(v: &Verdict) -> (i32, Value, bool) {
        match v {
            Verdict::Reject { error, answer } => (
                error["error"]["code"].as_i64().unwrap_or(0) as i32,
                error["id"].clone(),
                *answer,
            ),
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn each_unusable_message_gets_the_error_json_rpc_names() {
        let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
        let table: &[(&[u8], i32, Value, bool)] = &[
            (b"garbage", PARSE_ERROR, Value::Null, true),
            (b"\xff\xfe{}", PARSE_ERROR, Value::Null, true),
            (
                br#"{"jsonrpc":"2.0","id":5,"method":"ping","params":{"x":NaN}}"#,
                PARSE_ERROR,
                Value::Null,
                true,
            ),
            (br#"{"jsonrpc":"2.0","id":5"#, PARSE_ERROR, Value::Null, true),
            (
                br#"{"jsonrpc":"1.0","id":6,"method":"ping"}"#,
                INVALID_REQUEST,
                json!(6),
                true,
            ),
            (br#"{"id":"s","method":"ping"}"#, INVALID_REQUEST, json!("s"), true),
            (
                br#"[{"jsonrpc":"2.0","id":7,"method":"ping"}]"#,
                INVALID_REQUEST,
                Value::Null,
                true,
            ),
            (b"[]", INVALID_REQUEST, Value::Null, true),
            (b"42", INVALID_REQUEST, Value::Null, true),
            (br#"{"jsonrpc":"2.0","id":8}"#, INVALID_REQUEST, json!(8), true),
            (
                br#"{"jsonrpc":"2.0","id":9,"method":7}"#,
                INVALID_REQUEST,
                json!(9),
                true,
            ),
            (
                br#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
                INVALID_REQUEST,
                Value::Null,
                true,
            ),
            (
                br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                INVALID_REQUEST,
                Value::Null,
                true,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
                INVALID_REQUEST,
                Value::Null,
                true,
            ),
            (
                br#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"nome":"x"}}"#,
                INVALID_PARAMS,
                json!(10),
                true,
            ),
            (
                br#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":5}"#,
                INVALID_REQUEST,
                json!(11),
                true,
            ),
            (
                br#"{"jsonrpc":"2.0","id":12,"method":"initialize","params":{"protocolVersion":3}}"#,
                INVALID_PARAMS,
                json!(12),
                true,
            ),
            // A notification's problems are never answered on a stream.
            (
                br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":7}"#,
                INVALID_REQUEST,
                Value::Null,
                false,
            ),
        ];
        for (line, code, id, answered) in table {
            let v = classify(line);
            let got = code_and_id(&v);
            assert_eq!(
                got,
                (*code, id.clone(), *answered),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        assert!(matches!(classify(init.as_bytes()), Verdict::Pass(_)));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":3,"method":"no/such/method"}"#),
            Verdict::Pass(_)
        ));
        assert!(matches!(classify(b"  \r"), Verdict::Blank));
    }

    #[test]
    fn the_id_of_a_cut_message_is_found_where_it_is_readable() {
        let cases: &[(&str, Option<Value>)] = &[
            (
                r#"{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"argu"#,
                Some(json!(41)),
            ),
            (r#" { "id" : "a\"b" , "params": {"#, Some(json!("a\"b"))),
            (
                r#"{"jsonrpc":"2.0","params":{"id":5,"x":[1,{"y":"}"}]},"id":7,"#,
                Some(json!(7)),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"x","params":{"id":5,"content":"xxxx"#,
                None,
            ),
            (r#"{"jsonrpc":"2.0","id":null,"#, None),
            (r#"{"jsonrpc":"2.0","id":12"#, None),
            (r#"["id",1]"#, None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(&peek_id(text.as_bytes()), want, "{text}");
        }
    }

    /// Runs `input` through the line reader; returns what passed on and what was answered.
    async fn run(input: Vec<u8>, limit: usize) -> (Vec<ClientJsonRpcMessage>, Vec<Value>) {
        let (w, mut r) = tokio::io::duplex(1 << 20);
        let (tx, mut rx) = mpsc::channel(100);
        read_lines(&input[..], tx, LineWriter::new(w), limit).await;
        let mut passed = Vec::new();
        while let Ok(m) = rx.try_recv() {
            passed.push(m);
        }
        let mut out = Vec::new();
        let _ = tokio::time::timeout(
            std::time::Duration::from_millis(200),
            r.read_to_end(&mut out),
        )
        .await;
        let answers = out
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap_or(Value::Null))
            .collect();
        (passed, answers)
    }

    #[tokio::test]
    async fn an_over_long_line_is_answered_with_the_limit_and_the_next_line_still_works() {
        let limit = 1000;
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{{"name":"write_file","arguments":{{"path":"a","content":"{}"}}}}}}"#,
            "x".repeat(5000)
        );
        let mut input = big.into_bytes();
        input.push(b'\n');
        input.extend_from_slice(br#"{"jsonrpc":"2.0","id":78,"method":"ping"}"#);
        input.extend_from_slice(b"\n");
        input.extend_from_slice(b"not json\n");
        // The last line has no newline: it still counts.
        input.extend_from_slice(&vec![b'y'; 3000]);
        let (passed, answers) = run(input, limit).await;
        assert_eq!(passed.len(), 1, "{passed:?}");
        assert_eq!(answers.len(), 3, "{answers:?}");
        assert_eq!(answers[0]["id"], json!(77));
        assert_eq!(answers[0]["error"]["code"], json!(INVALID_REQUEST));
        let msg = answers[0]["error"]["message"].as_str().unwrap_or("");
        assert!(
            msg.contains("limit of 1000 bytes") && msg.contains("is 51"),
            "{msg}"
        );
        assert_eq!(answers[1]["error"]["code"], json!(PARSE_ERROR));
        assert_eq!(answers[1]["id"], Value::Null);
        assert_eq!(answers[2]["id"], Value::Null);
        assert!(answers[2]["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("3000 bytes"));
    }
}
