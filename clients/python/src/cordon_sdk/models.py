"""Typed views of the server's JSON bodies.

Each class follows one schema of the server's OpenAPI document (``/openapi.json``), named in
its ``__schema__``: a field without a default is one the schema requires, a field with a
default one it may omit (``tests/test_openapi.py`` holds every class against a real server's
document, so the two cannot drift). Parsing is lenient all the same: a missing field gets its
type's empty value, unknown fields are ignored, and every object keeps the JSON it was built
from in ``raw``, so fields the server adds later are not lost.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Tuple

__all__ = [
    "LearnedProfile",
    "Usage",
    "SecretInfo",
    "SecretList",
    "Enforcement",
    "NetworkEvent",
    "ImageRef",
    "Outcome",
    "Limits",
    "SandboxInfo",
    "Entry",
    "CommandInfo",
    "MimeBundle",
    "CodeError",
    "CodeResult",
    "ContextInfo",
    "NetworkPolicy",
    "NetworkInfo",
    "ImageInfo",
    "PullResult",
    "SnapshotInfo",
    "ProcessRow",
    "ProcessList",
    "CommitResult",
    "ForkResult",
    "VolumeInfo",
    "BatchError",
    "BatchTest",
    "BatchResult",
    "SandboxMetrics",
    "ChainStatus",
    "AuditView",
    "HeldCall",
    "GatewayApprovals",
    "ApprovalsView",
    "KeyInfo",
    "CreatedKey",
    "HostEnforcement",
    "UsageSample",
    "UsageHistory",
    "UsageNow",
]

LIMITS_HIT = ("memory", "pids", "cpu_time", "wall_time", "output", "disk", "files")
"""The limits an :attr:`Outcome.limits_hit` may name."""


def _raw() -> Any:
    # Not a field of the JSON: the JSON itself.
    return field(default_factory=dict, repr=False, compare=False, metadata={"json": False})


def _int(v: Any, default: int = 0) -> int:
    if v is None or isinstance(v, bool):
        return default
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _opt_int(v: Any) -> Optional[int]:
    return None if v is None else _int(v)


def _float(v: Any, default: float = 0.0) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _str(v: Any, default: str = "") -> str:
    return default if v is None else str(v)


def _opt_str(v: Any) -> Optional[str]:
    return None if v is None else str(v)


def _map(v: Any) -> Dict[str, str]:
    if not isinstance(v, Mapping):
        return {}
    return {str(k): str(x) for k, x in v.items()}


def _strs(v: Any) -> List[str]:
    if not isinstance(v, (list, tuple)):
        return []
    return [str(x) for x in v]


def _objs(v: Any) -> List[Mapping[str, Any]]:
    if not isinstance(v, (list, tuple)):
        return []
    return [x for x in v if isinstance(x, Mapping)]


def _obj(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


@dataclass
class Usage:
    """What a command consumed."""

    __schema__: ClassVar[Optional[str]] = "Usage"

    wall_ms: int
    cpu_user_ms: int
    cpu_system_ms: int
    peak_memory_bytes: int
    peak_pids: int

    @classmethod
    def from_dict(cls, d: Optional[Mapping[str, Any]]) -> "Usage":
        d = _obj(d)
        return cls(
            wall_ms=_int(d.get("wall_ms")),
            cpu_user_ms=_int(d.get("cpu_user_ms")),
            cpu_system_ms=_int(d.get("cpu_system_ms")),
            peak_memory_bytes=_int(d.get("peak_memory_bytes")),
            peak_pids=_int(d.get("peak_pids")),
        )


@dataclass
class Enforcement:
    """Which isolation layers actually held. Never claims more than the host enforced."""

    __schema__: ClassVar[Optional[str]] = "Enforcement"

    user_ns: bool
    pid_ns: bool
    net_ns: bool
    mount_ns: bool
    ipc_ns: bool
    uts_ns: bool
    cgroup_ns: bool
    seccomp: bool
    landlock_abi: int
    cgroup: str
    rlimits: bool
    host_uid: Optional[int] = None
    notes: List[str] = field(default_factory=list)
    #: What ran the program: ``"process"`` or ``"wasm"`` (None where the server does not say:
    #: the process backend).
    backend: Optional[str] = None
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Optional[Mapping[str, Any]]) -> "Enforcement":
        d = _obj(d)
        return cls(
            user_ns=bool(d.get("user_ns")),
            pid_ns=bool(d.get("pid_ns")),
            net_ns=bool(d.get("net_ns")),
            mount_ns=bool(d.get("mount_ns")),
            ipc_ns=bool(d.get("ipc_ns")),
            uts_ns=bool(d.get("uts_ns")),
            cgroup_ns=bool(d.get("cgroup_ns")),
            seccomp=bool(d.get("seccomp")),
            landlock_abi=_int(d.get("landlock_abi")),
            cgroup=_str(d.get("cgroup"), "none"),
            rlimits=bool(d.get("rlimits")),
            host_uid=_opt_int(d.get("host_uid")),
            notes=_strs(d.get("notes")),
            backend=_opt_str(d.get("backend")),
            raw=dict(d),
        )


@dataclass
class NetworkEvent:
    """One egress decision of the sandbox's proxy (``verdict`` is ``"allow"`` or ``"deny"``;
    ``time_ms`` is Unix time in milliseconds; ``bytes`` were relayed both ways)."""

    __schema__: ClassVar[Optional[str]] = "NetworkEvent"

    time_ms: int
    host: str
    port: int
    verdict: str
    reason: str
    bytes: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "NetworkEvent":
        return cls(
            time_ms=_int(d.get("time_ms")),
            host=_str(d.get("host")),
            port=_int(d.get("port")),
            verdict=_str(d.get("verdict")),
            reason=_str(d.get("reason")),
            bytes=_int(d.get("bytes")),
        )


@dataclass
class ImageRef:
    """The image a run's root came from: the reference it was found by and its manifest
    digest (``None`` for a plain directory)."""

    __schema__: ClassVar[Optional[str]] = "ImageRef"

    reference: str
    digest: Optional[str] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ImageRef":
        return cls(reference=_str(d.get("reference")), digest=_opt_str(d.get("digest")))


@dataclass
class Outcome:
    """How a command ended.

    ``status`` is one of ``"exited"``, ``"signaled"``, ``"timeout"``, ``"oom"``,
    ``"cpu_time"`` or ``"error"``. ``limits_hit`` names every limit that ended the run or
    refused something during it (``"memory"``, ``"pids"``, ``"cpu_time"``, ``"wall_time"``,
    ``"output"``, ``"disk"``, ``"files"``; empty from servers that do not report it).
    Output that is not valid UTF-8 is carried lossily in ``stdout``/``stderr``;
    :attr:`stdout_bytes` / :attr:`stderr_bytes` give the exact bytes.
    """

    __schema__: ClassVar[Optional[str]] = "Outcome"
    # Older servers leave it out; the SDK reads it as empty.
    __lenient__: ClassVar[Tuple[str, ...]] = ("limits_hit",)

    status: str
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    usage: Usage
    enforcement: Enforcement
    network: List[NetworkEvent]
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    error: Optional[str] = None
    stdout_b64: Optional[str] = None
    stderr_b64: Optional[str] = None
    limits_hit: List[str] = field(default_factory=list)
    image: Optional[ImageRef] = None
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Outcome":
        return cls(
            status=_str(d.get("status"), "error"),
            exit_code=_opt_int(d.get("exit_code")),
            signal=_opt_int(d.get("signal")),
            error=_opt_str(d.get("error")),
            stdout=_str(d.get("stdout")),
            stderr=_str(d.get("stderr")),
            stdout_truncated=bool(d.get("stdout_truncated")),
            stderr_truncated=bool(d.get("stderr_truncated")),
            stdout_b64=_opt_str(d.get("stdout_b64")),
            stderr_b64=_opt_str(d.get("stderr_b64")),
            usage=Usage.from_dict(d.get("usage")),
            enforcement=Enforcement.from_dict(d.get("enforcement")),
            network=[NetworkEvent.from_dict(n) for n in _objs(d.get("network"))],
            limits_hit=_strs(d.get("limits_hit")),
            image=ImageRef.from_dict(d["image"]) if isinstance(d.get("image"), Mapping) else None,
            raw=dict(d),
        )

    @property
    def ok(self) -> bool:
        """True when the command exited with code 0."""
        return self.status == "exited" and self.exit_code == 0

    @property
    def stdout_bytes(self) -> bytes:
        """The exact bytes of stdout (as kept under the output limit)."""
        if self.stdout_b64 is not None:
            return base64.b64decode(self.stdout_b64)
        return self.stdout.encode("utf-8")

    @property
    def stderr_bytes(self) -> bytes:
        """The exact bytes of stderr (as kept under the output limit)."""
        if self.stderr_b64 is not None:
            return base64.b64decode(self.stderr_b64)
        return self.stderr.encode("utf-8")


@dataclass
class Limits:
    """A sandbox's limits, in bytes, cores and processes."""

    __schema__: ClassVar[Optional[str]] = "LimitsView"

    memory_bytes: int
    cpus: float
    pids: int
    disk_bytes: int
    output_limit_bytes: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Limits":
        return cls(
            memory_bytes=_int(d.get("memory_bytes")),
            cpus=_float(d.get("cpus")),
            pids=_int(d.get("pids")),
            disk_bytes=_int(d.get("disk_bytes")),
            output_limit_bytes=_int(d.get("output_limit_bytes")),
        )


