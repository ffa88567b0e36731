"""The asynchronous client: :class:`AsyncSandbox` and its ``commands``, ``files``, ``code`` and
``network``."""

# The one hand-written implementation of the client: sandbox.py is generated from this file  # async-only
# by scripts/unasync.py (async def -> def, await x -> x, AsyncSandbox -> Sandbox...).  # async-only
# Streaming callbacks may also be coroutine functions here: their results are awaited.  # async-only
from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable  # sync: from collections.abc import Iterator
from contextlib import asynccontextmanager
from types import TracebackType
from typing import (
    Any,
    Callable,
    Dict,
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
from ._core import Cmd, Duration, NetworkSpec, OutputCallback, Size, TimeoutArg, VolumeSpec
from .errors import CordonError, CordonTimeoutError, NotFoundError, SandboxError
from .models import (
    ApprovalsView,
    AuditView,
    BatchResult,
    CodeError,
    CodeResult,
    CommandInfo,
    CommitResult,
    ContextInfo,
    CreatedKey,
    Entry,
    ForkResult,
    HeldCall,
    HostEnforcement,
    ImageInfo,
    KeyInfo,
    LearnedProfile,
    MimeBundle,
    NetworkInfo,
    NetworkPolicy,
    Outcome,
    ProcessList,
    PullResult,
    SandboxInfo,
    SandboxMetrics,
    SecretInfo,
    SecretList,
    SnapshotInfo,
    UsageHistory,
    UsageNow,
    VolumeInfo,
)

__all__ = [
    "AsyncSandbox",
    "AsyncCommands",
    "AsyncCommandHandle",
    "AsyncFiles",
    "AsyncCode",
    "AsyncNetwork",
]

ResultCallback = Callable[[MimeBundle], Any]
ErrorCallback = Callable[[CodeError], Any]
EventHandler = Callable[[str, Any], Awaitable[bool]]  # sync: EventHandler = Callable[[str, Any], bool]


class _AsyncHttp:
    """One ``httpx.AsyncClient`` with the base URL, key and error mapping."""

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

    async def get_json(self, path: str, what: str, params: Optional[Mapping[str, Any]] = None) -> Mapping[str, Any]:
        resp = await self.request("GET", path, params=params)
        return _core.expect_mapping(_core.json_body(resp), what)

    async def post_json(
        self, path: str, body: Any, what: str, timeout: Optional[httpx.Timeout] = None
    ) -> Mapping[str, Any]:
        resp = await self.request("POST", path, json=body, timeout=timeout)
        return _core.expect_mapping(_core.json_body(resp), what)

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

    async def sse(self, path: str, body: Any, timeout: httpx.Timeout, handle: EventHandler) -> Optional[Any]:
        """POSTs ``body`` asking for server-sent events and hands each one to ``handle``, which
        returns True at the last. Returns the JSON body instead when the server did not stream."""
        headers = {"Accept": "text/event-stream"}
        async with self.stream("POST", path, json=body, headers=headers, timeout=timeout) as resp:
            if "text/event-stream" not in resp.headers.get("content-type", ""):
                await resp.aread()
                return _core.json_body(resp)
            parser = _core.SseParser()
            async for line in resp.aiter_lines():
                ev = parser.feed(line)
                if ev is not None and await handle(*_core.parse_event(ev)):
                    break
        return None

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
        """Output so far, whether it still runs, and its Outcome once it ended."""
        info = CommandInfo.from_dict(await self._sb._http.get_json(self._path, "command"))
        if info.outcome is not None:
            self._outcome = info.outcome
        return info

    async def wait(self, timeout: Optional[float] = None) -> Outcome:
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
        """Writes ``data`` to the command's stdin; ``close=True`` closes it afterwards (EOF)."""
        await self._sb._http.request("POST", self._path + "/stdin", json=_core.stdin_body(data, close))

    async def close_stdin(self) -> None:
        """Closes the command's stdin, so it reads end of file."""
        await self.send_stdin("", close=True)

    async def signal(self, sig: Union[int, str]) -> None:
        """Sends a signal by number or name (``"TERM"``, ``"SIGINT"``, ``9``...)."""
        await self._sb._http.request("POST", self._path + "/signal", json=_core.signal_body(sig))

    async def kill(self) -> None:
        """Sends SIGKILL."""
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
        on_stdout: Optional[OutputCallback] = ...,
        on_stderr: Optional[OutputCallback] = ...,
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
        on_stdout: Optional[OutputCallback] = ...,
        on_stderr: Optional[OutputCallback] = ...,
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
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        background: bool = False,
    ) -> Union[Outcome, AsyncCommandHandle]:
        """Runs ``cmd`` (an argv list, or a shell string run with ``/bin/sh -c``).

        Returns the :class:`~cordon_sdk.Outcome` when the command ends. A non-zero exit, a
        signal or a timeout is reported in the Outcome (``status``), not raised. With
        ``on_stdout`` / ``on_stderr`` the output is streamed to the callbacks as it comes
        (text, in order). With ``background=True`` it returns an :class:`AsyncCommandHandle`
        at once; its stdin stays open (``stdin`` is written first) for
        :meth:`AsyncCommandHandle.send_stdin`. ``timeout`` is the command's wall-clock limit
        (seconds or ``"30s"``); the server's default applies without it.
        """
        if background:
            if on_stdout is not None or on_stderr is not None:
                raise ValueError("background commands do not stream; poll handle.info() for output")
            first = _core.stdin_json(stdin)
            body = _core.exec_body(cmd, cwd, env, None, timeout, True)
            info = CommandInfo.from_dict(await self._sb._http.post_json(self._sb._path + "/exec", body, "command"))
            handle = AsyncCommandHandle(self._sb, info.command_id, info.cmd)
            if first:
                await handle.send_stdin(first)
            return handle
        body = _core.exec_body(cmd, cwd, env, stdin, timeout, False)
        http_timeout = _core.exec_timeout(self._sb._http.timeout, timeout)
        if on_stdout is None and on_stderr is None:
            return Outcome.from_dict(
                await self._sb._http.post_json(self._sb._path + "/exec", body, "outcome", http_timeout)
            )
        out, err = _core.StreamDecoder(), _core.StreamDecoder()
        outcome: Optional[Outcome] = None

        async def handle_event(name: str, payload: Any) -> bool:
            nonlocal outcome
            if name in ("stdout", "stderr") and isinstance(payload, Mapping):
                # A chunk that ends inside a UTF-8 sequence may decode to nothing yet.
                text = (out if name == "stdout" else err).chunk(payload)
                if text:
                    await _core.acall(on_stdout if name == "stdout" else on_stderr, text)
            elif name == "exit":
                outcome = Outcome.from_dict(_core.expect_mapping(payload, "exit event"))
                return True
            return False

        plain = await self._sb._http.sse(self._sb._path + "/exec", body, http_timeout, handle_event)
        if plain is not None:
            return Outcome.from_dict(_core.expect_mapping(plain, "outcome"))
        for cb, rest in ((on_stdout, out.flush()), (on_stderr, err.flush())):
            if rest:
                await _core.acall(cb, rest)
        if outcome is None:
            raise SandboxError("the stream ended before the command's exit event", code="stream_ended")
        return outcome

    async def list(self) -> List[CommandInfo]:
        """The sandbox's background commands, running and recently finished, oldest first."""
        body = await self._sb._http.get_json(self._sb._path + "/commands", "command list")
        return _core.items(body, "commands", CommandInfo.from_dict)

    async def log(self) -> List[CommandInfo]:
        """The sandbox's command log, oldest first: its last 32 foreground commands (the last
        4 KiB of each output stream, and the Outcome) and its background commands."""
        body = await self._sb._http.get_json(self._sb._path + "/logs", "command log")
        return _core.items(body, "commands", CommandInfo.from_dict)

    async def connect(self, command_id: str) -> AsyncCommandHandle:
        """A handle on a background command by id (checks that it exists)."""
        h = AsyncCommandHandle(self._sb, command_id)
        h.cmd = (await h.info()).cmd
        return h


