//! The E2B door in `/openapi.json`, under its own tag. Its wire format is E2B's (the SDKs are
//! the reference: `../shared/E2B-PROTOCOL.md`), so bodies are described as loosely as E2B's
//! own spec does; what the document must get right is which routes exist, how each is
//! authenticated, and every status it can answer.

use serde_json::{json, Map, Value};
use utoipa::openapi::path::PathItem;
use utoipa::openapi::OpenApi;

pub const TAG: &str = "e2b";

/// How an operation is authenticated.
#[derive(Clone, Copy)]
enum Auth {
    /// The control plane: a cordon API key in `X-API-KEY`.
    Key,
    /// envd and the interpreter: `E2b-Sandbox-Id` and the sandbox's access token.
    Token,
    /// `/health`: nothing (a token is checked when a sandbox is named).
    None,
    /// The volume content API: the volume's token, `Authorization: Bearer`.
    VolumeToken,
}

struct Op {
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    auth: Auth,
    body: Option<&'static str>,
    ok: &'static [(u16, &'static str, Option<&'static str>)],
}

const JSON: Option<&str> = Some("application/json");

const OPS: &[Op] = &[
    Op { method: "post", path: "/v2/sandboxes", summary: "Create a sandbox (`Sandbox.create`)", auth: Auth::Key, body: JSON, ok: &[(201, "The sandbox, with its envd access token", JSON)] },
    Op { method: "get", path: "/v2/sandboxes", summary: "List sandboxes (metadata filter, state, paging with `x-next-token`)", auth: Auth::Key, body: None, ok: &[(200, "A page of sandboxes", JSON)] },
    Op { method: "post", path: "/sandboxes", summary: "Create a sandbox (older SDKs)", auth: Auth::Key, body: JSON, ok: &[(201, "The sandbox, with its envd access token", JSON)] },
    Op { method: "get", path: "/sandboxes", summary: "List running sandboxes (older SDKs)", auth: Auth::Key, body: None, ok: &[(200, "The sandboxes", JSON)] },
    Op { method: "get", path: "/sandboxes/{id}", summary: "A sandbox's details (`get_info`)", auth: Auth::Key, body: None, ok: &[(200, "The sandbox", JSON)] },
    Op { method: "delete", path: "/sandboxes/{id}", summary: "Kill a sandbox", auth: Auth::Key, body: None, ok: &[(204, "Killed", None)] },
    Op { method: "post", path: "/sandboxes/{id}/timeout", summary: "Set the time left (`set_timeout`)", auth: Auth::Key, body: JSON, ok: &[(204, "Set", None)] },
    Op { method: "post", path: "/sandboxes/{id}/connect", summary: "Connect (resumes a paused sandbox)", auth: Auth::Key, body: JSON, ok: &[(200, "Running", JSON), (201, "Resumed", JSON)] },
    Op { method: "post", path: "/v2/sandboxes/{id}/connect", summary: "Connect (resumes a paused sandbox)", auth: Auth::Key, body: JSON, ok: &[(200, "Running", JSON), (201, "Resumed", JSON)] },
    Op { method: "post", path: "/sandboxes/{id}/refreshes", summary: "Keep a sandbox alive longer", auth: Auth::Key, body: JSON, ok: &[(204, "Refreshed", None)] },
    Op { method: "post", path: "/sandboxes/{id}/pause", summary: "Pause (freeze every process, keep memory and files)", auth: Auth::Key, body: JSON, ok: &[(204, "Paused", None)] },
    Op { method: "post", path: "/sandboxes/{id}/resume", summary: "Resume a paused sandbox", auth: Auth::Key, body: JSON, ok: &[(200, "Running", JSON), (201, "Resumed", JSON)] },
    Op { method: "put", path: "/sandboxes/{id}/network", summary: "Replace the egress allowlist (`update_network`)", auth: Auth::Key, body: JSON, ok: &[(204, "Replaced", None)] },
    Op { method: "get", path: "/sandboxes/{id}/metrics", summary: "CPU, memory and disk use now", auth: Auth::Key, body: None, ok: &[(200, "One sample", JSON)] },
    Op { method: "post", path: "/sandboxes/{id}/snapshots", summary: "Snapshot a sandbox's files (`create_snapshot`; files only: `memory: true` is refused, `notCarried` says what is not kept)", auth: Auth::Key, body: JSON, ok: &[(201, "The snapshot; its `snapshotID` is a template to create from", JSON)] },
    Op { method: "get", path: "/snapshots", summary: "List snapshots (`list_snapshots`; `sandboxID`, `name` filter)", auth: Auth::Key, body: None, ok: &[(200, "The snapshots", JSON)] },
    Op { method: "get", path: "/templates", summary: "The caller's built templates (`e2b template list`; kept across restarts)", auth: Auth::Key, body: None, ok: &[(200, "The templates, in E2B's `Template` shape", JSON)] },
    Op { method: "get", path: "/v2/templates", summary: "The caller's built templates (as `GET /templates`; one page)", auth: Auth::Key, body: None, ok: &[(200, "The templates, in E2B's `Template` shape", JSON)] },
    Op { method: "get", path: "/templates/{id}", summary: "A built template (id or alias) and its builds, newest first", auth: Auth::Key, body: None, ok: &[(200, "The template and its builds", JSON)] },
    Op { method: "delete", path: "/templates/{id}", summary: "Delete a template built with the Template SDK, or a snapshot (`delete_snapshot`)", auth: Auth::Key, body: None, ok: &[(204, "Deleted", None)] },
    Op { method: "post", path: "/v3/templates", summary: "Request a template build (`Template.build`, `build_in_background`): `name` is `alias[:tag]`", auth: Auth::Key, body: JSON, ok: &[(202, "The template's and the build's ids, names and tags", JSON)] },
    Op { method: "get", path: "/templates/{id}/files/{hash}", summary: "Whether a COPY step's files are here, and a one-use URL on this server to upload their archive to", auth: Auth::Key, body: None, ok: &[(201, "`present`, and the upload `url`", JSON)] },
    Op { method: "put", path: "/e2b-template-files/{token}", summary: "Upload a COPY step's archive (the one-use URL's token is the credential: no API key)", auth: Auth::None, body: Some("application/octet-stream"), ok: &[(200, "Stored", None)] },
    Op { method: "post", path: "/v2/templates/{id}/builds/{build}", summary: "Start a build: the base (`fromImage`, `fromTemplate`), steps (COPY, ENV, RUN, WORKDIR, USER), `startCmd` and `readyCmd`", auth: Auth::Key, body: JSON, ok: &[(202, "Started", None)] },
    Op { method: "get", path: "/templates/{id}/builds/{build}/status", summary: "A build's status and log (`logsOffset`, `limit`)", auth: Auth::Key, body: None, ok: &[(200, "The status, the log from the offset, and why it failed", JSON)] },
    Op { method: "get", path: "/templates/aliases/{alias}", summary: "Whether a template name exists (`Template.exists`)", auth: Auth::Key, body: None, ok: &[(200, "The template's id", JSON)] },
    Op { method: "post", path: "/templates/tags", summary: "Tag a build (`Template.assign_tags`): `target` is `alias:tag`", auth: Auth::Key, body: JSON, ok: &[(201, "The build and its new tags", JSON)] },
    Op { method: "delete", path: "/templates/tags", summary: "Remove tags (`Template.remove_tags`)", auth: Auth::Key, body: JSON, ok: &[(204, "Removed", None)] },
    Op { method: "get", path: "/templates/{id}/tags", summary: "A template's tags (`Template.get_tags`)", auth: Auth::Key, body: None, ok: &[(200, "The tags", JSON)] },
    Op { method: "post", path: "/sandboxes/{id}/fork", summary: "Fork a sandbox (`fork`): `count` new sandboxes with its files; memory and processes are not carried (`notCarried`)", auth: Auth::Key, body: JSON, ok: &[(201, "One entry per fork", JSON)] },
    Op { method: "post", path: "/volumes", summary: "Create a volume (`Volume.create`)", auth: Auth::Key, body: JSON, ok: &[(201, "The volume; its `volumeID` is its name", JSON)] },
    Op { method: "get", path: "/volumes", summary: "List volumes (`Volume.list`)", auth: Auth::Key, body: None, ok: &[(200, "The volumes", JSON)] },
    Op { method: "get", path: "/volumes/{id}", summary: "A volume (`Volume.connect`, `get_info`)", auth: Auth::Key, body: None, ok: &[(200, "The volume", JSON)] },
    Op { method: "delete", path: "/volumes/{id}", summary: "Delete a volume and its files (`Volume.destroy`); 409 while a sandbox mounts it", auth: Auth::Key, body: None, ok: &[(204, "Deleted", None)] },
    Op { method: "post", path: "/secrets", summary: "Store a secret (`Secret.create`): write-only; sandboxes get it by `${e2b.secrets.NAME}` in `envVars` or `network.rules` transforms, as a placeholder the proxy replaces on the way to the bound hosts", auth: Auth::Key, body: JSON, ok: &[(201, "The secret, version 1 (never its value)", JSON)] },
    Op { method: "get", path: "/secrets", summary: "List secrets (`Secret.list`; `limit`, `nextToken`, next page in `x-next-token`)", auth: Auth::Key, body: None, ok: &[(200, "A page of secrets (never their values)", JSON)] },
    Op { method: "get", path: "/secrets/{id}", summary: "A secret by id or name (`Secret.get_info`, `exists`)", auth: Auth::Key, body: None, ok: &[(200, "The secret (never its value)", JSON)] },
    Op { method: "post", path: "/secrets/{id}", summary: "A new version of a secret (`Secret.update`): running sandboxes given it send the new value from their next request", auth: Auth::Key, body: JSON, ok: &[(200, "The secret with its new version", JSON)] },
    Op { method: "delete", path: "/secrets/{id}", summary: "Destroy a secret (`Secret.destroy`)", auth: Auth::Key, body: None, ok: &[(204, "Destroyed", None)] },
    Op { method: "get", path: "/health", summary: "envd's health check", auth: Auth::None, body: None, ok: &[(204, "Up", None)] },
    Op { method: "post", path: "/process.Process/{method}", summary: "envd's process RPCs (Connect protocol: Start, Connect, List, SendInput, StreamInput, CloseStdin, SendSignal, Update)", auth: Auth::Token, body: JSON, ok: &[(200, "The RPC's answer (unary calls: JSON; the streaming ones take and give `application/connect+json` envelopes)", JSON)] },
    Op { method: "post", path: "/filesystem.Filesystem/{method}", summary: "envd's file system RPCs (Connect protocol: Stat, ListDir, MakeDir, Move, Remove, WatchDir, CreateWatcher, GetWatcherEvents, RemoveWatcher)", auth: Auth::Token, body: JSON, ok: &[(200, "The RPC's answer (unary calls: JSON; the streaming ones take and give `application/connect+json` envelopes)", JSON)] },
    Op { method: "get", path: "/files", summary: "Download a file (gzip when `Accept-Encoding` asks)", auth: Auth::Token, body: None, ok: &[(200, "The file's bytes", Some("application/octet-stream"))] },
    Op { method: "post", path: "/files", summary: "Upload files (multipart, or octet-stream with `?path=`; `Content-Encoding: gzip` accepted)", auth: Auth::Token, body: Some("application/octet-stream"), ok: &[(200, "What was written", JSON)] },
    Op { method: "post", path: "/execute", summary: "Run a code cell; newline-delimited JSON events", auth: Auth::Token, body: JSON, ok: &[(200, "The cell's events", Some("application/x-ndjson"))] },
    Op { method: "post", path: "/contexts", summary: "Create a code context", auth: Auth::Token, body: JSON, ok: &[(200, "The context", JSON)] },
    Op { method: "get", path: "/contexts", summary: "List code contexts", auth: Auth::Token, body: None, ok: &[(200, "The contexts", JSON)] },
    Op { method: "delete", path: "/contexts/{id}", summary: "Remove a code context", auth: Auth::Token, body: None, ok: &[(204, "Removed", None)] },
    Op { method: "post", path: "/contexts/{id}/restart", summary: "Restart a code context (its state is lost)", auth: Auth::Token, body: None, ok: &[(204, "Restarted", None)] },
    Op { method: "get", path: "/volumecontent/{id}/path", summary: "A volume entry's details (`Volume.get_info`, `exists`)", auth: Auth::VolumeToken, body: None, ok: &[(200, "The entry", JSON)] },
    Op { method: "delete", path: "/volumecontent/{id}/path", summary: "Remove a file or directory (with its contents) from a volume (`Volume.remove`)", auth: Auth::VolumeToken, body: None, ok: &[(204, "Removed", None)] },
    Op { method: "patch", path: "/volumecontent/{id}/path", summary: "Change a volume entry's mode (`Volume.update_metadata`; owner: the sandbox user only)", auth: Auth::VolumeToken, body: JSON, ok: &[(200, "The entry", JSON)] },
    Op { method: "get", path: "/volumecontent/{id}/dir", summary: "List a volume directory (`Volume.list`, `depth`)", auth: Auth::VolumeToken, body: None, ok: &[(200, "The entries", JSON)] },
    Op { method: "post", path: "/volumecontent/{id}/dir", summary: "Make a volume directory (`Volume.make_dir`; `force`: with its parents)", auth: Auth::VolumeToken, body: None, ok: &[(201, "The directory", JSON)] },
    Op { method: "get", path: "/volumecontent/{id}/file", summary: "Read a volume file (`Volume.read_file`)", auth: Auth::VolumeToken, body: None, ok: &[(200, "The file's bytes", Some("application/octet-stream"))] },
    Op { method: "put", path: "/volumecontent/{id}/file", summary: "Write a volume file, with its parents (`Volume.write_file`; within the volume's size)", auth: Auth::VolumeToken, body: Some("application/octet-stream"), ok: &[(201, "The file", JSON)] },
];

