"""The SDK against the OpenAPI document of a real `cordon serve` (`GET /openapi.json`).

Nothing here knows today's document: every check is derived from it, so a schema that gains,
loses or renames a field, or a new schema the API returns or accepts, fails here until the
SDK follows.

- Every model class (``cordon_sdk.models``) names its schema in ``__schema__``; its fields
  are the schema's properties, and a field has no default exactly when the schema requires
  it (``__lenient__`` lists the few the SDK reads as empty when an older server omits them).
- Every schema a successful answer can contain is modelled (list envelopes such as
  ``{"sandboxes": [SandboxInfo]}`` are unwrapped by the list calls).
- Every request schema has its ``_core.*_body`` builder, whose bodies carry exactly the
  schema's properties (all of them when every option is given, the required ones when none
  is) and validate against it.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple, Type

import httpx
import jsonschema
import pytest

from cordon_sdk import _core, models

from .conftest import Server

SchemaDoc = Dict[str, Any]

MODELS: List[Type[Any]] = [
    c for c in (getattr(models, n) for n in models.__all__) if getattr(c, "__schema__", None) is not None
]

# Request schema -> (a body with every option given, a body with none).
REQUEST_BODIES: Dict[str, Tuple[Callable[[], Dict[str, Any]], Callable[[], Dict[str, Any]]]] = {
    "CreateSandbox": (
        lambda: _core.create_body(
            "default", "256M", 1.5, 16, "64M", "5m", {"A": "1"}, {"k": "v"}, ["pypi.org"], "64K", "5s",
            "python:3.12-slim", "after-setup", {"/data": "datasets", "/ro": ("refs", True)}, "base", True,
            [{"name": "gh", "env": "GH", "hosts": ["api.github.com"], "header": "Authorization", "format": "Bearer {value}"}],
            True, ["/usr/bin/python3", "/usr/lib/git-core/*"], False,
        ),
        lambda: _core.create_body(None, None, None, None, None, None, None, None, None),
    ),
    "ExecRequest": (
        lambda: _core.exec_body(["echo", "hi"], "/tmp", {"A": "1"}, "in", 5, True),
        lambda: _core.exec_body("true", None, None, None, None, False),
    ),
    "RunRequest": (
        lambda: _core.run_body(
            ["m.wasm"], "strict", 1 << 28, 1, 16, "64M", "5s", {"A": "1"}, "in", "/tmp", ["pypi.org"], b"\0asm", "python:3.12-slim"
        ),
        lambda: _core.run_body("true", None, None, None, None, None, None, None, None, None, None),
    ),
    "ExtendTtl": (lambda: _core.ttl_body("5m"), lambda: _core.ttl_body(60)),
    "CreateSnapshot": (lambda: _core.snapshot_body("after-setup"), lambda: _core.snapshot_body("s")),
    "CommitRequest": (lambda: _core.commit_body("my-agent:2", ["ENV A=1"]), lambda: _core.commit_body("a", None)),
    "PauseRequest": (lambda: _core.pause_body(False), lambda: _core.pause_body(True)),
    "ForkRequest": (lambda: _core.fork_body(2, "10m", {"k": "v"}), lambda: _core.fork_body(1, None, None)),
    "CreateVolume": (lambda: _core.volume_body("datasets", "10G"), lambda: _core.volume_body("v", None)),
    "CreateKey": (
        lambda: _core.key_body("ci", 5, 10, True),
        lambda: _core.key_body("ci", None, None, None),
    ),
    "ApprovalAnswer": (
        lambda: _core.approval_body(True, "sha256:00", "looks right"),
        lambda: _core.approval_body(False, None, None),
    ),
    "CreateSecret": (lambda: _core.secret_body("v", {"k": "v"}, name="gh"), lambda: _core.secret_body("v", None, name="gh")),
    "UpdateSecret": (lambda: _core.secret_body("v", {"k": "v"}), lambda: _core.secret_body("v", None)),
    "StdinRequest": (lambda: _core.stdin_body("x", True), lambda: _core.stdin_body("", False)),
    "SignalRequest": (lambda: _core.signal_body("TERM"), lambda: _core.signal_body(9)),
    "MkdirRequest": (lambda: _core.mkdir_body("/workspace/d", False), lambda: _core.mkdir_body("d", True)),
    "MoveRequest": (lambda: _core.move_body("a", "b"), lambda: _core.move_body("a", "b")),
    "CodeRequest": (
        lambda: _core.code_body("1 + 1", "python", "ctx", "5s", {"A": "b"}),
        lambda: _core.code_body("1", "python", None, None),
    ),
    "NewContext": (lambda: _core.context_body("bash", "ctx"), lambda: _core.context_body("python", "default")),
    "NetworkPolicy": (
        lambda: _core.network_body(["pypi.org", "10.0.0.0/8"], {"api.test": "10.1.2.3"}),
        lambda: _core.network_body([], None),
    ),
    "BatchRequest": (
        lambda: _core.batch_body(
            [
                {
                    "language": "python", "code": "print(1)", "stdin": "in", "files": {"a.txt": b"x"},
                    "fetch_files": ["a.txt"], "timeout": "5s", "compile_timeout": 10, "profile": "strict",
                    "memory": "256M", "tests": [{"stdin": "1", "expected_stdout": "1"}],
                },
                {"cmd": ["echo", "hi"]},
            ],
            4,
        ),
        lambda: _core.batch_body([], None),
    ),
    "PullRequest": (
        lambda: _core.pull_body("127.0.0.1:5000/team/app:1", "linux/arm64/v8"),
        lambda: _core.pull_body("python:3.12-slim", None),
    ),
}


@pytest.fixture(scope="module")
def doc(server: Server) -> SchemaDoc:
    resp = httpx.get(server.url + "/openapi.json", timeout=10)
    resp.raise_for_status()
    d = resp.json()
    assert isinstance(d, dict) and d.get("paths") and d.get("components", {}).get("schemas"), d
    return d


def _schemas(doc: SchemaDoc) -> Dict[str, SchemaDoc]:
    s = doc["components"]["schemas"]
    assert isinstance(s, dict)
    return s


def _ref_name(ref: str) -> str:
    prefix = "#/components/schemas/"
    assert ref.startswith(prefix), ref
    return ref[len(prefix) :]


def _resolve(doc: SchemaDoc, schema: SchemaDoc) -> SchemaDoc:
    while "$ref" in schema:
        schema = _schemas(doc)[_ref_name(schema["$ref"])]
    return schema


def _object_shape(doc: SchemaDoc, schema: SchemaDoc) -> Tuple[Dict[str, SchemaDoc], Set[str]]:
    """Properties and required names of an object schema (``allOf`` members merged)."""
    schema = _resolve(doc, schema)
    props: Dict[str, SchemaDoc] = dict(schema.get("properties") or {})
    required: Set[str] = set(schema.get("required") or [])
    for part in schema.get("allOf") or []:
        p, r = _object_shape(doc, part)
        props.update(p)
        required |= r
    return props, required


def _refs(schema: Any) -> Iterator[str]:
    """Names of the schemas one schema refers to directly (through arrays, unions, maps)."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            yield _ref_name(schema["$ref"])
        for key in ("items", "additionalProperties"):
            yield from _refs(schema.get(key))
        for key in ("oneOf", "anyOf", "allOf"):
            for part in schema.get(key) or []:
                yield from _refs(part)
        for prop in (schema.get("properties") or {}).values():
            yield from _refs(prop)


