//! The code interpreter's `/execute` stream and `/contexts`, over the service's code cells.
//! A context's E2B id is its cordon name, except the default context of each language (cordon's
//! `default`), whose id is the language's name; E2B lists the Python and JavaScript ones from
//! the start, before their first cell.

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::{sandbox_path, E2bError, St, HOME};
use crate::error::ApiError;
use cordon_service::interpreter::{
    normalize_language, CellEvent, CodeRequest, CodeResult, ContextInfo,
};
use cordon_service::{Caller, ContextEnd};

const DEFAULT_CONTEXT: &str = "default";

#[derive(Deserialize, Default)]
#[serde(default)]
struct ExecuteReq {
    code: Option<String>,
    context_id: Option<String>,
    language: Option<String>,
    env_vars: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NewContext {
    language: Option<String>,
    cwd: Option<String>,
}

fn parse<T: for<'de> Deserialize<'de> + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("request body: {e}")))
}

/// The languages whose default context E2B lists before it is used.
const LISTED_DEFAULTS: [&str; 2] = ["python", "javascript"];

fn e2b_id(c: &ContextInfo) -> String {
    if c.name == DEFAULT_CONTEXT {
        c.language.clone()
    } else {
        c.name.clone()
    }
}

fn context_json(c: &ContextInfo) -> Value {
    json!({"id": e2b_id(c), "language": c.language, "cwd": c.cwd})
}

/// A language's default context as it is before its first cell (no kernel yet).
fn unstarted_default(language: &str) -> ContextInfo {
    ContextInfo {
        language: language.to_string(),
        name: DEFAULT_CONTEXT.to_string(),
        execution_count: 0,
        alive: false,
        cwd: HOME.to_string(),
    }
}

fn find_context(e2b: &St, caller: &Caller, id: &str, ctx: &str) -> Result<ContextInfo, ApiError> {
    let list = e2b.st.service.list_contexts(caller, id)?;
    if let Some(c) = list.into_iter().find(|c| e2b_id(c) == ctx) {
        return Ok(c);
    }
    match normalize_language(ctx) {
        Ok(lang) if lang == ctx => Ok(unstarted_default(lang)),
        _ => Err(ApiError::not_found(format!("context '{ctx}' not found"))),
    }
}

/// One result bundle (MIME types) in E2B's field names.
fn result_line(bundle: &Value) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), json!("result"));
    let mut extra = Map::new();
    if let Some(b) = bundle.as_object() {
        for (k, v) in b {
            let name = match k.as_str() {
                "is_main_result" => "is_main_result",
                "text/plain" => "text",
                "text/html" => "html",
                "text/markdown" => "markdown",
                "image/svg+xml" => "svg",
                "image/png" => "png",
                "image/jpeg" => "jpeg",
                "application/pdf" => "pdf",
                "text/latex" => "latex",
                "application/json" => "json",
                "application/javascript" => "javascript",
                // E2B's own types: a DataFrame's columns, a chart's elements.
                "e2b/data" => "data",
                "e2b/chart" => "chart",
                _ => {
                    extra.insert(k.clone(), v.clone());
                    continue;
                }
            };
            out.insert(name.into(), v.clone());
        }
    }
    if !extra.is_empty() {
        out.insert("extra".into(), Value::Object(extra));
    }
    Value::Object(out)
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

fn error_line(name: &str, value: &str, traceback: &str) -> Value {
    json!({"type": "error", "name": name, "value": value, "traceback": traceback})
}

/// The lines a finished cell adds: an error if it ended otherwise than by finishing, its
/// execution count, and the end marker.
fn closing_lines(r: &CodeResult) -> Vec<Value> {
    let mut v = Vec::new();
    if r.error.is_none() && r.status != cordon_policy::Status::Exited {
        let status = serde_json::to_value(r.status).unwrap_or(Value::Null);
        v.push(error_line(
            "CellEnded",
            &format!(
                "the cell's kernel ended ({}); limits hit: {:?}; the context's state was lost",
                status.as_str().unwrap_or("error"),
                r.limits_hit
            ),
            "",
        ));
    }
    v.push(json!({"type": "number_of_executions", "execution_count": r.execution_count}));
    v.push(json!({"type": "end_of_execution"}));
    v
}

