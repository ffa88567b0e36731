"""The asynchronous client: :class:`AsyncSandbox`, its ``commands`` and ``files``.

It mirrors :mod:`cordon_sdk.sandbox` method for method; every call that talks to the server
is a coroutine. Streaming callbacks may be plain functions or coroutine functions.
"""

from __future__ import annotations

import inspect
import time
from contextlib import asynccontextmanager
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Generator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Type,
    Union,
    overload,
)

import httpx

from . import _core
from ._core import Cmd, Duration, Size, TimeoutArg
from .errors import CordonError, CordonTimeoutError, NotFoundError, SandboxError
from .models import CommandInfo, Entry, Outcome, SandboxInfo

__all__ = ["AsyncSandbox", "AsyncCommands", "AsyncCommandHandle", "AsyncFiles"]

Network = Union[None, Sequence[str], Mapping[str, Any]]
AsyncOutputCallback = Callable[[str], Any]
"""Called with each piece of text; may return an awaitable, which is awaited."""


async def _call(cb: Optional[AsyncOutputCallback], text: str) -> None:
    if cb is None or not text:
        return
    r = cb(text)
    if inspect.isawaitable(r):
        await r


class _AsyncHttp:
    def __init__(self, base_url: Optional[str], api_key: Optional[str], timeout: TimeoutArg) -> None:
        self.base_url = _core.resolve_base_url(base_url)
        self.timeout = _core.make_timeout(timeout)
        self.client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=_core.default_headers(_core.resolve_api_key(api_key)),
            timeout=self.timeout,
        )

    async def request(
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
            resp = await self.client.request(
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

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        json: Any,
        headers: Mapping[str, str],
        timeout: httpx.Timeout,
    ) -> AsyncIterator[httpx.Response]:
        try:
            async with self.client.stream(method, path, json=json, headers=headers, timeout=timeout) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    raise _core.error_from_response(resp)
                yield resp
        except httpx.HTTPError as e:
            raise _core.transport_error(e, method, self.base_url + path) from e

    async def close(self) -> None:
        await self.client.aclose()


class AsyncCommandHandle:
    """A command started with ``background=True``."""

    def __init__(self, sandbox: "AsyncSandbox", command_id: str, cmd: Optional[List[str]] = None) -> None:
        self._sb = sandbox
        self.id = command_id
        self.cmd: List[str] = list(cmd or [])
        self._outcome: Optional[Outcome] = None

    def __repr__(self) -> str:
        return f"AsyncCommandHandle(id={self.id!r}, sandbox={self._sb.id!r}, cmd={self.cmd!r})"

    @property
    def _path(self) -> str:
        return f"{self._sb._path}/commands/{_core.seg(self.id)}"

    async def info(self) -> CommandInfo:
        resp = await self._sb._http.request("GET", self._path)
        info = CommandInfo.from_dict(_core.expect_mapping(_core.json_body(resp), "command"))
        if info.outcome is not None:
            self._outcome = info.outcome
        return info

    async def wait(self, timeout: Optional[float] = None) -> Outcome:
        """Waits for the command to end; :class:`~cordon_sdk.CordonTimeoutError` after ``timeout`` s."""
        if self._outcome is not None:
            return self._outcome
        deadline = None if timeout is None else time.monotonic() + max(0.0, float(timeout))
        while True:
            step = 60.0 if deadline is None else max(0.0, deadline - time.monotonic())
            step = min(step, 300.0)
            resp = await self._sb._http.request(
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

    async def send_stdin(self, data: Union[str, bytes], close: bool = False) -> None:
        text = _core.stdin_json(data) or ""
        await self._sb._http.request("POST", self._path + "/stdin", json={"data": text, "close": bool(close)})

    async def close_stdin(self) -> None:
        await self.send_stdin("", close=True)

    async def signal(self, sig: Union[int, str]) -> None:
        await self._sb._http.request("POST", self._path + "/signal", json={"signal": _core.signal_json(sig)})

    async def kill(self) -> None:
        await self.signal("KILL")


class AsyncCommands:
    """``sandbox.commands``: run commands inside the sandbox."""

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sb = sandbox

    @overload
    async def run(
        self,
        cmd: Cmd,
        *,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        stdin: Union[str, bytes, None] = ...,
        timeout: Optional[Duration] = ...,
        on_stdout: Optional[AsyncOutputCallback] = ...,
        on_stderr: Optional[AsyncOutputCallback] = ...,
        background: Literal[False] = ...,
    ) -> Outcome: ...

    @overload
    async def run(
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
    ) -> AsyncCommandHandle: ...

    @overload
    async def run(
        self,
        cmd: Cmd,
        *,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        stdin: Union[str, bytes, None] = ...,
        timeout: Optional[Duration] = ...,
        on_stdout: Optional[AsyncOutputCallback] = ...,
        on_stderr: Optional[AsyncOutputCallback] = ...,
        background: bool,
    ) -> Union[Outcome, AsyncCommandHandle]: ...

    async def run(
        self,
        cmd: Cmd,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Union[str, bytes, None] = None,
        timeout: Optional[Duration] = None,
        on_stdout: Optional[AsyncOutputCallback] = None,
        on_stderr: Optional[AsyncOutputCallback] = None,
        background: bool = False,
    ) -> Union[Outcome, AsyncCommandHandle]:
        """See :meth:`cordon_sdk.sandbox.Commands.run`."""
        if background:
            if on_stdout is not None or on_stderr is not None:
                raise ValueError("background commands do not stream; poll handle.info() for output")
            first = _core.stdin_json(stdin)
            body = _core.exec_body(cmd, cwd, env, None, timeout, True)
            resp = await self._sb._http.request("POST", self._sb._path + "/exec", json=body)
            info = CommandInfo.from_dict(_core.expect_mapping(_core.json_body(resp), "command"))
            handle = AsyncCommandHandle(self._sb, info.command_id, info.cmd)
            if first:
                await handle.send_stdin(first)
            return handle
        body = _core.exec_body(cmd, cwd, env, stdin, timeout, False)
        http_timeout = _core.exec_timeout(self._sb._http.timeout, timeout)
        if on_stdout is None and on_stderr is None:
            resp = await self._sb._http.request("POST", self._sb._path + "/exec", json=body, timeout=http_timeout)
            return Outcome.from_dict(_core.expect_mapping(_core.json_body(resp), "outcome"))
        return await self._stream(body, on_stdout, on_stderr, http_timeout)

    async def _stream(
        self,
        body: Dict[str, Any],
        on_stdout: Optional[AsyncOutputCallback],
        on_stderr: Optional[AsyncOutputCallback],
        http_timeout: httpx.Timeout,
    ) -> Outcome:
        out, err = _core.StreamDecoder(), _core.StreamDecoder()
        outcome: Optional[Outcome] = None
        headers = {"Accept": "text/event-stream"}
        async with self._sb._http.stream(
            "POST", self._sb._path + "/exec", json=body, headers=headers, timeout=http_timeout
        ) as resp:
            if "text/event-stream" not in resp.headers.get("content-type", ""):
                await resp.aread()
                outcome = Outcome.from_dict(_core.expect_mapping(_core.json_body(resp), "outcome"))
            else:
                parser = _core.SseParser()
                async for line in resp.aiter_lines():
                    ev = parser.feed(line)
                    if ev is None:
                        continue
                    name, payload = _core.parse_event(ev)
                    if name == "stdout" and isinstance(payload, Mapping):
                        await _call(on_stdout, out.chunk(payload))
                    elif name == "stderr" and isinstance(payload, Mapping):
                        await _call(on_stderr, err.chunk(payload))
                    elif name == "exit":
                        outcome = Outcome.from_dict(_core.expect_mapping(payload, "exit event"))
                        break
                    elif name == "error" and isinstance(payload, Mapping):
                        raise SandboxError(
                            str(payload.get("message", payload)), code=str(payload.get("code", "stream_error"))
                        )
        await _call(on_stdout, out.flush())
        await _call(on_stderr, err.flush())
        if outcome is None:
            raise SandboxError("the stream ended before the command's exit event", code="stream_ended")
        return outcome

    async def list(self) -> List[CommandInfo]:
        resp = await self._sb._http.request("GET", self._sb._path + "/commands")
        body = _core.expect_mapping(_core.json_body(resp), "command list")
        return [CommandInfo.from_dict(c) for c in body.get("commands") or [] if isinstance(c, Mapping)]

    async def connect(self, command_id: str) -> AsyncCommandHandle:
        h = AsyncCommandHandle(self._sb, command_id)
        h.cmd = (await h.info()).cmd
        return h


class AsyncFiles:
    """``sandbox.files``: the sandbox's own filesystem (paths resolve inside it)."""

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sb = sandbox

    @property
    def _path(self) -> str:
        return self._sb._path + "/files"

    async def read(self, path: str) -> bytes:
        resp = await self._sb._http.request(
            "GET", self._path, params={"path": path}, headers={"Accept": "application/octet-stream"}
        )
        return resp.content

    async def read_text(self, path: str, encoding: str = "utf-8", errors: str = "strict") -> str:
        return (await self.read(path)).decode(encoding, errors)

    async def write(self, path: str, data: Union[bytes, bytearray, memoryview, str]) -> int:
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        resp = await self._sb._http.request(
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

    async def list(self, path: str = "/workspace") -> List[Entry]:
        resp = await self._sb._http.request("GET", self._path + "/list", params={"path": path})
        body = _core.expect_mapping(_core.json_body(resp), "file list")
        return [Entry.from_dict(e) for e in body.get("entries") or [] if isinstance(e, Mapping)]

    async def stat(self, path: str) -> Entry:
        resp = await self._sb._http.request("GET", self._path + "/stat", params={"path": path})
        return Entry.from_dict(_core.expect_mapping(_core.json_body(resp), "stat"))

    async def exists(self, path: str) -> bool:
        try:
            await self.stat(path)
        except NotFoundError:
            return False
        return True

    async def mkdir(self, path: str, parents: bool = True) -> None:
        await self._sb._http.request("POST", self._path + "/mkdir", json={"path": path, "parents": bool(parents)})

    async def move(self, src: str, dst: str) -> None:
        await self._sb._http.request("POST", self._path + "/move", json={"from": src, "to": dst})

    async def remove(self, path: str, recursive: bool = False) -> None:
        params: Dict[str, Any] = {"path": path}
        if recursive:
            params["recursive"] = "true"
        await self._sb._http.request("DELETE", self._path, params=params)


class _Creating:
    """What :meth:`AsyncSandbox.create` returns: await it, or use it in ``async with``."""

    def __init__(self, make: Callable[[], Awaitable["AsyncSandbox"]]) -> None:
        self._make = make
        self._sb: Optional[AsyncSandbox] = None

    def __await__(self) -> Generator[Any, None, "AsyncSandbox"]:
        return self._make().__await__()

    async def __aenter__(self) -> "AsyncSandbox":
        self._sb = await self._make()
        return self._sb

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._sb is not None:
            await self._sb.__aexit__(exc_type, exc, tb)


class AsyncSandbox:
    """The asynchronous :class:`~cordon_sdk.Sandbox`::

        async with AsyncSandbox.create() as sb:
            out = await sb.commands.run("echo hi")

    ``sb = await AsyncSandbox.create()`` works too (then ``await sb.kill()`` yourself).
    """

    def __init__(
        self,
        sandbox_id: str,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
        _http: Optional[_AsyncHttp] = None,
        _info: Optional[SandboxInfo] = None,
    ) -> None:
        if not sandbox_id:
            raise ValueError("sandbox_id must not be empty")
        self.id = sandbox_id
        self._http = _http if _http is not None else _AsyncHttp(base_url, api_key, timeout)
        self._path = f"/v1/sandboxes/{_core.seg(sandbox_id)}"
        self._last_info = _info
        self.commands = AsyncCommands(self)
        self.files = AsyncFiles(self)

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, base_url={self._http.base_url!r})"

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
    ) -> _Creating:
        """Creates a sandbox; see :meth:`cordon_sdk.Sandbox.create`."""
        body = _core.create_body(profile, memory, cpus, pids, disk, ttl, env, metadata, network)

        async def make() -> "AsyncSandbox":
            http = _AsyncHttp(base_url, api_key, timeout)
            try:
                resp = await http.request("POST", "/v1/sandboxes", json=body)
                info = SandboxInfo.from_dict(_core.expect_mapping(_core.json_body(resp), "sandbox"))
            except BaseException:
                await http.close()
                raise
            return cls(info.id, _http=http, _info=info)

        return _Creating(make)

    @classmethod
    async def connect(
        cls,
        sandbox_id: str,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> "AsyncSandbox":
        sb = cls(sandbox_id, base_url=base_url, api_key=api_key, timeout=timeout)
        try:
            await sb.info()
        except BaseException:
            await sb.close()
            raise
        return sb

    @classmethod
    async def list(
        cls,
        metadata: Optional[Mapping[str, str]] = None,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> List[SandboxInfo]:
        params = {f"metadata.{k}": str(v) for k, v in (metadata or {}).items()}
        http = _AsyncHttp(base_url, api_key, timeout)
        try:
            resp = await http.request("GET", "/v1/sandboxes", params=params)
            body = _core.expect_mapping(_core.json_body(resp), "sandbox list")
            return [SandboxInfo.from_dict(s) for s in body.get("sandboxes") or [] if isinstance(s, Mapping)]
        finally:
            await http.close()

    @classmethod
    async def run(
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
        body = _core.run_body(cmd, profile, memory, cpus, pids, disk, timeout, env, stdin, cwd, network)
        http = _AsyncHttp(base_url, api_key, request_timeout)
        try:
            resp = await http.request(
                "POST", "/v1/run", json=body, timeout=_core.exec_timeout(http.timeout, timeout)
            )
            return Outcome.from_dict(_core.expect_mapping(_core.json_body(resp), "outcome"))
        finally:
            await http.close()

    async def info(self) -> SandboxInfo:
        resp = await self._http.request("GET", self._path)
        info = SandboxInfo.from_dict(_core.expect_mapping(_core.json_body(resp), "sandbox"))
        self._last_info = info
        return info

    async def is_running(self) -> bool:
        try:
            return (await self.info()).state == "running"
        except NotFoundError:
            return False

    async def set_ttl(self, ttl: Duration) -> SandboxInfo:
        resp = await self._http.request(
            "POST", self._path + "/ttl", json={"ttl": _core.duration_json(ttl, "ttl")}
        )
        info = SandboxInfo.from_dict(_core.expect_mapping(_core.json_body(resp), "sandbox"))
        self._last_info = info
        return info

    async def kill(self) -> bool:
        try:
            await self._http.request("DELETE", self._path)
        except NotFoundError:
            return False
        return True

    async def close(self) -> None:
        await self._http.close()

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            await self.kill()
        except CordonError:
            if exc is None:
                raise
        finally:
            await self.close()