@dataclass
class SandboxInfo:
    """What the server knows about a sandbox.

    ``state`` is ``"running"``, ``"paused"``, ``"deleted"``, ``"expired"``, ``"reaped"`` or
    ``"failed"``; ``created_at`` and ``expires_at`` are Unix seconds. ``enforcement`` and
    ``limits`` are only known while the sandbox lives; ``paused_by`` (``"cgroup-freezer"``,
    ``"sigstop"``, or ``"disk"`` when it is paused to disk) only while it is paused;
    ``pause_on_timeout``: its ``ttl`` running out pauses it instead of ending it; ``note``: what
    a create's caller should know (``code-interpreter-v1`` on the host's Python).
    """

    __schema__: ClassVar[Optional[str]] = "SandboxInfo"

    id: str
    state: str
    profile: str
    created_at: int
    expires_at: int
    metadata: Dict[str, str]
    enforcement: Optional[Enforcement]
    limits: Optional[Limits] = None
    ended_reason: Optional[str] = None
    paused_by: Optional[str] = None
    pause_on_timeout: bool = False
    note: Optional[str] = None
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SandboxInfo":
        enf = d.get("enforcement")
        lim = d.get("limits")
        return cls(
            id=_str(d.get("id")),
            state=_str(d.get("state")),
            profile=_str(d.get("profile")),
            created_at=_int(d.get("created_at")),
            expires_at=_int(d.get("expires_at")),
            metadata=_map(d.get("metadata")),
            enforcement=Enforcement.from_dict(enf) if isinstance(enf, Mapping) else None,
            limits=Limits.from_dict(lim) if isinstance(lim, Mapping) else None,
            ended_reason=_opt_str(d.get("ended_reason")),
            paused_by=_opt_str(d.get("paused_by")),
            pause_on_timeout=d.get("pause_on_timeout") is True,
            note=_opt_str(d.get("note")),
            raw=dict(d),
        )

    @property
    def running(self) -> bool:
        return self.state == "running"


