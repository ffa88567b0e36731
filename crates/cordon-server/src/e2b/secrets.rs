//! E2B's `Secret` API (`Secret.create/update/list/get_info/exists/destroy`, SDK 2.63) over
//! the service's stored secrets, and the `${e2b.secrets.NAME}` placeholders a create may put
//! in `envVars` and in `network.rules` transforms, turned into secrets given to the sandbox.
//!
//! Threat model: the caller is an authenticated key; values are write-only (no answer carries
//! one) and a sandbox gets a placeholder in their place, never the value: the egress proxy
//! puts the value into requests to the hosts the create binds the secret to, only.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, Query};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::control::parse;
use super::{rfc3339_ms, Control, E2bError};
use crate::error::ApiError;
use cordon_service::stored_secrets::SecretInfo;
use cordon_service::types::SandboxSecret;

fn body(s: &SecretInfo) -> Value {
    json!({
        "secretID": s.id,
        "name": s.name,
        "currentVersion": s.version,
        "metadata": s.metadata,
        "createdAt": rfc3339_ms(s.created_at),
        "updatedAt": rfc3339_ms(s.updated_at),
    })
}

#[derive(Debug, Default, Deserialize)]
struct NewSecret {
    name: String,
    value: String,
    metadata: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
struct SecretUpdate {
    value: String,
    metadata: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Page {
    limit: Option<usize>,
    next_token: Option<String>,
}

/// `POST /secrets` (`Secret.create`): 201 with the secret, version 1.
pub(super) async fn create(
    Control(e2b, caller): Control,
    raw: Bytes,
) -> Result<Response, E2bError> {
    let req: NewSecret = parse(&raw)?;
    let info = e2b.st.service.secret_create(
        &caller,
        &req.name,
        &req.value,
        req.metadata.unwrap_or_default(),
    )?;
    Ok((StatusCode::CREATED, Json(body(&info))).into_response())
}

/// `POST /secrets/{id}` (`Secret.update`): a new version; the id or the name.
pub(super) async fn update(
    Control(e2b, caller): Control,
    Path(id): Path<String>,
    raw: Bytes,
) -> Result<Json<Value>, E2bError> {
    let req: SecretUpdate = parse(&raw)?;
    let info = e2b
        .st
        .service
        .secret_update(&caller, &id, &req.value, req.metadata)?;
    Ok(Json(body(&info)))
}

/// `GET /secrets/{id}` (`Secret.get_info`, `exists`).
pub(super) async fn get(
    Control(e2b, caller): Control,
    Path(id): Path<String>,
) -> Result<Json<Value>, E2bError> {
    Ok(Json(body(&e2b.st.service.secret_info(&caller, &id)?)))
}

/// `GET /secrets?limit&nextToken` (`Secret.list`): by name; the next page's token in
/// `x-next-token`.
pub(super) async fn list(
    Control(e2b, caller): Control,
    Query(page): Query<Page>,
) -> Result<Response, E2bError> {
    let (items, next) = e2b.st.service.secret_list(
        &caller,
        page.limit,
        page.next_token.as_deref().filter(|t| !t.is_empty()),
    )?;
    let mut resp = Json(Value::Array(items.iter().map(body).collect())).into_response();
    if let Some(v) = next.and_then(|n| HeaderValue::from_str(&n).ok()) {
        resp.headers_mut().insert("x-next-token", v);
    }
    Ok(resp)
}

/// `DELETE /secrets/{id}` (`Secret.destroy`): 204, or 404 when there is none.
pub(super) async fn destroy(
    Control(e2b, caller): Control,
    Path(id): Path<String>,
) -> Result<StatusCode, E2bError> {
    if e2b.st.service.secret_destroy(&caller, &id)? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("no secret '{id}' under this key")).into())
    }
}

const OPEN: &str = "${e2b.secrets.";

/// The secret names `${e2b.secrets.NAME}` placeholders in `text` refer to, and `text` with each
/// replaced by `{value}` (a header format); `None` when a placeholder is not closed.
fn placeholders(text: &str) -> Option<(Vec<String>, String)> {
    let mut names = Vec::new();
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at]);
        let after = &rest[at + OPEN.len()..];
        let end = after.find('}')?;
        names.push(after[..end].to_string());
        out.push_str("{value}");
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Some((names, out))
}

/// The variable a header-only secret's placeholder is also put in.
fn var_for(name: &str) -> String {
    let mut v = String::from("E2B_SECRET_");
    v.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    v
}

