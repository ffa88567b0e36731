"""Pieces shared by the sync and async clients: configuration, request bodies, error mapping
and the server-sent-events parser. No I/O happens here.

Every request body the clients send is built by a ``*_body`` function of this module, so the
tests can hold each of them against the server's OpenAPI schema."""

from __future__ import annotations

import base64
import codecs
import datetime
import inspect
import json
import os
import re
from dataclasses import dataclass
from types import TracebackType
from typing import (
    Any,
    Callable,
    Coroutine,
    Dict,
    Generator,
    Generic,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
)
from urllib.parse import quote

import httpx

from .errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    CordonConnectionError,
    CordonError,
    CordonTimeoutError,
    InsufficientStorageError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    SandboxError,
    ServerError,
)

__version__ = "0.1.0"

DEFAULT_URL = "http://127.0.0.1:8080"
"""Where ``cordon serve`` listens by default."""

DEFAULT_TIMEOUT = 60.0
"""Seconds an API request may take (commands get their own timeout plus a margin)."""

SERVER_DEFAULT_EXEC_TIMEOUT = 30.0
"""The server's wall-clock limit of a command that gives none (the default profile's)."""

EXEC_MARGIN = 30.0
"""Seconds added to a command's timeout for the HTTP request that runs it."""

Duration = Union[int, float, str, datetime.timedelta]
"""Seconds as a number, a :class:`~datetime.timedelta`, or text such as ``"500ms"``, ``"30s"``,
``"5m"``, ``"1h"``."""

Size = Union[int, str]
"""Bytes as an int, or text such as ``"256M"`` or ``"1G"``."""

Cmd = Union[str, Sequence[str]]
"""An argv list (run as is) or a shell string (run with ``/bin/sh -c``)."""

TimeoutArg = Union[float, int, None, httpx.Timeout]

OutputCallback = Callable[[str], Any]
"""Called with each piece of output text, in order. In the async client it may also be a
coroutine function (its result is awaited)."""

NetworkSpec = Union[None, Sequence[str], Mapping[str, Any]]
"""An egress allowlist (``["pypi.org", "*.example.com:8443"]``) or a whole policy
(``{"allow": [...], "hosts": {"name": "ip"}}``)."""

VolumeSpec = Union[str, Tuple[str, bool]]
"""A volume to mount: its name (read-write), or ``(name, readonly)``."""

T = TypeVar("T")


def call(cb: Optional[Callable[[T], Any]], value: T) -> None:
    """Hands one streamed piece to a user callback."""
    if cb is not None:
        cb(value)


async def acall(cb: Optional[Callable[[T], Any]], value: T) -> None:
    """Hands one streamed piece to a user callback; awaits it if it is a coroutine function."""
    if cb is not None:
        r = cb(value)
        if inspect.isawaitable(r):
            await r


class _AsyncClosing(Protocol):
    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...


S = TypeVar("S", bound=_AsyncClosing)


class Creating(Generic[S]):
    """What ``AsyncSandbox.create()`` returns: await it, or enter it with ``async with``
    (which kills the sandbox on leaving the block)."""

    def __init__(self, make: Coroutine[Any, Any, S]) -> None:
        self._make = make
        self._made: Optional[S] = None

    def __await__(self) -> Generator[Any, None, S]:
        return self._make.__await__()

    async def __aenter__(self) -> S:
        self._made = await self._make
        return self._made

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._made is not None:
            await self._made.__aexit__(exc_type, exc, tb)


def resolve_base_url(base_url: Optional[str]) -> str:
    url = base_url or os.environ.get("CORDON_URL") or DEFAULT_URL
    return url.rstrip("/")


def resolve_api_key(api_key: Optional[str]) -> Optional[str]:
    if api_key is not None:
        return api_key or None
    return os.environ.get("CORDON_API_KEY") or None


def default_headers(api_key: Optional[str]) -> Dict[str, str]:
    h = {"User-Agent": f"cordon-sdk-python/{__version__}", "Accept": "application/json"}
    if api_key:
        h["Authorization"] = f"Bearer {api_key}"
    return h


def make_timeout(timeout: TimeoutArg) -> httpx.Timeout:
    if isinstance(timeout, httpx.Timeout):
        return timeout
    return httpx.Timeout(timeout)


def seg(part: str) -> str:
    """One URL path segment, escaped."""
    if not part:
        raise ValueError("an id must not be empty")
    return quote(part, safe="")