@dataclass
class Entry:
    """A file, directory or link inside a sandbox.

    ``type`` is ``"file"``, ``"dir"``, ``"symlink"`` or another kind the server names;
    ``mode`` holds the permission bits; ``modified`` is the modification time in Unix
    seconds; ``target`` is a symlink's target text (not resolved).
    """

    __schema__: ClassVar[Optional[str]] = "Entry"

    name: str
    path: str
    type: str
    size: int
    mode: int
    modified: int
    target: Optional[str] = None
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Entry":
        mode = d.get("mode")
        if isinstance(mode, str):
            try:
                mode_i = int(mode, 8)
            except ValueError:
                mode_i = 0
        else:
            mode_i = _int(mode)
        return cls(
            name=_str(d.get("name")),
            path=_str(d.get("path")),
            type=_str(d.get("type")),
            size=_int(d.get("size")),
            mode=mode_i,
            modified=_int(d.get("modified")),
            target=_opt_str(d.get("target")),
            raw=dict(d),
        )

    @property
    def is_dir(self) -> bool:
        return self.type in ("dir", "directory")

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    @property
    def is_symlink(self) -> bool:
        return self.type in ("symlink", "link")


@dataclass
class CommandInfo:
    """A background command: its output so far and, once it ended, its :class:`Outcome`."""

    __schema__: ClassVar[Optional[str]] = "CommandInfo"

    command_id: str
    cmd: List[str]
    running: bool
    started_at_ms: int
    stdout: str
    stderr: str
    outcome: Optional[Outcome] = None
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CommandInfo":
        o = d.get("outcome")
        return cls(
            command_id=_str(d.get("command_id")),
            cmd=_strs(d.get("cmd")),
            running=bool(d.get("running")),
            started_at_ms=_int(d.get("started_at_ms")),
            stdout=_str(d.get("stdout")),
            stderr=_str(d.get("stderr")),
            outcome=Outcome.from_dict(o) if isinstance(o, Mapping) else None,
            raw=dict(d),
        )


# ---- code interpreter --------------------------------------------------------------------


@dataclass
class MimeBundle:
    """One rich result of a cell: the same value in several formats, by MIME type.

    ``data`` maps each MIME type to its value as the server sent it: text for ``text/*`` and
    ``image/svg+xml``, base64 text for binary formats (``image/png``, ``image/jpeg``...),
    any JSON value for ``application/json``. The properties decode the common ones.
    ``is_main_result`` marks the value of the cell's last expression (``display()`` and
    figures give the others).
    """

    __schema__: ClassVar[Optional[str]] = None  # the document has these as free-form objects

    data: Dict[str, Any]
    is_main_result: bool = False
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MimeBundle":
        return cls(
            data={str(k): v for k, v in d.items() if k != "is_main_result"},
            is_main_result=bool(d.get("is_main_result")),
            raw=dict(d),
        )

    def formats(self) -> List[str]:
        """The MIME types this result comes in."""
        return sorted(self.data)

    def __contains__(self, mime: object) -> bool:
        return mime in self.data

    def _text(self, mime: str) -> Optional[str]:
        v = self.data.get(mime)
        return v if isinstance(v, str) else None

    def _binary(self, mime: str) -> Optional[bytes]:
        v = self.data.get(mime)
        if not isinstance(v, str):
            return None
        try:
            return base64.b64decode(v, validate=False)
        except ValueError:
            return None

    @property
    def text(self) -> Optional[str]:
        """``text/plain``: the ``repr`` of the value (every result has it)."""
        return self._text("text/plain")

    @property
    def html(self) -> Optional[str]:
        return self._text("text/html")

    @property
    def markdown(self) -> Optional[str]:
        return self._text("text/markdown")

    @property
    def latex(self) -> Optional[str]:
        return self._text("text/latex")

    @property
    def svg(self) -> Optional[str]:
        return self._text("image/svg+xml")

    @property
    def javascript(self) -> Optional[str]:
        return self._text("application/javascript")

    @property
    def json(self) -> Any:
        """``application/json`` as a Python value (``None`` when absent)."""
        return self.data.get("application/json")

    @property
    def png(self) -> Optional[bytes]:
        """``image/png`` as bytes (a matplotlib figure comes back as one)."""
        return self._binary("image/png")

    @property
    def jpeg(self) -> Optional[bytes]:
        return self._binary("image/jpeg")

    @property
    def gif(self) -> Optional[bytes]:
        return self._binary("image/gif")

    @property
    def pdf(self) -> Optional[bytes]:
        return self._binary("application/pdf")


