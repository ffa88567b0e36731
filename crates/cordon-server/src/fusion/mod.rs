//! SandboxFusion's API (`POST /run_code`), so that the published `sandbox-fusion` client and
//! the reward code built on it (veRL's) run unchanged against `cordon serve`: its request and
//! response shapes and statuses, translated onto the service's programs
//! (`cordon_service::programs`), which compile and run each program in fresh one-shot
//! sandboxes.
//!
//! Authentication: the published client sends no credentials of its own, but its HTTP
//! libraries (requests, aiohttp) send an endpoint's user-info (`http://KEY@host:port`) as
//! HTTP Basic auth, so the API key is taken from there (the user, or the password when the
//! user is empty), or from `Authorization: Bearer`. Without either, nothing runs unless the
//! server runs without keys (`--no-auth`, loopback only; `crate::auth` checks the request is
//! local).
//!
//! Threat model: the body is client input, parsed into typed requests; the code it carries is
//! hostile and runs only in sandboxes. Error answers never echo the key.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use cordon_policy::{Outcome, Status};
use cordon_service::error::ErrorKind;
use cordon_service::programs::{self, Program};
use cordon_service::types::Amount;
use cordon_service::Caller;
use serde::{Deserialize, Serialize};

use crate::app::AppState;
use crate::error::ApiError;

/// SandboxFusion's paths, for the composition root.
pub(crate) fn router(st: Arc<AppState>) -> Router {
    let max_upload = st.service.config().max_upload as usize;
    Router::new()
        .route("/run_code", post(run_code))
        .route_layer(middleware::from_fn_with_state(st.clone(), auth))
        .layer(axum::extract::DefaultBodyLimit::max(max_upload))
        .with_state(st)
}

/// The API key of a request: `Authorization: Basic` (the user, else the password: what an
/// endpoint's `http://KEY@host` becomes) or `Authorization: Bearer`.
fn key_of(h: &HeaderMap) -> Option<String> {
    use base64::Engine;
    let value = h.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, rest) = value.split_once(' ')?;
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(rest.trim().to_string());
    }
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':').unwrap_or((&text, ""));
    // URL user-info arrives percent-decoded from requests and aiohttp alike.
    let key = if user.is_empty() { password } else { user };
    (!key.is_empty()).then(|| key.to_string())
}