/// The secrets an E2B create asks for, in cordon's terms, with `env` left holding only the
/// variables that are no placeholder.
///
/// - `network.rules[HOST][i].transform.headers[NAME]` = `"Bearer ${e2b.secrets.S}"`: the
///   proxy sets header NAME to that (with S's value) on requests to HOST.
/// - `envVars[VAR]` = `"${e2b.secrets.S}"`: VAR holds a placeholder that becomes S's value in
///   request headers to the hosts S's rules name (or, with no rule, the hosts in S's metadata
///   `cordon.hosts`, comma-separated). A secret bound to no host is refused: it would be a
///   placeholder nothing ever replaces.
pub(super) fn from_create(
    env: &mut BTreeMap<String, String>,
    rules: Option<&Value>,
    hosts_of: impl Fn(&str) -> Option<Vec<String>>,
) -> Result<Vec<SandboxSecret>, ApiError> {
    let mut out: Vec<SandboxSecret> = Vec::new();
    let mut rule_hosts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let bad = |m: String| ApiError::bad_request(m);
    if let Some(rules) = rules.filter(|v| !v.is_null()) {
        let rules = rules
            .as_object()
            .ok_or_else(|| bad("network.rules: an object of host → rules".into()))?;
        for (host, list) in rules {
            let list = list
                .as_array()
                .ok_or_else(|| bad(format!("network.rules.{host}: a list of rules")))?;
            for rule in list {
                let Some(transform) = rule.get("transform").filter(|t| !t.is_null()) else {
                    continue;
                };
                let headers = transform
                    .get("headers")
                    .and_then(Value::as_object)
                    .ok_or_else(|| {
                        bad(format!(
                            "network.rules.{host}: a transform here sets headers only ({{\"headers\": {{…}}}})"
                        ))
                    })?;
                for (header, value) in headers {
                    let value = value.as_str().ok_or_else(|| {
                        bad(format!("network.rules.{host}: header {header}: a string"))
                    })?;
                    let Some((names, format)) = placeholders(value) else {
                        return Err(bad(format!(
                            "network.rules.{host}: header {header}: an unclosed ${{e2b.secrets.…}}"
                        )));
                    };
                    let [name] = names.as_slice() else {
                        // A fixed header (no secret) or several secrets in one value: neither is
                        // something the proxy does, so neither is pretended.
                        return Err(bad(format!(
                            "network.rules.{host}: header {header}: this server injects exactly one ${{e2b.secrets.NAME}} per header (fixed headers and identity tokens are not supported)"
                        )));
                    };
                    rule_hosts
                        .entry(name.clone())
                        .or_default()
                        .push(host.clone());
                    out.push(SandboxSecret {
                        name: name.clone(),
                        env: Some(var_for(name)),
                        hosts: vec![host.clone()],
                        header: Some(header.clone()),
                        format: Some(format),
                    });
                }
            }
        }
    }
    // Variables holding a placeholder.
    let vars: Vec<(String, Vec<String>, String)> = env
        .iter()
        .filter_map(|(k, v)| {
            let (names, rest) = placeholders(v)?;
            (!names.is_empty()).then(|| (k.clone(), names, rest))
        })
        .collect();
    for (var, names, rest) in vars {
        let ([name], "{value}") = (names.as_slice(), rest.as_str()) else {
            return Err(bad(format!(
                "envVars.{var}: a variable given a secret holds exactly one ${{e2b.secrets.NAME}} and nothing else"
            )));
        };
        let name = name.clone();
        let hosts = match rule_hosts.get(&name) {
            Some(h) => h.clone(),
            None => hosts_of(&name).unwrap_or_default(),
        };
        if hosts.is_empty() {
            return Err(bad(format!(
                "envVars.{var}: secret '{name}' is bound to no host here: name one in network.rules (with its host in allowOut) or in the secret's metadata \"cordon.hosts\" — the value goes to those hosts only, and never into the sandbox"
            )));
        }
        env.remove(&var);
        // One binding per secret: its variable is the one the create named.
        match out
            .iter_mut()
            .find(|s| s.name == name && s.header.is_none())
        {
            Some(_) => {
                return Err(bad(format!(
                    "envVars.{var}: secret '{name}' is given to two variables"
                )))
            }
            None => out.push(SandboxSecret {
                name,
                env: Some(var),
                hosts,
                header: None,
                format: None,
            }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_found_and_turned_into_a_format() {
        assert_eq!(
            placeholders("Bearer ${e2b.secrets.gh}"),
            Some((vec!["gh".to_string()], "Bearer {value}".to_string()))
        );
        assert_eq!(placeholders("plain"), Some((vec![], "plain".to_string())));
        assert_eq!(placeholders("x ${e2b.secrets.gh"), None);
    }

    #[test]
    fn a_create_binds_rule_secrets_to_their_host_and_env_secrets_to_the_same_hosts() {
        let mut env = BTreeMap::from([
            ("GH".to_string(), "${e2b.secrets.gh}".to_string()),
            ("PLAIN".to_string(), "1".to_string()),
        ]);
        let rules = json!({"api.test": [{"transform": {"headers": {"Authorization": "Bearer ${e2b.secrets.gh}"}}}]});
        let got = from_create(&mut env, Some(&rules), |_| None).unwrap();
        assert_eq!(
            env.len(),
            1,
            "the placeholder variable is the secret's now: {env:?}"
        );
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].header.as_deref(), Some("Authorization"));
        assert_eq!(got[0].format.as_deref(), Some("Bearer {value}"));
        assert_eq!(got[1].env.as_deref(), Some("GH"));
        assert_eq!(got[1].hosts, vec!["api.test".to_string()]);
    }

    #[test]
    fn an_env_secret_bound_to_no_host_is_refused_rather_than_left_unreplaced() {
        let mut env = BTreeMap::from([("K".to_string(), "${e2b.secrets.k}".to_string())]);
        let e = from_create(&mut env, None, |_| None).unwrap_err();
        assert!(e.to_string().contains("bound to no host"), "{e}");
        let mut env = BTreeMap::from([("K".to_string(), "${e2b.secrets.k}".to_string())]);
        let got = from_create(&mut env, None, |_| Some(vec!["h.test".into()])).unwrap();
        assert_eq!(got[0].hosts, vec!["h.test".to_string()]);
    }

    #[test]
    fn fixed_headers_and_mixed_values_are_refused_not_dropped() {
        let mut env = BTreeMap::new();
        let rules = json!({"api.test": [{"transform": {"headers": {"X-Fixed": "1"}}}]});
        assert!(from_create(&mut env, Some(&rules), |_| None).is_err());
        let mut env = BTreeMap::from([("K".to_string(), "pre-${e2b.secrets.k}".to_string())]);
        assert!(from_create(&mut env, None, |_| Some(vec!["h.test".into()])).is_err());
    }
}