@dataclass
class CodeError:
    """An exception a cell raised (or ``KernelDied``/``TimeoutError`` when its kernel was lost)."""

    __schema__: ClassVar[Optional[str]] = "CodeError"

    name: str
    value: str
    traceback: List[str]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CodeError":
        return cls(name=_str(d.get("name")), value=_str(d.get("value")), traceback=_strs(d.get("traceback")))

    def __str__(self) -> str:
        return f"{self.name}: {self.value}" if self.value else self.name


@dataclass
class CodeResult:
    """What a cell did: its output, its rich results and, if it raised, the error.

    A cell that raises is not an exception of the SDK: look at ``error``. ``state_lost`` says
    the context's kernel was restarted (it died or ignored an interrupt) and earlier state is
    gone. ``execution_count`` counts the cells of the context. ``status`` and ``limits_hit`` say
    how the cell ended in the words of an :class:`Outcome` (``"exited"`` when it ran to its end,
    raised or not; ``"timeout"``, ``"oom"``, ``"cpu_time"``... when a limit ended it).
    """

    __schema__: ClassVar[Optional[str]] = "CodeResult"
    # Older servers leave them out; the SDK reads a cell that ran as ``"exited"``.
    __lenient__: ClassVar[Tuple[str, ...]] = ("status", "limits_hit")

    stdout: str
    stderr: str
    results: List[MimeBundle]
    execution_count: int
    state_lost: bool
    stdout_truncated: bool
    stderr_truncated: bool
    results_truncated: bool
    status: str = "exited"
    error: Optional[CodeError] = None
    limits_hit: List[str] = field(default_factory=list)
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CodeResult":
        err = d.get("error")
        return cls(
            stdout=_str(d.get("stdout")),
            stderr=_str(d.get("stderr")),
            results=[MimeBundle.from_dict(r) for r in _objs(d.get("results"))],
            execution_count=_int(d.get("execution_count")),
            state_lost=bool(d.get("state_lost")),
            stdout_truncated=bool(d.get("stdout_truncated")),
            stderr_truncated=bool(d.get("stderr_truncated")),
            results_truncated=bool(d.get("results_truncated")),
            status=_str(d.get("status"), "exited"),
            error=CodeError.from_dict(err) if isinstance(err, Mapping) else None,
            limits_hit=_strs(d.get("limits_hit")),
            raw=dict(d),
        )

    @property
    def ok(self) -> bool:
        """True when the cell ran without an error."""
        return self.error is None

    @property
    def main_result(self) -> Optional[MimeBundle]:
        """The value of the cell's last expression, if it had one."""
        for r in self.results:
            if r.is_main_result:
                return r
        return None

    @property
    def text(self) -> Optional[str]:
        """The main result's ``text/plain`` (``"10"`` for a cell ending in ``x * 2``)."""
        r = self.main_result
        return r.text if r is not None else None


@dataclass
class ContextInfo:
    """An interpreter context: its own state, kept between cells."""

    __schema__: ClassVar[Optional[str]] = "ContextInfo"

    language: str
    name: str
    execution_count: int
    alive: bool

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ContextInfo":
        return cls(
            language=_str(d.get("language")),
            name=_str(d.get("name")),
            execution_count=_int(d.get("execution_count")),
            alive=bool(d.get("alive")),
        )


# ---- network -----------------------------------------------------------------------------


@dataclass
class NetworkPolicy:
    """A sandbox's egress policy: ``allow`` entries (``DOMAIN[:PORT]``, ``*.DOMAIN``,
    ``IP[:PORT]``, ``CIDR``) and ``hosts`` the proxy resolves to fixed addresses."""

    __schema__: ClassVar[Optional[str]] = "NetworkPolicy"

    allow: List[str] = field(default_factory=list)
    hosts: Dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Optional[Mapping[str, Any]]) -> "NetworkPolicy":
        d = _obj(d)
        return cls(allow=_strs(d.get("allow")), hosts=_map(d.get("hosts")))