async fn auth(State(st): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let key = key_of(req.headers());
    let caller = match crate::auth::authenticate(
        &st,
        req.headers(),
        key.as_deref(),
        "missing API key: put it in the endpoint's user-info (http://KEY@host:port), which \
         HTTP clients send as Basic auth, or send 'Authorization: Bearer <key>'",
    ) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// SandboxFusion's `RunCodeRequest` (fields it does not define are ignored, as its server's
/// models do).
#[derive(Debug, Deserialize)]
struct RunCodeRequest {
    code: String,
    language: String,
    #[serde(default = "ten")]
    compile_timeout: f64,
    #[serde(default = "ten")]
    run_timeout: f64,
    #[serde(default)]
    stdin: Option<String>,
    /// Path to base64 content; a `null` content is skipped.
    #[serde(default)]
    files: BTreeMap<String, Option<String>>,
    #[serde(default)]
    fetch_files: Vec<String>,
}

fn ten() -> f64 {
    10.0
}

/// SandboxFusion's `CommandRunResult`.
#[derive(Debug, Serialize)]
struct CommandRunResult {
    /// `Finished`, `TimeLimitExceeded` or `Error` (it could not run).
    status: &'static str,
    /// Seconds.
    execution_time: f64,
    cpu_time: f64,
    /// The exit code; minus the signal's number for a program killed by one (as Python's
    /// subprocess reports it); `null` on a timeout or when it could not run.
    return_code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// SandboxFusion's `RunCodeResponse`.
#[derive(Debug, Serialize)]
struct RunCodeResponse {
    /// `Success`, `Failed`, or `SandboxError` (the client raises that one, with `message`).
    status: &'static str,
    message: String,
    compile_result: Option<CommandRunResult>,
    run_result: Option<CommandRunResult>,
    executor_pod_name: Option<String>,
    files: BTreeMap<String, String>,
}

fn command_result(o: &Outcome) -> CommandRunResult {
    let (status, return_code) = match o.status {
        Status::Exited => ("Finished", o.exit_code),
        Status::Signaled | Status::Oom => (
            "Finished",
            o.signal.map(|s| -s).or(o.exit_code).or(Some(-9)),
        ),
        Status::Timeout | Status::CpuTime => ("TimeLimitExceeded", None),
        Status::Error => ("Error", None),
    };
    let mut stderr = o.stderr.clone();
    if let (Status::Error, Some(e)) = (o.status, &o.error) {
        if !stderr.is_empty() && !stderr.ends_with('\n') {
            stderr.push('\n');
        }
        stderr.push_str(e);
    }
    CommandRunResult {
        status,
        execution_time: o.usage.wall_ms as f64 / 1000.0,
        cpu_time: (o.usage.cpu_user_ms + o.usage.cpu_system_ms) as f64 / 1000.0,
        return_code,
        stdout: o.stdout.clone(),
        stderr,
    }
}

fn finished_ok(r: &CommandRunResult) -> bool {
    r.status == "Finished" && r.return_code == Some(0)
}

fn sandbox_error(message: String) -> RunCodeResponse {
    RunCodeResponse {
        status: "SandboxError",
        message,
        compile_result: None,
        run_result: None,
        executor_pod_name: None,
        files: BTreeMap::new(),
    }
}

async fn run_code(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    body: axum::body::Bytes,
) -> Result<Json<RunCodeResponse>, ApiError> {
    let req: RunCodeRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a RunCodeRequest: {e}")))?;
    for (name, t) in [
        ("compile_timeout", req.compile_timeout),
        ("run_timeout", req.run_timeout),
    ] {
        if !(t.is_finite() && t > 0.0) {
            return Err(ApiError::bad_request(format!(
                "{name}: give a number of seconds more than 0"
            )));
        }
    }
    let program = Program {
        language: Some(req.language),
        code: Some(req.code),
        stdin: req.stdin,
        files: req
            .files
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect(),
        fetch_files: req.fetch_files,
        timeout: Some(Amount::Number(req.run_timeout)),
        compile_timeout: Some(Amount::Number(req.compile_timeout)),
        ..Program::default()
    };
    let result = match programs::run(&st.service, &c, program).await {
        Ok(r) => r,
        // A language this server cannot run is the sandbox's shortcoming, not the request's:
        // SandboxFusion's client raises it with this message (naming the missing toolchain).
        Err(e)
            if matches!(e.kind, ErrorKind::Unsupported)
                || e.code == "unknown_language"
                || e.code == "run_failed" =>
        {
            return Ok(Json(sandbox_error(e.message)));
        }
        Err(e) => return Err(e.into()),
    };
    let compile_result = result.compile.as_ref().map(command_result);
    let run_result = result.outcome.as_ref().map(command_result);
    let ok = compile_result.as_ref().is_none_or(finished_ok)
        && run_result.as_ref().is_some_and(finished_ok);
    let message = match (&compile_result, &run_result) {
        (Some(c), None) if c.status == "TimeLimitExceeded" => "compile timed out".to_string(),
        (Some(_), None) => "compile failed".to_string(),
        _ => String::new(),
    };
    Ok(Json(RunCodeResponse {
        status: if ok { "Success" } else { "Failed" },
        message,
        compile_result,
        run_result,
        executor_pod_name: None,
        files: result.files,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with(auth: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(auth).unwrap());
        h
    }

    #[test]
    fn the_key_comes_from_basic_user_info_or_bearer() {
        use base64::Engine;
        let b = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        assert_eq!(
            key_of(&with(&format!("Basic {}", b("cdn_k:")))).as_deref(),
            Some("cdn_k")
        );
        assert_eq!(
            key_of(&with(&format!("Basic {}", b(":cdn_k")))).as_deref(),
            Some("cdn_k")
        );
        assert_eq!(key_of(&with("Bearer cdn_k")).as_deref(), Some("cdn_k"));
        assert_eq!(key_of(&with(&format!("Basic {}", b(":")))), None);
        assert_eq!(key_of(&with("Basic !!!")), None);
        assert_eq!(key_of(&HeaderMap::new()), None);
    }
}