class AsyncFiles:
    """``sandbox.files``: the sandbox's own filesystem (paths resolve inside it, as its user;
    relative paths start at ``/workspace``)."""

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sb = sandbox

    @property
    def _path(self) -> str:
        return self._sb._path + "/files"

    async def read(self, path: str) -> bytes:
        """The file's bytes."""
        resp = await self._sb._http.request(
            "GET", self._path, params={"path": path}, headers={"Accept": "application/octet-stream"}
        )
        return resp.content

    async def read_text(self, path: str, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The file's content decoded as text."""
        return (await self.read(path)).decode(encoding, errors)

    async def write(self, path: str, data: Union[bytes, bytearray, memoryview, str]) -> int:
        """Creates or replaces the file (parent directories are created). Returns bytes written."""
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
        """The entries of a directory."""
        body = await self._sb._http.get_json(self._path + "/list", "file list", params={"path": path})
        return _core.items(body, "entries", Entry.from_dict)

    async def stat(self, path: str) -> Entry:
        """One entry; raises :class:`~cordon_sdk.NotFoundError` if there is none."""
        return Entry.from_dict(await self._sb._http.get_json(self._path + "/stat", "stat", params={"path": path}))

    async def exists(self, path: str) -> bool:
        try:
            await self.stat(path)
        except NotFoundError:
            return False
        return True

    async def mkdir(self, path: str, parents: bool = True) -> None:
        """Creates a directory (with its parents unless ``parents=False``)."""
        await self._sb._http.request("POST", self._path + "/mkdir", json=_core.mkdir_body(path, parents))

    async def move(self, src: str, dst: str) -> None:
        """Renames or moves a file or directory."""
        await self._sb._http.request("POST", self._path + "/move", json=_core.move_body(src, dst))

    async def remove(self, path: str, recursive: bool = False) -> None:
        """Deletes a file, or a directory (non-empty ones need ``recursive=True``)."""
        params: Dict[str, Any] = {"path": path}
        if recursive:
            params["recursive"] = "true"
        await self._sb._http.request("DELETE", self._path, params=params)


class AsyncCode:
    """``sandbox.code``: the stateful code interpreter.

    Each context (a language and a name; ``"default"`` unless given) keeps its interpreter
    between cells: ``x = 5`` in one cell, ``x * 2`` in the next gives ``10``. Languages:
    ``"python"``, ``"javascript"``, ``"bash"``.
    """

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sb = sandbox

    async def run(
        self,
        code: str,
        *,
        language: str = "python",
        context: Optional[str] = None,
        timeout: Optional[Duration] = None,
        env: Optional[Mapping[str, Any]] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        on_result: Optional[ResultCallback] = None,
        on_error: Optional[ErrorCallback] = None,
    ) -> CodeResult:
        """Runs one cell and returns its :class:`~cordon_sdk.CodeResult`.

        An exception in the cell is not raised: it is the result's ``error`` (name, value,
        traceback). Rich values come back as MIME bundles in ``results`` (a matplotlib figure
        as ``image/png``: ``result.results[0].png``). With any ``on_*`` callback the cell is
        streamed: output text, each result and the error reach the callbacks as they happen.
        ``timeout`` limits the cell (Python is interrupted and keeps its state); the
        sandbox's default applies without it. ``env`` sets environment variables for this
        cell only: the next cell sees the context's environment as it was.
        """
        body = _core.code_body(code, language, context, timeout, env)
        http_timeout = _core.exec_timeout(self._sb._http.timeout, timeout)
        path = self._sb._path + "/code"
        if on_stdout is None and on_stderr is None and on_result is None and on_error is None:
            return CodeResult.from_dict(await self._sb._http.post_json(path, body, "code result", http_timeout))
        done: Optional[Mapping[str, Any]] = None
        saw_events = False

        async def handle_event(name: str, payload: Any) -> bool:
            nonlocal done, saw_events
            if name == "done":
                done = _core.expect_mapping(payload, "done event")
                return True
            saw_events = True
            if not isinstance(payload, Mapping):
                return False
            if name in ("stdout", "stderr"):
                text = _core.text_of(payload)
                if text:
                    await _core.acall(on_stdout if name == "stdout" else on_stderr, text)
            elif name == "result":
                await _core.acall(on_result, MimeBundle.from_dict(payload))
            elif name == "error":
                await _core.acall(on_error, CodeError.from_dict(payload))
            return False

        plain = await self._sb._http.sse(path, body, http_timeout, handle_event)
        if plain is not None:
            return CodeResult.from_dict(_core.expect_mapping(plain, "code result"))
        if done is None:
            raise SandboxError("the stream ended before the cell's done event", code="stream_ended")
        refused = _core.refused_cell(done, saw_events)
        if refused is not None:
            raise refused
        return CodeResult.from_dict(done)

    def _context_path(self, language: str, name: str) -> str:
        return f"{self._sb._path}/contexts/{_core.seg(language)}/{_core.seg(name)}"

    async def list_contexts(self) -> List[ContextInfo]:
        """The sandbox's interpreter contexts, by language and name."""
        body = await self._sb._http.get_json(self._sb._path + "/contexts", "context list")
        return _core.items(body, "contexts", ContextInfo.from_dict)

    async def create_context(self, language: str = "python", name: str = "default") -> ContextInfo:
        """Starts a context's interpreter now, so its first cell does not wait for it."""
        body = _core.context_body(language, name)
        return ContextInfo.from_dict(await self._sb._http.post_json(self._sb._path + "/contexts", body, "context"))

    async def restart_context(self, language: str = "python", name: str = "default") -> None:
        """Kills the context's interpreter: its state is gone, the next cell starts afresh."""
        await self._sb._http.request("POST", self._context_path(language, name) + "/restart")

    async def delete_context(self, language: str = "python", name: str = "default") -> None:
        """Kills the context's interpreter and forgets the context."""
        await self._sb._http.request("DELETE", self._context_path(language, name))


class AsyncNetwork:
    """``sandbox.network``: the sandbox's egress policy, changed while it runs.

    Every sandbox of a server has an egress proxy; what it lets through is the policy's
    ``allow`` list (nothing when empty). Each decision is kept in :meth:`get`'s ``events``.
    """

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sb = sandbox

    @property
    def _path(self) -> str:
        return self._sb._path + "/network"

    async def get(self) -> NetworkInfo:
        """The policy in force and the proxy's decisions so far."""
        return NetworkInfo.from_dict(await self._sb._http.get_json(self._path, "network"))

    async def set(
        self, allow: Union[str, Sequence[str]] = (), hosts: Optional[Mapping[str, str]] = None
    ) -> NetworkPolicy:
        """Replaces the policy: ``allow`` entries (``"pypi.org"``, ``"*.example.com:8443"``,
        ``"10.0.0.0/8"``; empty: no egress at all) and ``hosts`` resolved to fixed addresses
        (``{"api.test": "10.1.2.3"}``). Takes effect for new connections at once."""
        resp = await self._sb._http.request("PUT", self._path, json=_core.network_body(allow, hosts))
        body = _core.expect_mapping(_core.json_body(resp), "network policy")
        return NetworkPolicy.from_dict(body.get("policy"))


@asynccontextmanager
async def _one_call(base_url: Optional[str], api_key: Optional[str], timeout: TimeoutArg) -> AsyncIterator[_AsyncHttp]:
    """A client for one class-level call (list, images, snapshots, volumes), closed after it."""
    http = _AsyncHttp(base_url, api_key, timeout)
    try:
        yield http
    finally:
        await http.close()


class AsyncSandbox:
    """A persistent sandbox on a ``cordon serve`` node.

    Create one with :meth:`create` (or attach with :meth:`connect`); use it as a context
    manager to kill it on exit::

        async with AsyncSandbox.create() as sb:
            print((await sb.commands.run("echo hi")).stdout)

    ``base_url`` and ``api_key`` default to the ``CORDON_URL`` and ``CORDON_API_KEY``
    environment variables (then ``http://127.0.0.1:8080`` and no key). ``timeout`` is the
    time in seconds an API request may take; commands and cells get their own timeout plus
    a margin.
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
        self.code = AsyncCode(self)
        self.network = AsyncNetwork(self)

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, base_url={self._http.base_url!r})"

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
        network: NetworkSpec = None,
        *,
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
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> "_core.Creating[AsyncSandbox]":  # sync: ) -> "Sandbox":
        """Creates a sandbox.

        ``profile`` is a built-in profile (``"default"``, ``"strict"``); ``memory``/``disk`` are
        sizes (``"512M"`` or bytes); ``ttl`` a duration (``"10m"`` or seconds) after which the
        server reaps it; ``env`` is given to every command; ``metadata`` labels it for
        :meth:`list`; ``network`` is an egress allowlist (``["pypi.org"]``), none by default.
        ``output_limit`` (a size) is how much of each command's stdout and stderr is kept (the
        rest is dropped: ``limits_hit`` has ``"output"``); ``cpu_time`` (a duration) the CPU
        time each command may use (``status == "cpu_time"`` when it runs out). ``image`` names
        an image in the server's store (``"python:3.12-slim"``) whose root replaces the host's
        system directories. ``from_snapshot`` names a snapshot of the key (see :meth:`snapshot`)
        whose files the sandbox starts with; ``volumes`` mounts the key's volumes,
        ``{"/data": "datasets"}`` (read-write) or ``{"/data": ("datasets", True)}`` (read-only).
        ``template`` names one of the server's templates (``cordon serve --templates``;
        ``"code-interpreter-v1"`` and ``"base"`` are built in): its image, profile and defaults
        apply to whatever this call leaves out. ``pause_on_timeout``: when ``ttl`` runs out the
        sandbox is paused (processes frozen, memory kept) instead of ended; :meth:`resume`
        brings it back; with ``pause_keep_memory=False`` that pause goes to disk (files kept,
        memory, processes and the quota slot released; a resume starts it afresh). ``secrets`` gives it stored secrets of the key (see
        :meth:`create_secret`) as placeholders, never the values:
        ``[{"name": "gh", "env": "GH_TOKEN", "hosts": ["api.github.com"]}]`` (optionally
        ``"header"`` and ``"format"``, e.g. ``"Bearer {value}"``); the proxy puts the value into
        requests to ``hosts`` only, which ``network`` must also allow. ``learn``: learn mode —
        the sandbox runs exactly as without it and records what its commands use (network
        destinations, programs executed, peaks), for :meth:`learned_profile`. ``exec_allow``:
        the programs allowlist, ``["/usr/bin/python3", "/usr/bin/git"]`` — only these files
        may be executed (a script's ``#!`` interpreter must be listed too; needs Landlock).
        """
        body = _core.create_body(
            profile,
            memory,
            cpus,
            pids,
            disk,
            ttl,
            env,
            metadata,
            network,
            output_limit,
            cpu_time,
            image,
            from_snapshot,
            volumes,
            template,
            pause_on_timeout,
            secrets,
            learn,
            exec_allow,
            pause_keep_memory,
        )
        creating = cls._create(body, base_url, api_key, timeout)
        return _core.Creating(creating)  # sync: return creating

    @classmethod
    async def _create(
        cls, body: Dict[str, Any], base_url: Optional[str], api_key: Optional[str], timeout: TimeoutArg
    ) -> "AsyncSandbox":
        http = _AsyncHttp(base_url, api_key, timeout)
        try:
            info = SandboxInfo.from_dict(await http.post_json("/v1/sandboxes", body, "sandbox"))
        except BaseException:
            await http.close()
            raise
        return cls(info.id, _http=http, _info=info)

    @classmethod
    async def connect(
        cls,
        sandbox_id: str,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> "AsyncSandbox":
        """Attaches to an existing sandbox; raises :class:`~cordon_sdk.NotFoundError` if unknown."""
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
        """Running sandboxes of this key, oldest first; ``metadata`` keeps those whose labels match."""
        async with _one_call(base_url, api_key, timeout) as http:
            body = await http.get_json("/v1/sandboxes", "sandbox list", params=_core.metadata_params(metadata))
            return _core.items(body, "sandboxes", SandboxInfo.from_dict)

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
        network: NetworkSpec = None,
        wasm: Optional[bytes] = None,
        image: Optional[str] = None,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        request_timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> Outcome:
        """Runs one command in a fresh sandbox that is gone afterwards (``POST /v1/run``).

        ``timeout`` here is the command's wall-clock limit; ``request_timeout`` the API's.
        With ``wasm`` (a WebAssembly module's bytes), ``cmd`` is the module's argv and the
        server's wasm runtime runs it.
        ``image`` names an image in the server's store to run from.
        """
        body = _core.run_body(cmd, profile, memory, cpus, pids, disk, timeout, env, stdin, cwd, network, wasm=wasm, image=image)
        http = _AsyncHttp(base_url, api_key, request_timeout)
        try:
            return Outcome.from_dict(
                await http.post_json("/v1/run", body, "outcome", _core.exec_timeout(http.timeout, timeout))
            )
        finally:
            await http.close()

    @classmethod
    async def run_many(
        cls,
        items: Sequence[Mapping[str, Any]],
        *,
        concurrency: Optional[int] = None,
        on_result: Optional[Callable[[BatchResult], Any]] = None,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        request_timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> List[BatchResult]:
        """Runs many programs, each in fresh one-shot sandboxes (``POST /v1/batch``), at most
        ``concurrency`` at once (default: the server's CPUs).

        Each item is a dict: ``language`` and ``code`` (``"python"``, ``"cpp"``, …; compiled
        first when compiled) or ``cmd``; and optionally ``stdin``, ``files`` (path in
        ``/workspace`` to bytes), ``fetch_files``, ``timeout``, ``compile_timeout``, ``tests``
        (``[{"stdin": ..., "expected_stdout": ...}]``: one run each), ``profile``, ``memory``.
        ``on_result`` gets each item's :class:`BatchResult` as soon as it finishes; the list
        returned is in the order of ``items``. An item that fails carries its ``error``; the
        others run on.
        """
        body = _core.batch_body(items, concurrency)
        results: List[Optional[BatchResult]] = [None] * len(body["items"])
        http = _AsyncHttp(base_url, api_key, request_timeout)
        try:
            headers = {"Accept": "application/x-ndjson"}
            timeout = _core.stream_timeout(http.timeout)
            async with http.stream("POST", "/v1/batch", json=body, headers=headers, timeout=timeout) as resp:
                async for line in resp.aiter_lines():
                    if not line.strip():
                        continue
                    r = BatchResult.from_dict(_core.expect_mapping(_core.json_line(line), "batch line"))
                    if 0 <= r.index < len(results):
                        results[r.index] = r
                    await _core.acall(on_result, r)
        finally:
            await http.close()
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            raise SandboxError(f"the batch ended without a result for items {missing[:10]}", code="stream_ended")
        return [r for r in results if r is not None]

    @classmethod
    async def audit(
        cls,
        query: str = "",
        *,
        limit: int = 200,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> AuditView:
        """The key's own audit records, newest first (those whose text holds ``query``), and
        whether the log's hash chain holds (``GET /v1/audit``)."""
        async with _one_call(base_url, api_key, timeout) as http:
            body = await http.get_json("/v1/audit", "audit trail", params={"q": query, "limit": limit})
            return AuditView.from_dict(body)

    @classmethod
    async def gateway_approvals(
        cls,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> ApprovalsView:
        """The tool calls held for a person by the gateways registered with the server
        (``GET /v1/gateway/approvals``; admin keys only, others get
        :class:`~cordon_sdk.CordonError` with status 403)."""
        async with _one_call(base_url, api_key, timeout) as http:
            return ApprovalsView.from_dict(await http.get_json("/v1/gateway/approvals", "gateway approvals"))

    @classmethod
    async def answer_approval(
        cls,
        call_id: str,
        approve: bool,
        *,
        args_digest: Optional[str] = None,
        reason: Optional[str] = None,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> HeldCall:
        """Grants (naming the ``args_digest`` of the arguments shown) or refuses, with a
        ``reason``, a held call (``POST /v1/gateway/approvals/{id}``; admin keys only)."""
        body = _core.approval_body(approve, args_digest, reason)
        async with _one_call(base_url, api_key, timeout) as http:
            return HeldCall.from_dict(
                await http.post_json(f"/v1/gateway/approvals/{_core.seg(call_id)}", body, "held call")
            )

    @classmethod
    async def usage(
        cls,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> List[UsageNow]:
        """The key's running sandboxes' use at the server's last sample (``GET /v1/usage``):
        all of them in one request, as the console's live table reads them."""
        async with _one_call(base_url, api_key, timeout) as http:
            return _core.items(await http.get_json("/v1/usage", "usage"), "sandboxes", UsageNow.from_dict)

    @classmethod
    async def list_keys(
        cls,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> List[KeyInfo]:
        """Every API key of the server, never a secret (``GET /v1/keys``; admin keys only)."""
        async with _one_call(base_url, api_key, timeout) as http:
            return _core.items(await http.get_json("/v1/keys", "key list"), "keys", KeyInfo.from_dict)

    @classmethod
    async def create_key(
        cls,
        name: str,
        *,
        max_sandboxes: Optional[int] = None,
        requests_per_second: Optional[int] = None,
        admin: Optional[bool] = None,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> CreatedKey:
        """A new API key (``POST /v1/keys``; admin keys only); its ``secret`` is in the answer
        and nowhere else."""
        body = _core.key_body(name, max_sandboxes, requests_per_second, admin)
        async with _one_call(base_url, api_key, timeout) as http:
            return CreatedKey.from_dict(await http.post_json("/v1/keys", body, "key"))

    @classmethod
    async def revoke_key(
        cls,
        key_id: str,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> bool:
        """Revokes the key ``key_id`` (``DELETE /v1/keys/{id}``; admin keys only, not one's
        own); False if there is no such key."""
        async with _one_call(base_url, api_key, timeout) as http:
            try:
                await http.request("DELETE", f"/v1/keys/{_core.seg(key_id)}")
                return True
            except NotFoundError:
                return False

    @classmethod
    async def host_enforcement(
        cls,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> HostEnforcement:
        """What the server's host enforces, as ``cordon check`` reports it
        (``GET /v1/host/enforcement``; admin keys only)."""
        async with _one_call(base_url, api_key, timeout) as http:
            return HostEnforcement.from_dict(await http.get_json("/v1/host/enforcement", "host enforcement"))

    @classmethod
    async def list_images(
        cls,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> List[ImageInfo]:
        """The images in the server's store (``GET /v1/images``), newest first."""
        async with _one_call(base_url, api_key, timeout) as http:
            body = await http.get_json("/v1/images", "image list")
            return _core.items(body, "images", ImageInfo.from_dict)

    @classmethod
    async def pull_image(
        cls,
        reference: str,
        *,
        platform: Optional[str] = None,
        on_progress: Optional[Callable[[Mapping[str, Any]], Any]] = None,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = 600.0,
    ) -> PullResult:
        """Pulls ``reference`` into the server's store (``POST /v1/images/pull``), so that
        sandboxes can be created from it. ``on_progress`` gets each progress event (a dict with
        ``event``: ``resolved``, ``layer_cached``, ``layer_start``, ``layer_progress``,
        ``layer_unpacking``, ``layer_done`` or ``retry``) as the pull goes."""
        body = _core.pull_body(reference, platform)
        async with _one_call(base_url, api_key, timeout) as http:
            if on_progress is None:
                return PullResult.from_dict(await http.post_json("/v1/images/pull", body, "pull result"))
            result: Optional[PullResult] = None

            async def handle_event(name: str, payload: Any) -> bool:
                nonlocal result
                if name == "progress" and isinstance(payload, Mapping):
                    await _core.acall(on_progress, payload)
                elif name == "done":
                    result = PullResult.from_dict(_core.expect_mapping(payload, "pull result"))
                    return True
                elif name == "error":
                    err = _core.expect_mapping(payload, "pull error")
                    raise _core.error_for(None, str(err.get("code", "error")), str(err.get("message", "")))
                return False

            plain = await http.sse("/v1/images/pull", body, http.timeout, handle_event)
            if plain is not None:
                return PullResult.from_dict(_core.expect_mapping(plain, "pull result"))
            if result is None:
                raise SandboxError("the stream ended before the pull's result", code="stream_ended")
            return result

    # ---- state: snapshots, forks, volumes ---------------------------------------------------

    async def snapshot(self, name: str) -> SnapshotInfo:
        """Copies the sandbox's files (``/workspace``, the home, ``/tmp``; not memory or
        processes) into a snapshot of the key named ``name``, with its processes frozen for
        the copy; new sandboxes can start from it (``create(from_snapshot=name)``)."""
        return SnapshotInfo.from_dict(
            await self._http.post_json(self._path + "/snapshots", _core.snapshot_body(name), "snapshot")
        )

    async def commit(self, reference: str, *, changes: Optional[Sequence[str]] = None) -> CommitResult:
        """Makes an image of this sandbox, named ``reference`` (a name no image of the store has
        yet): its image's layers plus one of what it changed in its root (not ``/workspace``,
        the home or ``/tmp``, which every sandbox gets fresh), with its processes frozen for the
        read. ``changes``: Dockerfile lines for the config (``ENV``, ``CMD``, ``ENTRYPOINT``,
        ``WORKDIR``, ``USER``, ``LABEL``). A sandbox made without an image raises
        :class:`~cordon_sdk.ConflictError` (``no_image``)."""
        return CommitResult.from_dict(
            await self._http.post_json(self._path + "/commit", _core.commit_body(reference, changes), "commit")
        )

    async def fork(
        self, count: int = 1, *, ttl: Optional[Duration] = None, metadata: Optional[Mapping[str, str]] = None
    ) -> ForkResult:
        """``count`` new sandboxes with this one's files, profile, environment, network policy
        and volumes, now; this one runs on untouched. Memory and processes are not carried
        (``ForkResult.note`` says so). Connect to each with :meth:`connect`."""
        return ForkResult.from_dict(
            await self._http.post_json(self._path + "/fork", _core.fork_body(count, ttl, metadata), "fork")
        )

    @classmethod
    async def list_snapshots(
        cls,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> List[SnapshotInfo]:
        """The key's snapshots (``GET /v1/snapshots``)."""
        async with _one_call(base_url, api_key, timeout) as http:
            body = await http.get_json("/v1/snapshots", "snapshot list")
            return _core.items(body, "snapshots", SnapshotInfo.from_dict)

    @classmethod
    async def delete_snapshot(
        cls,
        name: str,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> bool:
        """Deletes the key's snapshot ``name``; False if there was none."""
        async with _one_call(base_url, api_key, timeout) as http:
            try:
                await http.request("DELETE", f"/v1/snapshots/{_core.seg(name)}")
                return True
            except NotFoundError:
                return False

    @classmethod
    async def create_volume(
        cls,
        name: str,
        size: Optional[Size] = None,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> VolumeInfo:
        """Creates the key's volume ``name`` capped at ``size`` (``"10G"``; the server's default
        when absent): persistent, mounted into sandboxes with ``create(volumes=...)``."""
        async with _one_call(base_url, api_key, timeout) as http:
            return VolumeInfo.from_dict(await http.post_json("/v1/volumes", _core.volume_body(name, size), "volume"))

    @classmethod
    async def list_volumes(
        cls,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> List[VolumeInfo]:
        """The key's volumes (``GET /v1/volumes``), with their use and who mounts them."""
        async with _one_call(base_url, api_key, timeout) as http:
            body = await http.get_json("/v1/volumes", "volume list")
            return _core.items(body, "volumes", VolumeInfo.from_dict)

    @classmethod
    async def get_volume(
        cls,
        name: str,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> VolumeInfo:
        """The key's volume ``name``; raises :class:`~cordon_sdk.NotFoundError` if unknown."""
        async with _one_call(base_url, api_key, timeout) as http:
            return VolumeInfo.from_dict(await http.get_json(f"/v1/volumes/{_core.seg(name)}", "volume"))

    @classmethod
    async def delete_volume(
        cls,
        name: str,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> bool:
        """Deletes the key's volume ``name`` and its files; False if there was none. A volume a
        running sandbox mounts is refused (:class:`~cordon_sdk.ConflictError`)."""
        async with _one_call(base_url, api_key, timeout) as http:
            try:
                await http.request("DELETE", f"/v1/volumes/{_core.seg(name)}")
                return True
            except NotFoundError:
                return False

    @classmethod
    async def create_secret(
        cls,
        name: str,
        value: str,
        metadata: Optional[Mapping[str, str]] = None,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> SecretInfo:
        """Stores the key's secret ``name`` (``POST /v1/secrets``), version 1. The value is
        write-only: no call returns it. Sandboxes get it by name (``create(secrets=...)``)."""
        async with _one_call(base_url, api_key, timeout) as http:
            body = _core.secret_body(value, metadata, name=name)
            return SecretInfo.from_dict(await http.post_json("/v1/secrets", body, "secret"))

    @classmethod
    async def update_secret(
        cls,
        name: str,
        value: str,
        metadata: Optional[Mapping[str, str]] = None,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> SecretInfo:
        """Stores a new version of secret ``name`` (its id also does); running sandboxes given
        it send the new value from their next request. ``metadata`` replaces the stored one."""
        async with _one_call(base_url, api_key, timeout) as http:
            body = _core.secret_body(value, metadata)
            resp = await http.request("PUT", f"/v1/secrets/{_core.seg(name)}", json=body)
            return SecretInfo.from_dict(_core.expect_mapping(_core.json_body(resp), "secret"))

    @classmethod
    async def get_secret(
        cls,
        name: str,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> SecretInfo:
        """Secret ``name`` (or id), never its value; raises :class:`~cordon_sdk.NotFoundError`."""
        async with _one_call(base_url, api_key, timeout) as http:
            return SecretInfo.from_dict(await http.get_json(f"/v1/secrets/{_core.seg(name)}", "secret"))

    @classmethod
    async def list_secrets(
        cls,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> List[SecretInfo]:
        """The key's secrets by name (``GET /v1/secrets``, every page), never their values."""
        out: List[SecretInfo] = []
        async with _one_call(base_url, api_key, timeout) as http:
            after: Optional[str] = None
            while True:
                params = None if after is None else {"after": after}
                page = SecretList.from_dict(await http.get_json("/v1/secrets", "secret list", params))
                out += page.secrets
                if not page.next:
                    return out
                after = page.next

    @classmethod
    async def delete_secret(
        cls,
        name: str,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: TimeoutArg = _core.DEFAULT_TIMEOUT,
    ) -> bool:
        """Destroys secret ``name`` (or id); False if there was none. Running sandboxes keep
        the value they were given until they end."""
        async with _one_call(base_url, api_key, timeout) as http:
            try:
                await http.request("DELETE", f"/v1/secrets/{_core.seg(name)}")
                return True
            except NotFoundError:
                return False

    async def info(self) -> SandboxInfo:
        """The sandbox's state, limits, metadata and expiry (also after it ended)."""
        info = SandboxInfo.from_dict(await self._http.get_json(self._path, "sandbox"))
        self._last_info = info
        return info

    async def metrics(self) -> SandboxMetrics:
        """What the sandbox uses now: CPU (since the previous call), memory, disk and
        processes, each beside its limit."""
        return SandboxMetrics.from_dict(await self._http.get_json(self._path + "/metrics", "metrics"))

    async def metrics_history(self) -> UsageHistory:
        """The sandbox's CPU and memory over its whole life, as the server sampled them from
        its cgroup (every 2 s; a long life merged into at most 512 points)."""
        return UsageHistory.from_dict(await self._http.get_json(self._path + "/metrics/history", "metrics history"))

    async def processes(self) -> ProcessList:
        """The sandbox's processes now: pid and parent inside the sandbox (its init is 1),
        state, command line (the sandbox's own text), CPU and memory."""
        return ProcessList.from_dict(await self._http.get_json(self._path + "/processes", "processes"))

    async def learned_profile(self) -> LearnedProfile:
        """The learned profile of a sandbox created with ``learn=True``: what its commands used
        so far (after :meth:`kill`, what they used in all, kept by the server until it
        restarts). ``.toml`` is the file ``cordon run --profile`` takes; ``.profile`` the same
        as a dict. A sandbox created without ``learn`` raises :class:`~cordon_sdk.ConflictError`."""
        return LearnedProfile.from_dict(await self._http.get_json(self._path + "/learned-profile", "learned profile"))

    async def is_running(self) -> bool:
        try:
            return (await self.info()).state == "running"
        except NotFoundError:
            return False

    async def set_ttl(self, ttl: Duration) -> SandboxInfo:
        """Sets the time to live, counted from now (``"30m"`` or seconds)."""
        info = SandboxInfo.from_dict(await self._http.post_json(self._path + "/ttl", _core.ttl_body(ttl), "sandbox"))
        self._last_info = info
        return info

    async def pause(self, keep_memory: bool = True) -> SandboxInfo:
        """Freezes every process of the sandbox; memory and files stay. Commands are refused
        until :meth:`resume`; the sandbox still counts against the key's quota and its TTL runs
        (its files are also kept on disk, so a restart of the server finds it paused to disk).
        ``keep_memory=False`` pauses it to disk: its files kept, its memory, processes and
        quota slot released (``paused_by == "disk"``); :meth:`resume` starts it afresh with its
        files under the same id, also after the server restarted."""
        body = _core.pause_body(keep_memory)
        info = SandboxInfo.from_dict(await self._http.post_json(self._path + "/pause", body, "sandbox"))
        self._last_info = info
        return info

    async def resume(self) -> SandboxInfo:
        """Thaws a paused sandbox (one that is not paused is left as it is)."""
        info = SandboxInfo.from_dict(await self._http.post_json(self._path + "/resume", {}, "sandbox"))
        self._last_info = info
        return info

    async def kill(self) -> bool:
        """Kills the sandbox and everything in it. False if it was already gone."""
        try:
            await self._http.request("DELETE", self._path)
        except NotFoundError:
            return False
        return True

    async def close(self) -> None:
        """Closes the HTTP connections (the sandbox keeps running)."""
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