@dataclass
class NetworkInfo:
    """``GET /v1/sandboxes/{id}/network``: the policy in force and the proxy's decisions so far."""

    __schema__: ClassVar[Optional[str]] = "NetworkInfo"

    policy: NetworkPolicy
    events: List[NetworkEvent]
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "NetworkInfo":
        return cls(
            policy=NetworkPolicy.from_dict(d.get("policy")),
            events=[NetworkEvent.from_dict(e) for e in _objs(d.get("events"))],
            raw=dict(d),
        )


# ---- images ------------------------------------------------------------------------------


@dataclass
class ImageInfo:
    """An image in the server's store (``GET /v1/images``): the references that name it, its
    manifest digest, platform, layer count and sizes."""

    __schema__: ClassVar[Optional[str]] = "ImageView"

    names: List[str]
    digest: str
    platform: str
    layers: int
    size_bytes: int
    unpacked_bytes: int
    added: int
    source: str
    created: Optional[str] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ImageInfo":
        return cls(
            names=_strs(d.get("names")),
            digest=_str(d.get("digest")),
            platform=_str(d.get("platform")),
            layers=_int(d.get("layers")),
            size_bytes=_int(d.get("size_bytes")),
            unpacked_bytes=_int(d.get("unpacked_bytes")),
            added=_int(d.get("added")),
            source=_str(d.get("source")),
            created=_opt_str(d.get("created")),
        )


@dataclass
class PullResult:
    """What ``POST /v1/images/pull`` did: the normalised reference and the image now stored."""

    __schema__: ClassVar[Optional[str]] = "PullResult"

    reference: str
    image: ImageInfo

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "PullResult":
        return cls(reference=_str(d.get("reference")), image=ImageInfo.from_dict(_obj(d.get("image"))))


# ---- state: snapshots, forks, volumes ------------------------------------------------------


@dataclass
class SnapshotInfo:
    """A snapshot of a sandbox's files (``/workspace``, the home, ``/tmp``): what
    :meth:`~cordon_sdk.AsyncSandbox.snapshot` took and ``list_snapshots`` lists. ``frozen_ms``
    is how long the sandbox's processes were frozen for the copy; ``skipped`` names entries not
    carried (FIFOs, device nodes, …), ``not_carried`` what a snapshot never holds (memory,
    processes)."""

    __schema__: ClassVar[Optional[str]] = "SnapshotInfo"

    name: str
    sandbox: str
    created_at: int
    bytes: int
    files: int
    dirs: int
    symlinks: int
    skipped: List[str]
    skipped_count: int
    frozen_ms: int
    freeze_method: str
    carried: List[str]
    not_carried: List[str]
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SnapshotInfo":
        return cls(
            name=_str(d.get("name")),
            sandbox=_str(d.get("sandbox")),
            created_at=_int(d.get("created_at")),
            bytes=_int(d.get("bytes")),
            files=_int(d.get("files")),
            dirs=_int(d.get("dirs")),
            symlinks=_int(d.get("symlinks")),
            skipped=_strs(d.get("skipped")),
            skipped_count=_int(d.get("skipped_count")),
            frozen_ms=_int(d.get("frozen_ms")),
            freeze_method=_str(d.get("freeze_method")),
            carried=_strs(d.get("carried")),
            not_carried=_strs(d.get("not_carried")),
            raw=dict(d),
        )


@dataclass
class ForkResult:
    """What :meth:`~cordon_sdk.AsyncSandbox.fork` made: new sandboxes with the parent's files,
    profile, environment, network policy and volumes (``note`` says what is not carried:
    memory and processes)."""

    __schema__: ClassVar[Optional[str]] = "ForkResult"

    sandboxes: List[SandboxInfo]
    frozen_ms: int
    freeze_method: str
    carried: List[str]
    not_carried: List[str]
    note: str
    skipped: List[str]
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ForkResult":
        return cls(
            sandboxes=[SandboxInfo.from_dict(s) for s in _objs(d.get("sandboxes"))],
            frozen_ms=_int(d.get("frozen_ms")),
            freeze_method=_str(d.get("freeze_method")),
            carried=_strs(d.get("carried")),
            not_carried=_strs(d.get("not_carried")),
            note=_str(d.get("note")),
            skipped=_strs(d.get("skipped")),
            raw=dict(d),
        )


@dataclass
class VolumeInfo:
    """A named, persistent volume of the key: its cap and use in bytes, and the running
    sandboxes that mount it."""

    __schema__: ClassVar[Optional[str]] = "VolumeInfo"

    name: str
    size_bytes: int
    created_at: int
    used_bytes: Optional[int] = None
    mounted_by: List[str] = field(default_factory=list)
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "VolumeInfo":
        return cls(
            name=_str(d.get("name")),
            size_bytes=_int(d.get("size_bytes")),
            created_at=_int(d.get("created_at")),
            used_bytes=_opt_int(d.get("used_bytes")),
            mounted_by=_strs(d.get("mounted_by")),
            raw=dict(d),
        )


@dataclass
class BatchError:
    """Why one item of a batch did not run (an unknown language, a missing toolchain, a path
    outside the item's workspace, …); the other items ran on."""

    __schema__: ClassVar[Optional[str]] = "BatchError"

    code: str
    message: str
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "BatchError":
        return cls(code=_str(d.get("code")), message=_str(d.get("message")), raw=dict(d))