def _closure(doc: SchemaDoc, roots: Set[str]) -> Set[str]:
    seen: Set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(_refs(_schemas(doc)[name]))
    return seen


def _operations(doc: SchemaDoc) -> Iterator[Tuple[str, str, SchemaDoc]]:
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if isinstance(op, dict) and method in ("get", "put", "post", "delete", "patch"):
                yield method.upper(), path, op


def _media_schemas(container: Optional[SchemaDoc]) -> Iterator[SchemaDoc]:
    for media in ((container or {}).get("content") or {}).values():
        if isinstance(media, dict) and isinstance(media.get("schema"), dict):
            yield media["schema"]


def _response_schema_names(doc: SchemaDoc) -> Set[str]:
    roots: Set[str] = set()
    for _, _, op in _operations(doc):
        for status, resp in (op.get("responses") or {}).items():
            if str(status).startswith("2"):
                for s in _media_schemas(resp):
                    roots.update(_refs(s))
    return _closure(doc, roots)


def _request_schema_names(doc: SchemaDoc) -> Set[str]:
    names: Set[str] = set()
    for _, _, op in _operations(doc):
        for s in _media_schemas(op.get("requestBody")):
            names.update(_refs(s))
    return names


def _model_fields(cls: Type[Any]) -> Dict[str, bool]:
    """JSON field name -> whether the model requires it (it has no default)."""
    return {
        f.name: f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        for f in dataclasses.fields(cls)
        if f.metadata.get("json", True)
    }


