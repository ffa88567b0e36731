"""The synchronous client: :class:`Sandbox`, its ``commands`` and ``files``."""

from __future__ import annotations

import time
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Dict, Iterator, List, Literal, Mapping, Optional, Sequence, Type, Union, overload

import httpx

from . import _core
from ._core import Cmd, Duration, OutputCallback, Size, TimeoutArg
from .errors import CordonError, CordonTimeoutError, NotFoundError, SandboxError
from .models import CommandInfo, Entry, Outcome, SandboxInfo

__all__ = ["Sandbox", "Commands", "CommandHandle", "Files"]

Network = Union[None, Sequence[str], Mapping[str, Any]]


class _Http:
    """One ``httpx.Client`` with the base URL, key and error mapping."""

    def __init__(self, base_url: Optional[str], api_key: Optional[str], timeout: TimeoutArg) -> None:
        self.base_url = _core.resolve_base_url(base_url)
        self.timeout = _core.make_timeout(timeout)
        self.client = httpx.Client(
            base_url=self.base_url,
            headers=_core.default_headers(_core.resolve_api_key(api_key)),
            timeout=self.timeout,
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Optional[Mapping[str, Any]] = None,
        json: Any = None,
        content: Optional[bytes] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[httpx.Timeout] = None,
    ) -> httpx.Response:
        try:
            resp = self.client.request(
                method,
                path,
                params=params,
                json=json,
                content=content,
                headers=headers,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.HTTPError as e:
            raise _core.transport_error(e, method, self.base_url + path) from e
        if resp.status_code >= 400:
            raise _core.error_from_response(resp)
        return resp

    @contextmanager
    def stream(
        self,
        method: str,
        path: str,
        *,
        json: Any,
        headers: Mapping[str, str],
        timeout: httpx.Timeout,
    ) -> Iterator[httpx.Response]:
        try:
            with self.client.stream(method, path, json=json, headers=headers, timeout=timeout) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise _core.error_from_response(resp)
                yield resp
        except httpx.HTTPError as e:
            raise _core.transport_error(e, method, self.base_url + path) from e

    def close(self) -> None:
        self.client.close()


class CommandHandle:
    """A command started with ``background=True``."""

    def __init__(self, sandbox: "Sandbox", command_id: str, cmd: Optional[List[str]] = None) -> None:
        self._sb = sandbox
        self.id = command_id
        self.cmd: List[str] = list(cmd or [])
        self._outcome: Optional[Outcome] = None

    def __repr__(self) -> str:
        return f"CommandHandle(id={self.id!r}, sandbox={self._sb.id!r}, cmd={self.cmd!r})"

    @property
    def _path(self) -> str:
        return f"{self._sb._path}/commands/{_core.seg(self.id)}"

    def info(self) -> CommandInfo:
        """Output so far, whether it still runs, and its Outcome once it ended."""
        resp = self._sb._http.request("GET", self._path)
        info = CommandInfo.from_dict(_core.expect_mapping(_core.json_body(resp), "command"))
        if info.outcome is not None:
            self._outcome = info.outcome
        return info

    def wait(self, timeout: Optional[float] = None) -> Outcome:
        """Waits for the command to end and returns its Outcome.

        Raises :class:`~cordon_sdk.CordonTimeoutError` if it still runs after ``timeout``
        seconds (``None``: wait as long as it takes). The command keeps running either way.
        """
        if self._outcome is not None:
            return self._outcome
        deadline = None if timeout is None else time.monotonic() + max(0.0, float(timeout))
        while True:
            step = 60.0 if deadline is None else max(0.0, deadline - time.monotonic())
            step = min(step, 300.0)
            resp = self._sb._http.request(
                "POST",
                self._path + "/wait",
                params={"timeout": _core.duration_query(step)},
                timeout=_core.longer_timeout(self._sb._http.timeout, step),
            )
            info = CommandInfo.from_dict(_core.expect_mapping(_core.json_body(resp), "command"))
            if not info.running and info.outcome is not None:
                self._outcome = info.outcome
                return info.outcome
            if deadline is not None and time.monotonic() >= deadline:
                raise CordonTimeoutError(
                    f"command {self.id} in sandbox {self._sb.id} still runs after {timeout}s",
                    code="command_timeout",
                )

    def send_stdin(self, data: Union[str, bytes], close: bool = False) -> None:
        """Writes ``data`` to the command's stdin; ``close=True`` closes it afterwards (EOF)."""
        text = _core.stdin_json(data) or ""
        self._sb._http.request("POST", self._path + "/stdin", json={"data": text, "close": bool(close)})

    def close_stdin(self) -> None:
        """Closes the command's stdin, so it reads end of file."""
        self.send_stdin("", close=True)

    def signal(self, sig: Union[int, str]) -> None:
        """Sends a signal by number or name (``"TERM"``, ``"SIGINT"``, ``9``...)."""
        self._sb._http.request("POST", self._path + "/signal", json={"signal": _core.signal_json(sig)})

    def kill(self) -> None:
        """Sends SIGKILL."""
        self.signal("KILL")


class Commands:
    """``sandbox.commands``: run commands inside the sandbox."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    @overload
    def run(
        self,
        cmd: Cmd,
        *,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        stdin: Union[str, bytes, None] = ...,
        timeout: Optional[Duration] = ...,
        on_stdout: Optional[OutputCallback] = ...,
        on_stderr: Optional[OutputCallback] = ...,
        background: Literal[False] = ...,
    ) -> Outcome: ...

    @overload
    def run(
        self,
        cmd: Cmd,
        *,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        stdin: Union[str, bytes, None] = ...,
        timeout: Optional[Duration] = ...,
        on_stdout: None = ...,
        on_stderr: None = ...,
        background: Literal[True],
    ) -> CommandHandle: ...

    @overload
    def run(
        self,
        cmd: Cmd,
        *,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        stdin: Union[str, bytes, None] = ...,
        timeout: Optional[Duration] = ...,
        on_stdout: Optional[OutputCallback] = ...,
        on_stderr: Optional[OutputCallback] = ...,
        background: bool,
    ) -> Union[Outcome, CommandHandle]: ...

    def run(
        self,
        cmd: Cmd,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Union[str, bytes, None] = None,
        timeout: Optional[Duration] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        background: bool = False,
    ) -> Union[Outcome, CommandHandle]:
        """Runs ``cmd`` (an argv list, or a shell string run with ``/bin/sh -c``).

        Returns the :class:`Outcome` when the command ends. A non-zero exit, a signal or a
        timeout is reported in the Outcome (``status``), not raised. With ``on_stdout`` /
        ``on_stderr`` the output is streamed to the callbacks as it comes (text, in order).
        With ``background=True`` it returns a :class:`CommandHandle` at once; its stdin stays
        open (``stdin`` is written first) for :meth:`CommandHandle.send_stdin`.
        ``timeout`` is the command's wall-clock limit (seconds or ``"30s"``); the server's
        default applies without it.
        """
        if background:
            if on_stdout is not None or on_stderr is not None:
                raise ValueError("background commands do not stream; poll handle.info() for output")
            first = _core.stdin_json(stdin)
            body = _core.exec_body(cmd, cwd, env, None, timeout, True)
            resp = self._sb._http.request("POST", self._sb._path + "/exec", json=body)
            info = CommandInfo.from_dict(_core.expect_mapping(_core.json_body(resp), "command"))
            handle = CommandHandle(self._sb, info.command_id, info.cmd)
            if first:
                handle.send_stdin(first)
            return handle
        body = _core.exec_body(cmd, cwd, env, stdin, timeout, False)
        http_timeout = _core.exec_timeout(self._sb._http.timeout, timeout)
        if on_stdout is None and on_stderr is None:
            resp = self._sb._http.request("POST", self._sb._path + "/exec", json=body, timeout=http_timeout)
            return Outcome.from_dict(_core.expect_mapping(_core.json_body(resp), "outcome"))
        return self._stream(body, on_stdout, on_stderr, http_timeout)

    def _stream(
        self,
        body: Dict[str, Any],
        on_stdout: Optional[OutputCallback],
        on_stderr: Optional[OutputCallback],
        http_timeout: httpx.Timeout,
    ) -> Outcome:
        out, err = _core.StreamDecoder(), _core.StreamDecoder()
        outcome: Optional[Outcome] = None
        headers = {"Accept": "text/event-stream"}
        with self._sb._http.stream(
            "POST", self._sb._path + "/exec", json=body, headers=headers, timeout=http_timeout
        ) as resp:
            if "text/event-stream" not in resp.headers.get("content-type", ""):
                resp.read()
                outcome = Outcome.from_dict(_core.expect_mapping(_core.json_body(resp), "outcome"))
            else:
                parser = _core.SseParser()
                for line in resp.iter_lines():
                    ev = parser.feed(line)
                    if ev is None:
                        continue
                    name, payload = _core.parse_event(ev)
                    if name == "stdout" and isinstance(payload, Mapping):
                        text = out.chunk(payload)
                        if text and on_stdout is not None:
                            on_stdout(text)
                    elif name == "stderr" and isinstance(payload, Mapping):
                        text = err.chunk(payload)
                        if text and on_stderr is not None:
                            on_stderr(text)
                    elif name == "exit":
                        outcome = Outcome.from_dict(_core.expect_mapping(payload, "exit event"))
                        break
                    elif name == "error" and isinstance(payload, Mapping):
                        raise SandboxError(
                            str(payload.get("message", payload)), code=str(payload.get("code", "stream_error"))
                        )
        rest = out.flush()
        if rest and on_stdout is not None:
            on_stdout(rest)
        rest = err.flush()
        if rest and on_stderr is not None:
            on_stderr(rest)
        if outcome is None:
            raise SandboxError("the stream ended before the command's exit event", code="stream_ended")
        return outcome

    def list(self) -> List[CommandInfo]:
        """The sandbox's background commands, running and recently finished, oldest first."""
        resp = self._sb._http.request("GET", self._sb._path + "/commands")
        body = _core.expect_mapping(_core.json_body(resp), "command list")
        return [CommandInfo.from_dict(c) for c in body.get("commands") or [] if isinstance(c, Mapping)]

    def connect(self, command_id: str) -> CommandHandle:
        """A handle on a background command by id (checks that it exists)."""
        h = CommandHandle(self._sb, command_id)
        h.cmd = h.info().cmd
        return h


class Files:
    """``sandbox.files``: the sandbox's own filesystem (paths resolve inside it)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    @property
    def _path(self) -> str:
        return self._sb._path + "/files"

    def read(self, path: str) -> bytes:
        """The file's bytes."""
        resp = self._sb._http.request(
            "GET", self._path, params={"path": path}, headers={"Accept": "application/octet-stream"}
        )
        return resp.content

    def read_text(self, path: str, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The file's content decoded as text."""
        return self.read(path).decode(encoding, errors)

    def write(self, path: str, data: Union[bytes, bytearray, memoryview, str]) -> int:
        """Creates or replaces the file (parent directories are created). Returns bytes written."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        resp = self._sb._http.request(
            "PUT",
            self._path,
            params={"path": path},
            content=raw,
            headers={"Content-Type": "application/octet-stream"},
        )
        try:
            body = resp.json()
        except ValueError:
            return len(raw)
        if isinstance(body, Mapping) and isinstance(body.get("bytes"), int):
            return int(body["bytes"])
        return len(raw)

    def list(self, path: str = "/workspace") -> List[Entry]:
        """The entries of a directory."""
        resp = self._sb._http.request("GET", self._path + "/list", params={"path": path})
        body = _core.expect_mapping(_core.json_body(resp), "file list")
        return [Entry.from_dict(e) for e in body.get("entries") or [] if isinstance(e, Mapping)]

    def stat(self, path: str) -> Entry:
        """One entry; raises :class:`~cordon_sdk.NotFoundError` if there is none."""
        resp = self._sb._http.request("GET", self._path + "/stat", params={"path": path})
        return Entry.from_dict(_core.expect_mapping(_core.json_body(resp), "stat"))

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
        except NotFoundError:
            return False
        return True

    def mkdir(self, path: str, parents: bool = True) -> None:
        """Creates a directory (with its parents unless ``parents=False``)."""
        self._sb._http.request("POST", self._path + "/mkdir", json={"path": path, "parents": bool(parents)})

    def move(self, src: str, dst: str) -> None:
        """Renames or moves a file or directory."""
        self._sb._http.request("POST", self._path + "/move", json={"from": src, "to": dst})

    def remove(self, path: str, recursive: bool = False) -> None:
        """Deletes a file, or a directory (non-empty ones need ``recursive=True``)."""
        params: Dict[str, Any] = {"path": path}
        if recursive:
            params["recursive"] = "true"
        self._sb._http.request("DELETE", self._path, params=params)


class Sandbox:
    """A persistent sandbox on a ``cordon serve`` node.

    Create one with :meth:`create` (or attach with :meth:`connect`); use it as a context
    manager to kill it on exit::

        with Sandbox.create() as sb:
            print(sb.commands.run("echo hi").stdout)

    ``base_url`` and ``api_key`` default to the ``CORDON_URL`` and ``CORDON_API_KEY``
    environment variables (then ``http://127.0.0.1:8080`` and no key). ``timeout`` is the
    time in seconds an API request may take; commands get their own timeout plus a margin.
    """

    def __init__(
        self,
        sandbox_id: str,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
        _http: Optional[_Http] = None,
        _info: Optional[SandboxInfo] = None,
    ) -> None:
        if not sandbox_id:
            raise ValueError("sandbox_id must not be empty")
        self.id = sandbox_id
        self._http = _http if _http is not None else _Http(base_url, api_key, timeout)
        self._path = f"/v1/sandboxes/{_core.seg(sandbox_id)}"
        self._last_info = _info
        self.commands = Commands(self)
        self.files = Files(self)

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, base_url={self._http.base_url!r})"

    # ---- lifecycle -----------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        profile: Optional[str] = None,
        memory: Optional[Size] = None,
        cpus: Optional[float] = None,
        pids: Optional[int] = None,
        disk: Optional[Size] = None,
        ttl: Optional[Duration] = None,
        env: Optional[Mapping[str, str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        network: Network = None,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> "Sandbox":
        """Creates a sandbox.

        ``profile`` is a built-in profile (``"default"``, ``"strict"``); ``memory``/``disk`` are
        sizes (``"512M"`` or bytes); ``ttl`` a duration (``"10m"`` or seconds) after which the
        server reaps it; ``env`` is given to every command; ``metadata`` labels it for
        :meth:`list`; ``network`` is an egress allowlist (``["pypi.org"]``), none by default.
        """
        body = _core.create_body(profile, memory, cpus, pids, disk, ttl, env, metadata, network)
        http = _Http(base_url, api_key, timeout)
        try:
            resp = http.request("POST", "/v1/sandboxes", json=body)
            info = SandboxInfo.from_dict(_core.expect_mapping(_core.json_body(resp), "sandbox"))
        except BaseException:
            http.close()
            raise
        return cls(info.id, _http=http, _info=info)

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> "Sandbox":
        """Attaches to an existing sandbox; raises :class:`~cordon_sdk.NotFoundError` if unknown."""
        sb = cls(sandbox_id, base_url=base_url, api_key=api_key, timeout=timeout)
        try:
            sb.info()
        except BaseException:
            sb.close()
            raise
        return sb

    @classmethod
    def list(
        cls,
        metadata: Optional[Mapping[str, str]] = None,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> List[SandboxInfo]:
        """Running sandboxes of this key, oldest first; ``metadata`` keeps those whose labels match."""
        params = {f"metadata.{k}": str(v) for k, v in (metadata or {}).items()}
        http = _Http(base_url, api_key, timeout)
        try:
            resp = http.request("GET", "/v1/sandboxes", params=params)
            body = _core.expect_mapping(_core.json_body(resp), "sandbox list")
            return [SandboxInfo.from_dict(s) for s in body.get("sandboxes") or [] if isinstance(s, Mapping)]
        finally:
            http.close()

    @classmethod
    def run(
        cls,
        cmd: Cmd,
        *,
        profile: Optional[str] = None,
        memory: Optional[Size] = None,
        cpus: Optional[float] = None,
        pids: Optional[int] = None,
        disk: Optional[Size] = None,
        timeout: Optional[Duration] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Union[str, bytes, None] = None,
        cwd: Optional[str] = None,
        network: Network = None,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        request_timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> Outcome:
        """Runs one command in a fresh sandbox that is gone afterwards (``POST /v1/run``).

        ``timeout`` here is the command's wall-clock limit; ``request_timeout`` the API's.
        """
        body = _core.run_body(cmd, profile, memory, cpus, pids, disk, timeout, env, stdin, cwd, network)
        http = _Http(base_url, api_key, request_timeout)
        try:
            resp = http.request("POST", "/v1/run", json=body, timeout=_core.exec_timeout(http.timeout, timeout))
            return Outcome.from_dict(_core.expect_mapping(_core.json_body(resp), "outcome"))
        finally:
            http.close()

    def info(self) -> SandboxInfo:
        """The sandbox's state, limits, metadata and expiry (also after it ended)."""
        resp = self._http.request("GET", self._path)
        info = SandboxInfo.from_dict(_core.expect_mapping(_core.json_body(resp), "sandbox"))
        self._last_info = info
        return info

    def is_running(self) -> bool:
        try:
            return self.info().state == "running"
        except NotFoundError:
            return False

    def set_ttl(self, ttl: Duration) -> SandboxInfo:
        """Sets the time to live, counted from now (``"30m"`` or seconds)."""
        resp = self._http.request("POST", self._path + "/ttl", json={"ttl": _core.duration_json(ttl, "ttl")})
        info = SandboxInfo.from_dict(_core.expect_mapping(_core.json_body(resp), "sandbox"))
        self._last_info = info
        return info

    def kill(self) -> bool:
        """Kills the sandbox and everything in it. False if it was already gone."""
        try:
            self._http.request("DELETE", self._path)
        except NotFoundError:
            return False
        return True

    def close(self) -> None:
        """Closes the HTTP connections (the sandbox keeps running)."""
        self._http.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            self.kill()
        except CordonError:
            if exc is None:
                raise
        finally:
            self.close()