@dataclass
class BatchTest:
    """One test of a batch item: its run, and whether it passed (exited 0 and, when the test
    gave ``expected_stdout``, printed it, trailing whitespace aside)."""

    __schema__: ClassVar[Optional[str]] = "TestResult"

    passed: bool
    outcome: Outcome
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "BatchTest":
        return cls(passed=bool(d.get("passed")), outcome=Outcome.from_dict(_obj(d.get("outcome"))), raw=dict(d))


@dataclass
class BatchResult:
    """One item of :meth:`Sandbox.run_many`: ``index`` is its place in the items given;
    ``passed`` says every step exited 0 and every test passed; ``compile`` is the compile
    step's Outcome (compiled languages), ``outcome`` the run's (absent after a failed compile,
    and with ``tests``, which carry one Outcome each); ``files`` the ``fetch_files`` that
    existed, as bytes; ``error`` why the item did not run at all."""

    __schema__: ClassVar[Optional[str]] = "BatchLine"

    index: int
    passed: Optional[bool] = None
    compile: Optional[Outcome] = None
    outcome: Optional[Outcome] = None
    tests: Optional[List[BatchTest]] = None
    files: Optional[Dict[str, bytes]] = None
    error: Optional[BatchError] = None
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "BatchResult":
        def outcome(v: Any) -> Optional[Outcome]:
            return Outcome.from_dict(v) if isinstance(v, Mapping) else None

        files = d.get("files")
        tests = d.get("tests")
        err = d.get("error")
        passed = d.get("passed")
        return cls(
            index=_int(d.get("index")),
            passed=passed if isinstance(passed, bool) else None,
            compile=outcome(d.get("compile")),
            outcome=outcome(d.get("outcome")),
            tests=[BatchTest.from_dict(t) for t in _objs(tests)] if tests is not None else None,
            files={str(k): base64.b64decode(v) for k, v in files.items()} if isinstance(files, Mapping) else None,
            error=BatchError.from_dict(err) if isinstance(err, Mapping) else None,
            raw=dict(d),
        )


@dataclass
class LearnedProfile:
    """A learning sandbox's learned profile (:meth:`Sandbox.learned_profile`): ``toml`` is the
    file ``cordon run --profile`` takes (it ``extends`` the sandbox's built-in, each entry with
    a comment saying why), ``profile`` the same as a dict; ``ended`` once the sandbox has ended
    (what it used in all), ``commands`` the commands that ended while it learned."""

    __schema__: ClassVar[Optional[str]] = "LearnedProfile"

    sandbox_id: str
    ended: bool
    commands: int
    toml: str
    profile: Dict[str, Any]
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LearnedProfile":
        profile = d.get("profile")
        return cls(
            sandbox_id=_str(d.get("sandbox_id")),
            ended=d.get("ended") is True,
            commands=_int(d.get("commands")),
            toml=_str(d.get("toml")),
            profile=dict(profile) if isinstance(profile, Mapping) else {},
            raw=dict(d),
        )


@dataclass
class SandboxMetrics:
    """What a running sandbox uses now (:meth:`Sandbox.metrics`): CPU since the previous
    request (0-100, of all its CPUs), memory, disk and processes, each beside its limit."""

    __schema__: ClassVar[Optional[str]] = "SandboxMetrics"

    timestamp_ms: int
    cpu_count: int
    cpu_used_pct: float
    mem_used: int
    mem_total: int
    disk_used: int
    disk_total: int
    processes: int
    processes_max: int
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SandboxMetrics":
        return cls(
            timestamp_ms=_int(d.get("timestamp_ms")),
            cpu_count=_int(d.get("cpu_count")),
            cpu_used_pct=_float(d.get("cpu_used_pct")),
            mem_used=_int(d.get("mem_used")),
            mem_total=_int(d.get("mem_total")),
            disk_used=_int(d.get("disk_used")),
            disk_total=_int(d.get("disk_total")),
            processes=_int(d.get("processes")),
            processes_max=_int(d.get("processes_max")),
            raw=dict(d),
        )


@dataclass
class ProcessRow:
    """One process of a sandbox (:meth:`Sandbox.processes`): its pid and parent's pid inside
    the sandbox (the init is 1), the kernel's one-letter ``state``, its ``command`` line (the
    sandbox's own text, its first 1 KiB), CPU used and resident memory."""

    __schema__: ClassVar[Optional[str]] = "ProcessRow"

    pid: int
    ppid: int
    state: str
    command: str
    cpu_ns: int
    rss_bytes: int
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ProcessRow":
        return cls(
            pid=_int(d.get("pid")),
            ppid=_int(d.get("ppid")),
            state=_str(d.get("state")),
            command=_str(d.get("command")),
            cpu_ns=_int(d.get("cpu_ns")),
            rss_bytes=_int(d.get("rss_bytes")),
            raw=dict(d),
        )