# ---- units -------------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|sec|m|min|h)\s*$")
_FACTORS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def duration_json(v: Duration, what: str) -> Union[float, int, str]:
    """A duration as the server reads it: a number of seconds, or text with a unit."""
    if isinstance(v, bool):
        raise TypeError(f"{what}: expected seconds or a duration string, got a bool")
    if isinstance(v, datetime.timedelta):
        return v.total_seconds()
    if isinstance(v, (int, float)):
        if v <= 0:
            raise ValueError(f"{what}: must be positive")
        return v
    if isinstance(v, str):
        return v
    raise TypeError(f"{what}: expected seconds or a duration string, got {type(v).__name__}")


def duration_seconds(v: Optional[Duration]) -> Optional[float]:
    """Seconds of a duration, or ``None`` when it cannot be read here."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, datetime.timedelta):
        return v.total_seconds()
    if isinstance(v, (int, float)):
        return float(v)
    m = _DURATION.match(v)
    if not m:
        return None
    return float(m.group(1)) * _FACTORS[m.group(2)]


def duration_query(seconds: float) -> str:
    """A duration for a query string (the server wants a unit)."""
    return f"{max(0, int(round(seconds * 1000)))}ms"


def size_json(v: Size, what: str) -> Union[int, str]:
    if isinstance(v, bool):
        raise TypeError(f"{what}: expected bytes or a size string, got a bool")
    if isinstance(v, int):
        if v < 0:
            raise ValueError(f"{what}: must not be negative")
        return v
    if isinstance(v, str):
        return v
    raise TypeError(f"{what}: expected bytes or a size string, got {type(v).__name__}")


def exec_timeout(base: httpx.Timeout, command_timeout: Optional[Duration]) -> httpx.Timeout:
    """The HTTP timeout of a request that runs a command: long enough for the command."""
    secs = duration_seconds(command_timeout) if command_timeout is not None else SERVER_DEFAULT_EXEC_TIMEOUT
    if secs is None:
        # A duration we cannot read here: the server caps commands at an hour.
        secs = 3600.0
    need = secs + EXEC_MARGIN
    read = base.read
    return httpx.Timeout(
        connect=base.connect,
        read=None if read is None else max(read, need),
        write=base.write,
        pool=base.pool,
    )


def longer_timeout(base: httpx.Timeout, seconds: float) -> httpx.Timeout:
    read = base.read
    return httpx.Timeout(
        connect=base.connect,
        read=None if read is None else max(read, seconds + EXEC_MARGIN),
        write=base.write,
        pool=base.pool,
    )


# ---- bodies ------------------------------------------------------------------------------


def _str_map(v: Optional[Mapping[str, Any]], what: str) -> Dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, Mapping):
        raise TypeError(f"{what}: expected a mapping of strings")
    return {str(k): str(x) for k, x in v.items()}


def network_json(network: NetworkSpec) -> Optional[Dict[str, Any]]:
    """``["pypi.org", "files.pythonhosted.org:443"]`` or a full ``{"allow": [...], "hosts": {...}}``."""
    if network is None:
        return None
    if isinstance(network, Mapping):
        return dict(network)
    if isinstance(network, str):
        return {"allow": [network]}
    return {"allow": [str(x) for x in network]}


def network_body(allow: Union[str, Sequence[str]], hosts: Optional[Mapping[str, str]]) -> Dict[str, Any]:
    """``PUT /v1/sandboxes/{id}/network``: the whole new policy (``allow=[]`` denies everything)."""
    if isinstance(allow, str):
        allow = [allow]
    return {"allow": [str(a) for a in allow], "hosts": _str_map(hosts, "hosts")}


def cmd_json(cmd: Cmd) -> Union[str, List[str]]:
    if isinstance(cmd, str):
        if not cmd:
            raise ValueError("cmd: must not be empty")
        return cmd
    argv = [str(a) for a in cmd]
    if not argv or not argv[0]:
        raise ValueError("cmd: give an argv list or a shell string")
    return argv


def stdin_json(stdin: Union[str, bytes, None]) -> Optional[str]:
    if stdin is None:
        return None
    if isinstance(stdin, bytes):
        try:
            return stdin.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError("stdin: the API carries text; bytes must be valid UTF-8") from e
    return str(stdin)


def create_body(
    profile: Optional[str],
    memory: Optional[Size],
    cpus: Optional[float],
    pids: Optional[int],
    disk: Optional[Size],
    ttl: Optional[Duration],
    env: Optional[Mapping[str, Any]],
    metadata: Optional[Mapping[str, Any]],
    network: NetworkSpec,
    output_limit: Optional[Size] = None,
    cpu_time: Optional[Duration] = None,
    image: Optional[str] = None,
    from_snapshot: Optional[str] = None,
    volumes: Optional[Mapping[str, VolumeSpec]] = None,
    template: Optional[str] = None,
    pause_on_timeout: bool = False,
    secrets: Optional[Sequence[Mapping[str, Any]]] = None,
    learn: bool = False,
    exec_allow: Optional[Sequence[str]] = None,
    pause_keep_memory: Optional[bool] = None,
) -> Dict[str, Any]:
    """``POST /v1/sandboxes``."""
    body: Dict[str, Any] = {}
    if pause_keep_memory is not None:
        body["pause_keep_memory"] = bool(pause_keep_memory)
    if learn:
        body["learn"] = True
    if exec_allow is not None:
        if isinstance(exec_allow, str):
            raise TypeError("exec_allow: a list of paths, not one string")
        body["exec_allow"] = [str(p) for p in exec_allow]
    if secrets:
        body["secrets"] = [dict(s) for s in secrets]
    if pause_on_timeout:
        body["pause_on_timeout"] = True
    if template is not None:
        body["template"] = str(template)
    if image is not None:
        body["image"] = str(image)
    if from_snapshot is not None:
        body["from"] = str(from_snapshot)
    if volumes:
        body["volumes"] = volumes_json(volumes)
    if profile is not None:
        body["profile"] = profile
    if memory is not None:
        body["memory"] = size_json(memory, "memory")
    if cpus is not None:
        body["cpus"] = float(cpus)
    if pids is not None:
        body["pids"] = int(pids)
    if disk is not None:
        body["disk"] = size_json(disk, "disk")
    if output_limit is not None:
        body["output_limit"] = size_json(output_limit, "output_limit")
    if cpu_time is not None:
        body["cpu_time"] = duration_json(cpu_time, "cpu_time")
    if ttl is not None:
        body["ttl"] = duration_json(ttl, "ttl")
    if env:
        body["env"] = _str_map(env, "env")
    if metadata:
        body["metadata"] = _str_map(metadata, "metadata")
    net = network_json(network)
    if net is not None:
        body["network"] = net
    return body


def volumes_json(volumes: Mapping[str, VolumeSpec]) -> List[Dict[str, Any]]:
    """``{path: "name"}`` or ``{path: ("name", readonly)}`` as the API's
    ``[{name, path, readonly}]``."""
    out: List[Dict[str, Any]] = []
    for path, spec in volumes.items():
        name, readonly = (spec, False) if isinstance(spec, str) else (spec[0], bool(spec[1]))
        out.append({"name": str(name), "path": str(path), "readonly": readonly})
    return out


def snapshot_body(name: str) -> Dict[str, Any]:
    """``POST /v1/sandboxes/{id}/snapshots``."""
    return {"name": str(name)}


def commit_body(reference: str, changes: Optional[Sequence[str]]) -> Dict[str, Any]:
    """``POST /v1/sandboxes/{id}/commit``."""
    body: Dict[str, Any] = {"reference": str(reference)}
    if changes is not None:
        if isinstance(changes, str):
            raise TypeError("changes: a list of Dockerfile lines, not one string")
        body["changes"] = [str(c) for c in changes]
    return body


def pause_body(keep_memory: bool) -> Dict[str, Any]:
    """``POST /v1/sandboxes/{id}/pause``."""
    return {} if keep_memory else {"keep_memory": False}


def fork_body(count: int, ttl: Optional[Duration], metadata: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """``POST /v1/sandboxes/{id}/fork``."""
    body: Dict[str, Any] = {"count": int(count)}
    if ttl is not None:
        body["ttl"] = duration_json(ttl, "ttl")
    if metadata is not None:
        body["metadata"] = _str_map(metadata, "metadata")
    return body


def secret_body(value: str, metadata: Optional[Mapping[str, Any]], name: Optional[str] = None) -> Dict[str, Any]:
    """``POST /v1/secrets`` (with ``name``) and ``PUT /v1/secrets/{name}``."""
    body: Dict[str, Any] = {"value": str(value)}
    if name is not None:
        body["name"] = str(name)
    if metadata is not None:
        body["metadata"] = _str_map(metadata, "metadata")
    return body


def key_body(name: str, max_sandboxes: Optional[int], requests_per_second: Optional[int], admin: Optional[bool]) -> Dict[str, Any]:
    """``POST /v1/keys``."""
    body: Dict[str, Any] = {"name": str(name)}
    if max_sandboxes is not None:
        body["max_sandboxes"] = int(max_sandboxes)
    if requests_per_second is not None:
        body["requests_per_second"] = int(requests_per_second)
    if admin is not None:
        body["admin"] = bool(admin)
    return body


def approval_body(approve: bool, args_digest: Optional[str], reason: Optional[str]) -> Dict[str, Any]:
    """``POST /v1/gateway/approvals/{id}``."""
    body: Dict[str, Any] = {"approve": bool(approve)}
    if args_digest is not None:
        body["args_digest"] = str(args_digest)
    if reason is not None:
        body["reason"] = str(reason)
    return body


def volume_body(name: str, size: Optional[Size]) -> Dict[str, Any]:
    """``POST /v1/volumes``."""
    body: Dict[str, Any] = {"name": str(name)}
    if size is not None:
        body["size"] = size_json(size, "size")
    return body


def exec_body(
    cmd: Cmd,
    cwd: Optional[str],
    env: Optional[Mapping[str, Any]],
    stdin: Union[str, bytes, None],
    timeout: Optional[Duration],
    background: bool,
) -> Dict[str, Any]:
    """``POST /v1/sandboxes/{id}/exec``."""
    body: Dict[str, Any] = {"cmd": cmd_json(cmd)}
    if cwd is not None:
        body["cwd"] = cwd
    if env:
        body["env"] = _str_map(env, "env")
    s = stdin_json(stdin)
    if s is not None:
        body["stdin"] = s
    if timeout is not None:
        body["timeout"] = duration_json(timeout, "timeout")
    if background:
        body["background"] = True
    return body


def run_body(
    cmd: Cmd,
    profile: Optional[str],
    memory: Optional[Size],
    cpus: Optional[float],
    pids: Optional[int],
    disk: Optional[Size],
    timeout: Optional[Duration],
    env: Optional[Mapping[str, Any]],
    stdin: Union[str, bytes, None],
    cwd: Optional[str],
    network: NetworkSpec,
    wasm: Optional[bytes] = None,
    image: Optional[str] = None,
) -> Dict[str, Any]:
    """``POST /v1/run``; with ``wasm`` (a WebAssembly module's bytes) ``cmd`` is its argv."""
    body = create_body(profile, memory, cpus, pids, disk, None, env, None, network, image=image)
    body["cmd"] = cmd_json(cmd)
    if wasm is not None:
        if not isinstance(wasm, (bytes, bytearray, memoryview)):
            raise TypeError("wasm: expected the module's bytes")
        body["wasm"] = base64.b64encode(bytes(wasm)).decode("ascii")
    if timeout is not None:
        body["timeout"] = duration_json(timeout, "timeout")
    s = stdin_json(stdin)
    if s is not None:
        body["stdin"] = s
    if cwd is not None:
        body["cwd"] = cwd
    return body


PROGRAM_KEYS = (
    "language", "code", "cmd", "stdin", "files", "fetch_files", "timeout", "compile_timeout", "tests", "profile", "memory",
)


def program_json(item: Mapping[str, Any], i: int) -> Dict[str, Any]:
    """One item of ``POST /v1/batch``: ``language`` and ``code``, or ``cmd``; ``files`` values
    are bytes (or text) and sent base64; durations and sizes as elsewhere."""
    unknown = sorted(set(item) - set(PROGRAM_KEYS))
    if unknown:
        raise ValueError(f"items[{i}]: unknown keys {unknown} (known: {', '.join(PROGRAM_KEYS)})")
    out: Dict[str, Any] = {}
    for k, v in item.items():
        if v is None:
            continue
        if k == "cmd":
            out[k] = cmd_json(v)
        elif k == "stdin":
            out[k] = stdin_json(v)
        elif k == "files":
            out[k] = {
                str(p): base64.b64encode(c.encode("utf-8") if isinstance(c, str) else bytes(c)).decode("ascii")
                for p, c in v.items()
            }
        elif k == "fetch_files":
            out[k] = [str(p) for p in v]
        elif k in ("timeout", "compile_timeout"):
            out[k] = duration_json(v, f"items[{i}].{k}")
        elif k == "memory":
            out[k] = size_json(v, f"items[{i}].memory")
        elif k == "tests":
            out[k] = [
                {tk: (stdin_json(tv) if tk == "stdin" else str(tv)) for tk, tv in dict(t).items() if tv is not None}
                for t in v
            ]
        else:
            out[k] = str(v)
    return out


def batch_body(items: Sequence[Mapping[str, Any]], concurrency: Optional[int]) -> Dict[str, Any]:
    """``POST /v1/batch``."""
    body: Dict[str, Any] = {"items": [program_json(item, i) for i, item in enumerate(items)]}
    if concurrency is not None:
        body["concurrency"] = int(concurrency)
    return body


def stream_timeout(base: httpx.Timeout) -> httpx.Timeout:
    """No read timeout: a batch's lines come as its items finish."""
    return httpx.Timeout(connect=base.connect, read=None, write=base.write, pool=base.pool)


def pull_body(reference: str, platform: Optional[str]) -> Dict[str, Any]:
    """``POST /v1/images/pull``."""
    body: Dict[str, Any] = {"reference": reference}
    if platform is not None:
        body["platform"] = platform
    return body


def signal_body(sig: Union[int, str]) -> Dict[str, Any]:
    """``POST …/commands/{cid}/signal``: a number or a name (``"TERM"``, ``"SIGINT"``)."""
    if isinstance(sig, bool):
        raise TypeError("signal: expected a number or a name")
    if isinstance(sig, int):
        return {"signal": sig}
    return {"signal": str(sig)}


def stdin_body(data: Union[str, bytes], close: bool) -> Dict[str, Any]:
    """``POST …/commands/{cid}/stdin``."""
    return {"data": stdin_json(data) or "", "close": bool(close)}


def ttl_body(ttl: Duration) -> Dict[str, Any]:
    """``POST /v1/sandboxes/{id}/ttl``."""
    return {"ttl": duration_json(ttl, "ttl")}


def mkdir_body(path: str, parents: bool) -> Dict[str, Any]:
    """``POST …/files/mkdir``."""
    return {"path": path, "parents": bool(parents)}


def move_body(src: str, dst: str) -> Dict[str, Any]:
    """``POST …/files/move``."""
    return {"from": src, "to": dst}


def code_body(
    code: str,
    language: str,
    context: Optional[str],
    timeout: Optional[Duration],
    env: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """``POST /v1/sandboxes/{id}/code``."""
    if not isinstance(code, str):
        raise TypeError(f"code: expected a string, got {type(code).__name__}")
    body: Dict[str, Any] = {"code": code, "language": language}
    if context is not None:
        body["context"] = context
    if timeout is not None:
        body["timeout"] = duration_json(timeout, "timeout")
    if env:
        body["env"] = _str_map(env, "env")
    return body


def context_body(language: str, name: str) -> Dict[str, Any]:
    """``POST /v1/sandboxes/{id}/contexts``."""
    return {"language": language, "name": name}


def metadata_params(metadata: Optional[Mapping[str, Any]]) -> Dict[str, str]:
    """``GET /v1/sandboxes?metadata.KEY=VALUE``."""
    return {f"metadata.{k}": str(v) for k, v in _str_map(metadata, "metadata").items()}


# ---- answers -----------------------------------------------------------------------------


def _retry_after(resp: httpx.Response) -> Optional[float]:
    v = resp.headers.get("retry-after")
    if v is None:
        return None
    try:
        return float(v)
    except ValueError:
        pass
    try:
        from email.utils import parsedate_to_datetime

        when = parsedate_to_datetime(v)
        now = datetime.datetime.now(when.tzinfo)
        return max(0.0, (when - now).total_seconds())
    except (TypeError, ValueError, IndexError):
        return None


def error_from_response(resp: httpx.Response) -> CordonError:
    """The exception for an error answer. The body must have been read."""
    status = resp.status_code
    code = f"http_{status}"
    message = ""
    try:
        body = resp.json()
    except (ValueError, UnicodeDecodeError):
        body = None
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        err = body["error"]
        code = str(err.get("code") or code)
        message = str(err.get("message") or "")
    if not message:
        try:
            text = resp.text.strip()
        except UnicodeDecodeError:
            text = ""
        message = text[:500] or resp.reason_phrase or f"HTTP {status}"
    return error_for(status, code, message, _retry_after(resp))


_BY_STATUS: Dict[int, Type[CordonError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    507: InsufficientStorageError,
}


def error_for(status: Optional[int], code: str, message: str, retry_after: Optional[float] = None) -> CordonError:
    """The exception for a server error of this status and code."""
    if status == 429:
        return RateLimitError(message, code=code, status=status, retry_after=retry_after)
    cls = _BY_STATUS.get(status or 0)
    if cls is None:
        cls = ServerError if status is not None and status >= 500 else SandboxError
    return cls(message, code=code, status=status)


# The statuses of the service's error codes, for errors that reach us inside a stream (where
# the HTTP status was already 200).
_CODE_STATUS = {
    "invalid_request": 400,
    "invalid_path": 400,
    "unauthorized": 401,
    "read_only": 403,
    "not_found": 404,
    "conflict": 409,
    "kernel_failed": 409,
    "sandbox_unavailable": 409,
    "too_large": 413,
    "rate_limited": 429,
    "quota_exceeded": 429,
    "no_space": 507,
    "internal": 500,
    "kernel_died": 500,
    "sandbox_failed": 500,
}

_API_CODE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")


def refused_cell(done: Mapping[str, Any], saw_events: bool) -> Optional[CordonError]:
    """The service's refusal of a streamed cell, if the ``done`` event is one.

    Once a stream has started, the server reports a request it refuses (bad language, context
    or timeout; a kernel that cannot start) as a ``done`` event whose error is named by the
    error code (``invalid_request``), with no traceback and no cell run. Raising it keeps a
    streamed call's errors those of the same call without streaming. A cell's own errors are
    exception names (``ZeroDivisionError``, ``KernelDied``) and come with a run cell.
    """
    err = done.get("error")
    if saw_events or not isinstance(err, Mapping) or err.get("traceback"):
        return None
    name = err.get("name")
    if not isinstance(name, str) or not _API_CODE.match(name) or done.get("execution_count"):
        return None
    return error_for(_CODE_STATUS.get(name), name, str(err.get("value") or name))


def transport_error(e: httpx.HTTPError, method: str, url: str) -> CordonError:
    if isinstance(e, httpx.TimeoutException):
        return CordonTimeoutError(f"{method} {url}: no answer in time ({type(e).__name__})")
    return CordonConnectionError(f"{method} {url}: {e or type(e).__name__}")


def json_line(line: str) -> Any:
    """One line of an NDJSON answer."""
    try:
        return json.loads(line)
    except ValueError as e:
        raise SandboxError(f"the server sent a line that is not JSON: {line[:200]!r}", code="bad_response") from e


def json_body(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError as e:
        raise SandboxError(
            f"the server's answer to {resp.request.method} {resp.request.url.path} is not JSON",
            code="bad_response",
            status=resp.status_code,
        ) from e


def expect_mapping(v: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise SandboxError(f"the server's {what} is not a JSON object", code="bad_response")
    return v


def items(body: Mapping[str, Any], key: str, parse: Callable[[Mapping[str, Any]], T]) -> List[T]:
    """The objects of a list answer's ``key`` (``{"sandboxes": [...]}``), parsed; anything in
    it that is not an object is passed over."""
    return [parse(x) for x in body.get(key) or [] if isinstance(x, Mapping)]


# ---- server-sent events ------------------------------------------------------------------


@dataclass
class SseEvent:
    event: str
    data: str


class SseParser:
    """Feeds lines of a ``text/event-stream`` and yields complete events."""

    def __init__(self) -> None:
        self._event = ""
        self._data: List[str] = []

    def feed(self, line: str) -> Optional[SseEvent]:
        line = line.rstrip("\r\n")
        if line == "":
            if not self._data and not self._event:
                return None
            ev = SseEvent(self._event or "message", "\n".join(self._data))
            self._event = ""
            self._data = []
            return ev
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None

    def finish(self) -> Optional[SseEvent]:
        return self.feed("")


def text_of(payload: Mapping[str, Any]) -> str:
    """The text of a code cell's ``stdout``/``stderr`` event."""
    v = payload.get("data")
    return v if isinstance(v, str) else ""


class StreamDecoder:
    """Turns the stream's chunk events into text, exact across chunk boundaries."""

    def __init__(self) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def chunk(self, payload: Mapping[str, Any]) -> str:
        b64 = payload.get("b64")
        if isinstance(b64, str):
            raw = base64.b64decode(b64)
        else:
            raw = str(payload.get("data", "")).encode("utf-8")
        return str(self._dec.decode(raw))

    def flush(self) -> str:
        return str(self._dec.decode(b"", final=True))


def parse_event(ev: SseEvent) -> Tuple[str, Any]:
    try:
        payload = json.loads(ev.data) if ev.data else {}
    except ValueError as e:
        raise SandboxError(
            f"the server streamed a bad '{ev.event}' event: {ev.data[:200]!r}", code="bad_response"
        ) from e
    return ev.event, payload
