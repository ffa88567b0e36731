//! `POST /commit` (docker-py's `container.commit(repository, tag, message, author, changes,
//! conf)`, `docker commit`): a container becomes an image of the node's store through the
//! service's commit ([`cordon_service::Service::commit_sandbox`]) — its image plus what it
//! changed in its root, taken with its processes frozen. Without a repository the image has
//! no name and is known by its id, as Docker's untagged commit is. `changes` (Dockerfile
//! lines) and `conf` (a container config: `Cmd`, `Entrypoint`, `Env`, `WorkingDir`, `User`,
//! `Labels`, `ExposedPorts`) become the service's config changes. What Docker shows of a
//! commit that the store does not keep (the container, the parent, the comment, the author)
//! is remembered by this door for image inspect while the server runs.
//!
//! Threat model: the query and body are hostile. The container is found among the caller's
//! own (another key's is "No such container"); the name is parsed by the service and must be
//! new in the store (a commit cannot replace an image others run: 409); `conf` is turned
//! into change lines whose values are quoted (a value cannot become a second instruction)
//! and a `conf` field cordon cannot honour is refused by name rather than dropped; the
//! service caps the change lines and reads the sandbox's writable layer as hostile input.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{DResult, DockerError, St};

/// What Docker's image inspect shows of a commit beyond the image itself.
#[derive(Debug, Clone)]
pub(crate) struct Committed {
    pub container: String,
    pub container_image: String,
    pub parent: String,
    pub comment: String,
    pub author: String,
}

/// Most commits remembered for inspect (past it, one is forgotten for each new one).
const MAX_REMEMBERED: usize = 1000;

/// A Dockerfile word in double quotes, read back by the change parser as the text given.
fn quoted(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        if c == '"' || c == '\\' {
            o.push('\\');
        }
        o.push(c);
    }
    o.push('"');
    o
}

fn one_line(field: &str, s: &str) -> DResult<()> {
    if s.contains(['\n', '\r', '\0']) {
        return Err(DockerError::bad(format!("conf.{field}: one line, no NUL")));
    }
    Ok(())
}

fn strings(field: &str, v: &Value) -> DResult<Vec<String>> {
    let list = match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .map(|x| x.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| DockerError::bad(format!("conf.{field}: a list of strings")))?,
        _ => return Err(DockerError::bad(format!("conf.{field}: a list of strings"))),
    };
    Ok(list)
}

/// `conf` (a container config) as change lines.
fn conf_changes(conf: &Value) -> DResult<Vec<String>> {
    let Some(obj) = conf.as_object() else {
        return match conf {
            Value::Null => Ok(Vec::new()),
            _ => Err(DockerError::bad("conf: a container config (a JSON object)")),
        };
    };
    let mut out = Vec::new();
    for (k, v) in obj {
        let empty = match v {
            Value::Null => true,
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
            Value::Bool(b) => !b,
            Value::Number(_) => false,
        };
        if empty {
            continue;
        }
        match k.as_str() {
            "Cmd" | "Entrypoint" => {
                let argv = match v {
                    // A string is Docker's shell form.
                    Value::String(s) => vec!["/bin/sh".to_string(), "-c".to_string(), s.clone()],
                    _ => strings(k, v)?,
                };
                let word = if k == "Cmd" { "CMD" } else { "ENTRYPOINT" };
                out.push(format!(
                    "{word} {}",
                    serde_json::to_string(&argv).unwrap_or_default()
                ));
            }
            "Env" => {
                for e in strings(k, v)? {
                    one_line(k, &e)?;
                    if !e.contains('=') {
                        return Err(DockerError::bad(format!(
                            "conf.Env: '{}' is not KEY=VALUE",
                            e.chars().take(80).collect::<String>()
                        )));
                    }
                    out.push(format!("ENV {}", quoted(&e)));
                }
            }
            "Labels" => {
                let o = v
                    .as_object()
                    .ok_or_else(|| DockerError::bad("conf.Labels: an object of strings"))?;
                for (lk, lv) in o {
                    let lv = lv
                        .as_str()
                        .ok_or_else(|| DockerError::bad("conf.Labels: an object of strings"))?;
                    one_line(k, lk)?;
                    one_line(k, lv)?;
                    out.push(format!("LABEL {}", quoted(&format!("{lk}={lv}"))));
                }
            }
            "ExposedPorts" => {
                let o = v
                    .as_object()
                    .ok_or_else(|| DockerError::bad("conf.ExposedPorts: an object"))?;
                for p in o.keys() {
                    one_line(k, p)?;
                    out.push(format!("EXPOSE {p}"));
                }
            }
            "WorkingDir" | "User" => {
                let s = v
                    .as_str()
                    .ok_or_else(|| DockerError::bad(format!("conf.{k}: a string")))?;
                one_line(k, s)?;
                let word = if k == "User" { "USER" } else { "WORKDIR" };
                out.push(format!("{word} {s}"));
            }
            // What every container config carries and an image does not keep.
            "Hostname" | "Domainname" | "AttachStdin" | "AttachStdout" | "AttachStderr"
            | "Tty" | "OpenStdin" | "StdinOnce" | "Image" => {}
            other => {
                return Err(DockerError::bad(format!(
                    "conf.{other}: not supported by cordon's commit (Cmd, Entrypoint, Env, WorkingDir, User, Labels and ExposedPorts are)"
                )))
            }
        }
    }
    Ok(out)
}