@dataclass
class ProcessList:
    """A sandbox's processes now, by pid inside it."""

    __schema__: ClassVar[Optional[str]] = "ProcessList"

    processes: List[ProcessRow]
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ProcessList":
        rows = d.get("processes")
        return cls(
            processes=[ProcessRow.from_dict(r) for r in rows if isinstance(r, Mapping)] if isinstance(rows, list) else [],
            raw=dict(d),
        )


@dataclass
class CommitResult:
    """The image a commit made (:meth:`Sandbox.commit`): its full ``reference`` and manifest
    ``digest``, the ``base`` image it was made from, its ``layers`` (the base's plus one of what
    the sandbox changed: ``layer_digest``, ``layer_size``), how long the sandbox was frozen, and
    what an image never holds (``not_carried``: ``/workspace``, the home, ``/tmp``, …)."""

    __schema__: ClassVar[Optional[str]] = "CommitResult"

    reference: str
    digest: str
    base: str
    layers: int
    layer_digest: str
    layer_size: int
    frozen_ms: int
    not_carried: List[str]
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CommitResult":
        return cls(
            reference=_str(d.get("reference")),
            digest=_str(d.get("digest")),
            base=_str(d.get("base")),
            layers=_int(d.get("layers")),
            layer_digest=_str(d.get("layer_digest")),
            layer_size=_int(d.get("layer_size")),
            frozen_ms=_int(d.get("frozen_ms")),
            not_carried=_strs(d.get("not_carried")),
            raw=dict(d),
        )


@dataclass
class ChainStatus:
    """The audit log's hash chain, checked against its key and head: ``intact``, or the first
    break (``broken``) and its ``line``."""

    __schema__: ClassVar[Optional[str]] = "ChainStatus"

    intact: bool
    records: int
    broken: Optional[str] = None
    line: Optional[int] = None
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ChainStatus":
        return cls(
            intact=bool(d.get("intact")),
            records=_int(d.get("records")),
            broken=_opt_str(d.get("broken")),
            line=_opt_int(d.get("line")),
            raw=dict(d),
        )


@dataclass
class AuditView:
    """The key's own audit records, newest first (each the JSON record as written), and the
    log's chain (:meth:`Sandbox.audit`)."""

    __schema__: ClassVar[Optional[str]] = "AuditView"

    records: List[Dict[str, Any]]
    chain: ChainStatus
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "AuditView":
        return cls(
            records=[dict(r) for r in _objs(d.get("records"))],
            chain=ChainStatus.from_dict(_obj(d.get("chain"))),
            raw=dict(d),
        )


@dataclass
class SecretInfo:
    """A stored secret of the key: its name, id and version, never its value."""

    __schema__: ClassVar[Optional[str]] = "SecretInfo"

    id: str
    name: str
    version: int
    metadata: Dict[str, str]
    created_at: int
    updated_at: int
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SecretInfo":
        return cls(
            id=_str(d.get("id")),
            name=_str(d.get("name")),
            version=_int(d.get("version")),
            metadata=_map(d.get("metadata")),
            created_at=_int(d.get("created_at")),
            updated_at=_int(d.get("updated_at")),
            raw=dict(d),
        )


@dataclass
class SecretList:
    """A page of the key's secrets; ``next`` is where the next page starts."""

    __schema__: ClassVar[Optional[str]] = "SecretList"

    secrets: List[SecretInfo]
    next: Optional[str] = None
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SecretList":
        items = d.get("secrets")
        return cls(
            secrets=[SecretInfo.from_dict(x) for x in items if isinstance(x, Mapping)] if isinstance(items, list) else [],
            next=_opt_str(d.get("next")),
            raw=dict(d),
        )


@dataclass
class HeldCall:
    """A tool call a gateway holds for a person (or, in a history, how one ended): the tool,
    the rule that asked, the arguments (secret-looking fields masked; the agent's input, so
    show it as text) and their digest, which a grant names (:meth:`Sandbox.answer_approval`)."""

    __schema__: ClassVar[Optional[str]] = "HeldCall"

    id: str
    tool: str
    rule: str
    client: str
    args_digest: str
    requested_ms: int
    expires_ms: int
    answer: str
    answered_digest: Optional[str] = None
    arguments: Any = None
    answered_by: Optional[str] = None
    answered_ms: Optional[int] = None
    reason: Optional[str] = None
    outcome: Optional[str] = None
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HeldCall":
        return cls(
            id=_str(d.get("id")),
            tool=_str(d.get("tool")),
            rule=_str(d.get("rule")),
            client=_str(d.get("client")),
            args_digest=_str(d.get("args_digest")),
            requested_ms=_int(d.get("requested_ms")),
            expires_ms=_int(d.get("expires_ms")),
            answer=_str(d.get("answer")),
            answered_digest=_opt_str(d.get("answered_digest")),
            arguments=d.get("arguments"),
            answered_by=_opt_str(d.get("answered_by")),
            answered_ms=_opt_int(d.get("answered_ms")),
            reason=_opt_str(d.get("reason")),
            outcome=_opt_str(d.get("outcome")),
            raw=dict(d),
        )