/// Every status an E2B route can answer besides its successes.
const ERRORS: &[(u16, &str)] = &[
    (400, "The request is malformed (the message says how)"),
    (
        401,
        "No valid API key or access token (or the sandbox's key was revoked)",
    ),
    (403, "Not allowed in this sandbox"),
    (404, "No such sandbox, template, snapshot, volume, file, process or context"),
    (
        405,
        "Method not allowed here; `Allow` lists the ones that are",
    ),
    (
        409,
        "The sandbox cannot do this now (already paused, ended, a file in the way), or the volume is mounted",
    ),
    (
        413,
        "The body (or, unpacked, a gzip upload) is larger than this server accepts",
    ),
    (415, "A content type or encoding this route does not take"),
    (
        429,
        "The owning key's rate limit or sandbox quota; retry after `Retry-After` seconds",
    ),
    (500, "The server or the host failed"),
    (501, "The sandbox's file system cannot do this"),
    (
        502,
        "The sandbox was not found (killed, or its time ran out)",
    ),
    (503, "Busy"),
    (504, "The sandbox did not answer in time"),
    (507, "The sandbox's disk is full"),
];

fn error_body() -> Value {
    json!({
        "description": "E2B's error shape: `code` is the status (a Connect code name on RPC routes), `message` says why",
        "type": "object",
        "properties": {
            "code": {"type": ["integer", "string"]},
            "message": {"type": "string"}
        }
    })
}