/// `POST /commit?container=…&repo=…&tag=…&comment=…&author=…&changes=…&pause=…`, body `conf`.
pub(crate) async fn commit(
    State(d): State<St>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> DResult<Response> {
    let caller = d.caller(&headers)?;
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.as_deref().unwrap_or(""))
        .map_err(|e| DockerError::bad(format!("query: {e}")))?;
    let get = |k: &str| {
        pairs
            .iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    let name =
        get("container").ok_or_else(|| DockerError::bad("container: the container to commit"))?;
    let c = d.find(&caller, &name)?;
    // Docker's `changes` may repeat and each may hold several lines.
    let mut changes: Vec<String> = pairs
        .iter()
        .filter(|(n, _)| n == "changes")
        .flat_map(|(_, v)| v.lines().map(str::to_string).collect::<Vec<_>>())
        .filter(|l| !l.trim().is_empty())
        .collect();
    if !body.is_empty() {
        let conf: Value = serde_json::from_slice(&body)
            .map_err(|e| DockerError::bad(format!("conf: not JSON: {e}")))?;
        changes.splice(0..0, conf_changes(&conf)?);
    }
    let made = match get("repo") {
        Some(repo) => {
            let reference = match get("tag") {
                Some(tag) => format!("{repo}:{tag}"),
                None => repo,
            };
            d.st.service
                .commit_sandbox(
                    &caller,
                    &c.id,
                    cordon_service::commit::CommitRequest { reference, changes },
                )
                .await?
        }
        None => {
            d.st.service
                .commit_sandbox_unnamed(&caller, &c.id, changes)
                .await?
        }
    };
    if let Ok(mut m) = d.commits.lock() {
        if m.len() >= MAX_REMEMBERED {
            if let Some(k) = m.keys().next().cloned() {
                m.remove(&k);
            }
        }
        m.insert(
            made.digest.clone(),
            Committed {
                container: c.id.clone(),
                container_image: c.image.clone(),
                parent: c.image_id.clone(),
                comment: get("comment").unwrap_or_default(),
                author: get("author").unwrap_or_default(),
            },
        );
    }
    Ok((StatusCode::CREATED, Json(json!({"Id": made.digest}))).into_response())
}

/// What inspect adds for an image this door committed.
pub(crate) fn inspect_fields(d: &St, digest: &str) -> HashMap<&'static str, Value> {
    let mut out = HashMap::new();
    if let Some(c) = d.commits.lock().ok().and_then(|m| m.get(digest).cloned()) {
        out.insert("Container", json!(c.container));
        out.insert("ContainerConfig", json!({"Image": c.container_image}));
        out.insert("Parent", json!(c.parent));
        out.insert("Comment", json!(c.comment));
        out.insert("Author", json!(c.author));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conf_value_cannot_become_a_second_change_and_unknown_fields_are_refused_by_name() {
        let lines = conf_changes(&json!({
            "Cmd": ["cat", "/x"],
            "Env": ["A=1 \"two\" \\ three"],
            "Labels": {"k": "v w"},
            "ExposedPorts": {"8000/tcp": {}},
            "WorkingDir": "/app",
            "Tty": false,
        }))
        .unwrap_or_else(|e| panic!("conf: {}", e.1));
        // One line each (the service parses each as one instruction), values quoted.
        assert!(lines.iter().all(|l| !l.contains(['\n', '\r'])), "{lines:?}");
        assert_eq!(
            lines,
            [
                "CMD [\"cat\",\"/x\"]",
                "ENV \"A=1 \\\"two\\\" \\\\ three\"",
                "EXPOSE 8000/tcp",
                "LABEL \"k=v w\"",
                "WORKDIR /app",
            ]
        );
        for bad in [
            json!({"Env": ["A=1\nRUN rm -rf /"]}),
            json!({"User": "x\nCMD y"}),
            json!({"Volumes": {"/data": {}}}),
            json!({"Healthcheck": {"Test": ["CMD", "true"]}}),
        ] {
            assert!(conf_changes(&bad).is_err(), "{bad}");
        }
    }
}