pub(super) async fn execute(
    State(e2b): State<St>,
    h: HeaderMap,
    body: Bytes,
) -> Result<Response, E2bError> {
    let (caller, id) = e2b.sandbox(&h)?;
    let req: ExecuteReq = parse(&body)?;
    let code = req
        .code
        .ok_or_else(|| ApiError::bad_request("code: required"))?;
    // A bad name is the request's fault: say so before the stream starts.
    let env = req.env_vars.unwrap_or_default();
    cordon_service::types::check_env(&env)?;
    let (language, context) = match (req.context_id, req.language) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request("give context_id or language, not both").into())
        }
        (Some(ctx), None) => {
            let c = find_context(&e2b, &caller, &id, &ctx)?;
            (c.language, c.name)
        }
        (None, lang) => (
            normalize_language(lang.as_deref().unwrap_or("python"))?.to_string(),
            DEFAULT_CONTEXT.to_string(),
        ),
    };
    let (tx, mut rx) = mpsc::channel::<CellEvent>(64);
    // An `Err` aborts the response mid-body: how E2B's proxy tells a client its sandbox ended.
    let (out_tx, out_rx) = mpsc::channel::<std::io::Result<Bytes>>(64);
    let svc = e2b.st.service.clone();
    let max = svc.config().max_exec_timeout;
    let gone = {
        let (svc, caller, id) = (svc.clone(), caller.clone(), id.clone());
        move || svc.get_live(&caller, &id).is_err()
    };
    tokio::spawn(async move {
        let line = |v: Value| {
            let mut s = v.to_string();
            s.push('\n');
            Ok(Bytes::from(s))
        };
        let run = svc.run_code_in(
            &caller,
            &id,
            CodeRequest {
                language,
                code,
                context: Some(context),
                timeout: Some(cordon_service::types::Amount::Number(max.as_secs_f64())),
                env,
                // E2B shows a string result as itself, not quoted.
                plain_strings: true,
            },
            Some(tx),
            Some(HOME),
        );
        tokio::pin!(run);
        let mut result: Option<Result<CodeResult, cordon_service::error::ServiceError>> = None;
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Some(CellEvent::Stdout(t)) => { let _ = out_tx.send(line(json!({"type": "stdout", "text": t, "timestamp": now_us()}))).await; }
                    Some(CellEvent::Stderr(t)) => { let _ = out_tx.send(line(json!({"type": "stderr", "text": t, "timestamp": now_us()}))).await; }
                    Some(CellEvent::Result(b)) => { let _ = out_tx.send(line(result_line(&b))).await; }
                    Some(CellEvent::Error(e)) => { let _ = out_tx.send(line(error_line(&e.name, &e.value, &e.traceback.join("\n")))).await; }
                    Some(CellEvent::Done(_)) => {}
                    None => break,
                },
                r = &mut run, if result.is_none() => result = Some(r),
                // The client left (its own timeout): closing the cell's events tells the
                // service, which interrupts the cell (E2B's server does the same).
                _ = out_tx.closed(), if !rx.is_closed() => rx.close(),
            }
        }
        let r = match result {
            Some(r) => r,
            None => run.await,
        };
        // A sandbox killed under the cell: the connection drops without an end, and the SDK,
        // finding the sandbox gone (`/health`), raises its "sandbox was killed" timeout.
        if gone() {
            let _ = out_tx
                .send(Err(std::io::Error::other(
                    "the sandbox ended during the execution",
                )))
                .await;
            return;
        }
        let lines = match r {
            Ok(r) => closing_lines(&r),
            Err(e) => vec![
                error_line("SandboxError", &e.message, ""),
                json!({"type": "end_of_execution"}),
            ],
        };
        for l in lines {
            let _ = out_tx.send(line(l)).await;
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(out_rx);
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(stream),
    )
        .into_response())
}

pub(super) async fn create_context(
    State(e2b): State<St>,
    h: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, E2bError> {
    let (caller, id) = e2b.sandbox(&h)?;
    let req: NewContext = parse(&body)?;
    let language = normalize_language(req.language.as_deref().unwrap_or("python"))?;
    let cwd = sandbox_path(req.cwd.as_deref().unwrap_or(HOME))?;
    let name = format!("ctx-{}", cordon_service::keys::random_hex(8));
    let c = e2b
        .st
        .service
        .create_context_in(&caller, &id, language, &name, Some(&cwd))
        .await?;
    Ok(Json(context_json(&c)))
}

pub(super) async fn list_contexts(
    State(e2b): State<St>,
    h: HeaderMap,
) -> Result<Json<Vec<Value>>, E2bError> {
    let (caller, id) = e2b.sandbox(&h)?;
    let list = e2b.st.service.list_contexts(&caller, &id)?;
    // The listed defaults first (started or not), then the rest.
    let mut out: Vec<Value> = LISTED_DEFAULTS
        .iter()
        .map(|lang| {
            list.iter()
                .find(|c| c.name == DEFAULT_CONTEXT && c.language == *lang)
                .map(context_json)
                .unwrap_or_else(|| context_json(&unstarted_default(lang)))
        })
        .collect();
    out.extend(
        list.iter()
            .filter(|c| {
                !(c.name == DEFAULT_CONTEXT && LISTED_DEFAULTS.contains(&c.language.as_str()))
            })
            .map(context_json),
    );
    Ok(Json(out))
}

pub(super) async fn delete_context(
    State(e2b): State<St>,
    h: HeaderMap,
    Path(ctx): Path<String>,
) -> Result<StatusCode, E2bError> {
    let (caller, id) = e2b.sandbox(&h)?;
    let c = find_context(&e2b, &caller, &id, &ctx)?;
    e2b.st
        .service
        .end_context(&caller, &id, &c.language, &c.name, ContextEnd::Delete)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn restart_context(
    State(e2b): State<St>,
    h: HeaderMap,
    Path(ctx): Path<String>,
) -> Result<StatusCode, E2bError> {
    let (caller, id) = e2b.sandbox(&h)?;
    let c = find_context(&e2b, &caller, &id, &ctx)?;
    e2b.st
        .service
        .end_context(&caller, &id, &c.language, &c.name, ContextEnd::Restart)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundles_get_e2b_names() {
        let r = result_line(
            &json!({"text/plain": "2", "image/png": "iVBO", "is_main_result": true, "image/gif": "R0lG"}),
        );
        assert_eq!(r["type"], "result");
        assert_eq!(r["text"], "2");
        assert_eq!(r["png"], "iVBO");
        assert_eq!(r["is_main_result"], true);
        assert_eq!(r["extra"]["image/gif"], "R0lG");
    }

    #[test]
    fn a_dataframe_s_data_is_e2b_s_data_field_not_an_extra() {
        let r = result_line(&json!({"text/plain": "df", "e2b/data": {"a": [1, 2, 3]}}));
        assert_eq!(r["data"]["a"], json!([1, 2, 3]));
        assert!(r.get("extra").is_none(), "{r}");
    }
}