def _model_of_type(tp: Any) -> Optional[Type[Any]]:
    """The model class inside a field type (``Optional[X]``, ``List[X]``, ``Dict[str, X]``)."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp
    for arg in typing.get_args(tp):
        m = _model_of_type(arg)
        if m is not None:
            return m
    return None


def _validator(doc: SchemaDoc, name: str) -> jsonschema.protocols.Validator:
    # The document's components go along so its "#/components/schemas/..." refs resolve.
    root = {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}
    cls = jsonschema.validators.validator_for(root, default=jsonschema.Draft202012Validator)
    return cls(root)


# ---- models ----------------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_model_follows_its_schema(doc: SchemaDoc, model: Type[Any]) -> None:
    name = model.__schema__
    if name not in _schemas(doc):
        pytest.skip(f"/openapi.json has no schema {name!r} for {model.__name__} (yet)")
    props, required = _object_shape(doc, _schemas(doc)[name])
    fields = _model_fields(model)
    lenient = set(getattr(model, "__lenient__", ()))

    assert set(fields) == set(props), (
        f"{model.__name__} vs schema {name}: fields the schema lacks {sorted(set(fields) - set(props))}, "
        f"properties the model lacks {sorted(set(props) - set(fields))}"
    )
    wrong = sorted(
        f"{f} (schema: {'required' if f in required else 'optional'}, "
        f"model: {'no default' if fields[f] else 'has a default'})"
        for f in fields
        if (f in required) != fields[f] and not (f in lenient and f in required and not fields[f])
    )
    assert not wrong, f"{model.__name__} vs schema {name}: requiredness differs for {wrong}"

    by_schema = {m.__schema__: m for m in MODELS}
    hints = typing.get_type_hints(model)
    for f, prop in props.items():
        refs = [r for r in _refs(prop) if r in by_schema]
        if refs:
            assert _model_of_type(hints[f]) is by_schema[refs[0]], (
                f"{model.__name__}.{f} should hold a {by_schema[refs[0]].__name__} (schema {refs[0]})"
            )


def test_every_answer_schema_is_modelled(doc: SchemaDoc) -> None:
    modelled = {m.__schema__ for m in MODELS}
    unmodelled = []
    for name in sorted(_response_schema_names(doc)):
        schema = _resolve(doc, _schemas(doc)[name])
        if name in modelled or schema.get("type") not in ("object", None) or "oneOf" in schema:
            continue  # modelled, or a scalar/union the models hold as a plain value
        props, _ = _object_shape(doc, schema)
        envelope = len(props) == 1 and all(
            p.get("type") == "array" and set(_refs(p)) <= modelled for p in props.values()
        )
        if not envelope:
            unmodelled.append(name)
    assert not unmodelled, f"schemas of successful answers with no model in cordon_sdk.models: {unmodelled}"


def test_known_schemas_are_checked(doc: SchemaDoc) -> None:
    # Guards against a document whose schemas all vanished (every model test would skip).
    present = [m.__name__ for m in MODELS if m.__schema__ in _schemas(doc)]
    assert {"SandboxInfo", "Limits", "CommandInfo", "CodeResult", "CodeError", "ContextInfo"} <= set(present), present


def test_error_body_is_what_errors_read(doc: SchemaDoc) -> None:
    props, required = _object_shape(doc, _schemas(doc)["ErrorBody"])
    assert set(props) == {"error"} and required == {"error"}
    detail, detail_required = _object_shape(doc, props["error"])
    assert {"code", "message"} <= set(detail) and {"code", "message"} <= detail_required
    err = _core.error_for(404, "not_found", "no sandbox x")
    assert (err.code, err.message, err.status) == ("not_found", "no sandbox x", 404)


# ---- request bodies --------------------------------------------------------------------------


def test_every_request_schema_has_a_builder(doc: SchemaDoc) -> None:
    missing = sorted(_request_schema_names(doc) - set(REQUEST_BODIES) - {"Amount", "Cmd"})
    assert not missing, f"request schemas the SDK builds no body for (add a _core.*_body): {missing}"


@pytest.mark.parametrize("name", sorted(REQUEST_BODIES))
def test_request_bodies_follow_the_schema(doc: SchemaDoc, name: str) -> None:
    if name not in _schemas(doc):
        pytest.skip(f"/openapi.json has no schema {name!r} (yet)")
    props, required = _object_shape(doc, _schemas(doc)[name])
    full, minimal = (make() for make in REQUEST_BODIES[name])
    assert set(full) == set(props), (
        f"{name}: the SDK sends {sorted(set(full) - set(props))} the schema lacks, "
        f"and cannot send {sorted(set(props) - set(full))}"
    )
    assert required <= set(minimal), f"{name}: required {sorted(required - set(minimal))} missing by default"
    validator = _validator(doc, name)
    for body in (full, minimal):
        errors = [e.message for e in validator.iter_errors(body)]
        assert not errors, f"{name}: {body} does not validate: {errors}"
