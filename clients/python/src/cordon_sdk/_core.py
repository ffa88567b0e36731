"""Pieces shared by the sync and async clients: configuration, request bodies, error mapping
and the server-sent-events parser. No I/O happens here."""

from __future__ import annotations

import base64
import codecs
import datetime
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote

import httpx

from .errors import (
    AuthenticationError,
    CordonConnectionError,
    CordonError,
    CordonTimeoutError,
    NotFoundError,
    RateLimitError,
    SandboxError,
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


def network_json(network: Union[None, Sequence[str], Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """``["pypi.org", "files.pythonhosted.org:443"]`` or a full ``{"allow": [...], "hosts": {...}}``."""
    if network is None:
        return None
    if isinstance(network, Mapping):
        return dict(network)
    if isinstance(network, str):
        return {"allow": [network]}
    return {"allow": [str(x) for x in network]}


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
    network: Union[None, Sequence[str], Mapping[str, Any]],
) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
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


def exec_body(
    cmd: Cmd,
    cwd: Optional[str],
    env: Optional[Mapping[str, Any]],
    stdin: Union[str, bytes, None],
    timeout: Optional[Duration],
    background: bool,
) -> Dict[str, Any]:
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
    network: Union[None, Sequence[str], Mapping[str, Any]],
) -> Dict[str, Any]:
    body = create_body(profile, memory, cpus, pids, disk, None, env, None, network)
    body["cmd"] = cmd_json(cmd)
    if timeout is not None:
        body["timeout"] = duration_json(timeout, "timeout")
    s = stdin_json(stdin)
    if s is not None:
        body["stdin"] = s
    if cwd is not None:
        body["cwd"] = cwd
    return body


def signal_json(sig: Union[int, str]) -> Union[int, str]:
    if isinstance(sig, bool):
        raise TypeError("signal: expected a number or a name")
    if isinstance(sig, int):
        return sig
    return str(sig)


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
    if status == 401:
        return AuthenticationError(message, code=code, status=status)
    if status == 404:
        return NotFoundError(message, code=code, status=status)
    if status == 429:
        return RateLimitError(message, code=code, status=status, retry_after=_retry_after(resp))
    return SandboxError(message, code=code, status=status)


def transport_error(e: httpx.HTTPError, method: str, url: str) -> CordonError:
    if isinstance(e, httpx.TimeoutException):
        return CordonTimeoutError(f"{method} {url}: no answer in time ({type(e).__name__})")
    return CordonConnectionError(f"{method} {url}: {e or type(e).__name__}")


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