@dataclass
class GatewayApprovals:
    """One gateway's held calls and its last answered ones (newest first)."""

    __schema__: ClassVar[Optional[str]] = "GatewayApprovals"

    name: str
    config: str
    state_dir: str
    running: bool
    pending: List[HeldCall]
    history: List[HeldCall]
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "GatewayApprovals":
        return cls(
            name=_str(d.get("name")),
            config=_str(d.get("config")),
            state_dir=_str(d.get("state_dir")),
            running=bool(d.get("running")),
            pending=[HeldCall.from_dict(x) for x in _objs(d.get("pending"))],
            history=[HeldCall.from_dict(x) for x in _objs(d.get("history"))],
            raw=dict(d),
        )


@dataclass
class ApprovalsView:
    """The gateways registered with the server (``cordon gateway --keys-dir DATA_DIR``) and
    their held calls (:meth:`Sandbox.gateway_approvals`, admin keys only)."""

    __schema__: ClassVar[Optional[str]] = "ApprovalsView"

    gateways: List[GatewayApprovals]
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ApprovalsView":
        return cls(gateways=[GatewayApprovals.from_dict(x) for x in _objs(d.get("gateways"))], raw=dict(d))


@dataclass
class KeyInfo:
    """An API key of the server as an admin sees it (never its secret)
    (:meth:`Sandbox.list_keys`)."""

    __schema__: ClassVar[Optional[str]] = "KeyView"

    id: str
    name: str
    max_sandboxes: int
    requests_per_second: int
    created_at: int
    revoked: bool
    admin: bool
    sandboxes: int
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "KeyInfo":
        return cls(
            id=_str(d.get("id")),
            name=_str(d.get("name")),
            max_sandboxes=_int(d.get("max_sandboxes")),
            requests_per_second=_int(d.get("requests_per_second")),
            created_at=_int(d.get("created_at")),
            revoked=bool(d.get("revoked")),
            admin=bool(d.get("admin")),
            sandboxes=_int(d.get("sandboxes")),
            raw=dict(d),
        )


@dataclass
class CreatedKey:
    """A new key (:meth:`Sandbox.create_key`): its ``secret`` is in this answer only."""

    __schema__: ClassVar[Optional[str]] = "CreatedKey"

    secret: str
    key: KeyInfo
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CreatedKey":
        return cls(secret=_str(d.get("secret")), key=KeyInfo.from_dict(_obj(d.get("key"))), raw=dict(d))


@dataclass
class HostEnforcement:
    """What the server's host enforces (:meth:`Sandbox.host_enforcement`): ``mode`` (``full``,
    ``no_namespaces`` or ``none``) and ``cordon check --json``'s document."""

    __schema__: ClassVar[Optional[str]] = "HostEnforcement"

    mode: str
    report: Dict[str, Any]
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HostEnforcement":
        return cls(mode=_str(d.get("mode")), report=dict(_obj(d.get("report"))), raw=dict(d))


@dataclass
class UsageSample:
    """One point of a sandbox's use: when, CPU over the point's span (0 to 100, of all its
    CPUs), and the memory peak."""

    __schema__: ClassVar[Optional[str]] = "UsageSample"

    t_ms: int
    cpu_pct: float
    mem_bytes: int
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "UsageSample":
        return cls(t_ms=_int(d.get("t_ms")), cpu_pct=_float(d.get("cpu_pct")), mem_bytes=_int(d.get("mem_bytes")), raw=dict(d))


@dataclass
class UsageHistory:
    """A sandbox's CPU and memory over its whole life, sampled by the server from its cgroup
    (:meth:`Sandbox.metrics_history`); ``source`` is ``none`` where the host gives it none."""

    __schema__: ClassVar[Optional[str]] = "UsageHistory"

    interval_ms: int
    source: str
    mem_total: int
    samples: List[UsageSample]
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "UsageHistory":
        return cls(
            interval_ms=_int(d.get("interval_ms")),
            source=_str(d.get("source")),
            mem_total=_int(d.get("mem_total")),
            samples=[UsageSample.from_dict(x) for x in _objs(d.get("samples"))],
            raw=dict(d),
        )


@dataclass
class UsageNow:
    """A running sandbox's use at the server's last sample (:meth:`Sandbox.usage`): CPU,
    memory, processes and disk against their limits."""

    __schema__: ClassVar[Optional[str]] = "UsageNow"

    id: str
    t_ms: int
    cpu_pct: float
    mem_bytes: int
    mem_total: int
    processes_max: int
    processes: Optional[int] = None
    disk_used: Optional[int] = None
    disk_total: Optional[int] = None
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "UsageNow":
        return cls(
            id=_str(d.get("id")),
            t_ms=_int(d.get("t_ms")),
            cpu_pct=_float(d.get("cpu_pct")),
            mem_bytes=_int(d.get("mem_bytes")),
            mem_total=_int(d.get("mem_total")),
            processes_max=_int(d.get("processes_max")),
            processes=_opt_int(d.get("processes")),
            disk_used=_opt_int(d.get("disk_used")),
            disk_total=_opt_int(d.get("disk_total")),
            raw=dict(d),
        )