/// E2B's bodies as loosely as its spec types them: JSON objects or arrays, streams and files
/// as bytes.
fn body_schema(content_type: &str, request: bool) -> Value {
    if content_type == "application/json" && request {
        json!({"type": "object"})
    } else if content_type == "application/json" {
        json!({"type": ["object", "array"]})
    } else {
        json!({"type": "string", "format": "binary"})
    }
}

fn operation(op: &Op) -> Value {
    let mut params = Vec::new();
    for name in ["id", "method", "hash", "token", "build", "alias"] {
        if op.path.contains(&format!("{{{name}}}")) {
            params.push(
                json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}),
            );
        }
    }
    if matches!(op.auth, Auth::Token) {
        params.push(
            json!({"name": "E2b-Sandbox-Id", "in": "header", "required": true,
            "description": "The sandbox this request is for", "schema": {"type": "string"}}),
        );
        params.push(json!({"name": "X-Access-Token", "in": "header", "required": false,
            "description": "The sandbox's `envdAccessToken` (the code-context calls send it as `E2B-Traffic-Access-Token`)",
            "schema": {"type": "string"}}));
    }
    if matches!(op.auth, Auth::VolumeToken) {
        params.push(json!({"name": "path", "in": "query", "required": true,
            "description": "A path in the volume (`/` is its top)", "schema": {"type": "string"}}));
    }
    let mut responses = Map::new();
    for (status, desc, ct) in op.ok {
        let mut r = json!({"description": desc});
        if let Some(ct) = ct {
            r["content"] = json!({*ct: {"schema": body_schema(ct, false)}});
        }
        responses.insert(status.to_string(), r);
    }
    for (status, desc) in ERRORS {
        let mut r = json!({"description": desc,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/E2bError"}}}});
        if *status == 429 {
            r["headers"] = json!({"Retry-After": {"schema": {"type": "integer", "minimum": 0}}});
        }
        if *status == 405 {
            r["headers"] = json!({"Allow": {"schema": {"type": "string"}}});
        }
        responses.insert(status.to_string(), r);
    }
    let mut v = json!({
        "tags": [TAG],
        "summary": op.summary,
        "operationId": format!("e2b_{}_{}", op.method, op.path.replace(['/', '.', '{', '}'], "_")),
        "parameters": params,
        "responses": responses,
        "security": match op.auth {
            Auth::Key => json!([{"e2b_api_key": []}]),
            Auth::VolumeToken => json!([{"bearer": []}]),
            _ => json!([]),
        },
    });
    if let Some(ct) = op.body {
        let schema = if op.path.ends_with("/timeout") {
            // The one body with a required field: seconds from now (at most the server's
            // --max-ttl, 24 h by default).
            json!({"type": "object", "required": ["timeout"],
                "properties": {"timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400}}})
        } else {
            body_schema(ct, true)
        };
        let required = op.path.ends_with("/timeout");
        v["requestBody"] = json!({"required": required, "content": {ct: {"schema": schema}}});
    }
    v
}

/// Adds the E2B routes, their tag and the `X-API-KEY` scheme to `doc`.
pub fn document(doc: &mut OpenApi) {
    let mut items: Map<String, Value> = Map::new();
    for op in OPS {
        let item = items
            .entry(op.path.to_string())
            .or_insert_with(|| json!({}));
        item[op.method] = operation(op);
    }
    for (path, item) in items {
        match serde_json::from_value::<PathItem>(item) {
            Ok(item) => {
                doc.paths.paths.insert(path, item);
            }
            Err(e) => {
                // Built from the constants above: a test catches this; never a panic here.
                doc.paths.paths.insert(
                    path,
                    PathItem::new(
                        utoipa::openapi::HttpMethod::Get,
                        utoipa::openapi::path::OperationBuilder::new()
                            .description(Some(format!("(document error: {e})")))
                            .build(),
                    ),
                );
            }
        }
    }
    let components = doc.components.get_or_insert_with(Default::default);
    if let Ok(schema) = serde_json::from_value(error_body()) {
        components.schemas.insert("E2bError".into(), schema);
    }
    components.add_security_scheme(
        "e2b_api_key",
        utoipa::openapi::security::SecurityScheme::ApiKey(
            utoipa::openapi::security::ApiKey::Header(
                utoipa::openapi::security::ApiKeyValue::with_description(
                    "X-API-KEY",
                    "An API key of this server, as the E2B SDKs send E2B_API_KEY",
                ),
            ),
        ),
    );
    let tag = utoipa::openapi::tag::TagBuilder::new()
        .name(TAG)
        .description(Some(
            "The E2B door: unmodified E2B SDKs (E2B_API_URL and E2B_SANDBOX_URL set to this server, E2B_API_KEY to one of its keys) drive sandboxes here",
        ))
        .build();
    doc.tags.get_or_insert_with(Vec::new).push(tag);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_parses() {
        for op in OPS {
            let mut item = json!({});
            item[op.method] = operation(op);
            serde_json::from_value::<PathItem>(item)
                .unwrap_or_else(|e| panic!("{} {}: {e}", op.method, op.path));
        }
        serde_json::from_value::<utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>>(
            error_body(),
        )
        .unwrap_or_else(|e| panic!("E2bError: {e}"));
    }
}
