"""Typed views of the server's JSON bodies.

Every class keeps the JSON it was built from in ``raw``, so fields the server adds later are
not lost; unknown fields are otherwise ignored.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

__all__ = [
    "Usage",
    "Enforcement",
    "NetworkEvent",
    "Outcome",
    "Limits",
    "SandboxInfo",
    "Entry",
    "CommandInfo",
]


def _int(v: Any, default: int = 0) -> int:
    if v is None:
        return default
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _opt_int(v: Any) -> Optional[int]:
    return None if v is None else _int(v)


def _str(v: Any, default: str = "") -> str:
    return default if v is None else str(v)


def _map(v: Any) -> Dict[str, str]:
    if not isinstance(v, Mapping):
        return {}
    return {str(k): str(x) for k, x in v.items()}


@dataclass
class Usage:
    """What a command consumed."""

    wall_ms: int = 0
    cpu_user_ms: int = 0
    cpu_system_ms: int = 0
    peak_memory_bytes: int = 0
    peak_pids: int = 0

    @classmethod
    def from_dict(cls, d: Optional[Mapping[str, Any]]) -> "Usage":
        d = d or {}
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

    user_ns: bool = False
    pid_ns: bool = False
    net_ns: bool = False
    mount_ns: bool = False
    ipc_ns: bool = False
    uts_ns: bool = False
    cgroup_ns: bool = False
    seccomp: bool = False
    landlock_abi: int = 0
    cgroup: str = "none"
    rlimits: bool = False
    host_uid: Optional[int] = None
    notes: List[str] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Optional[Mapping[str, Any]]) -> "Enforcement":
        d = d or {}
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
            notes=[str(n) for n in (d.get("notes") or [])],
            raw=dict(d),
        )


@dataclass
class NetworkEvent:
    """One egress decision of the sandbox's proxy."""

    host: str
    port: int
    verdict: str
    reason: str = ""
    bytes: int = 0
    time_ms: int = 0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "NetworkEvent":
        return cls(
            host=_str(d.get("host")),
            port=_int(d.get("port")),
            verdict=_str(d.get("verdict")),
            reason=_str(d.get("reason")),
            bytes=_int(d.get("bytes")),
            time_ms=_int(d.get("time_ms")),
        )


@dataclass
class Outcome:
    """How a command ended.

    ``status`` is one of ``"exited"``, ``"signaled"``, ``"timeout"``, ``"oom"``,
    ``"cpu_time"`` or ``"error"``. Output that is not valid UTF-8 is carried lossily in
    ``stdout``/``stderr``; :attr:`stdout_bytes` / :attr:`stderr_bytes` give the exact bytes.
    """

    status: str
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    error: Optional[str] = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_b64: Optional[str] = None
    stderr_b64: Optional[str] = None
    usage: Usage = field(default_factory=Usage)
    enforcement: Enforcement = field(default_factory=Enforcement)
    network: List[NetworkEvent] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Outcome":
        return cls(
            status=_str(d.get("status"), "error"),
            exit_code=_opt_int(d.get("exit_code")),
            signal=_opt_int(d.get("signal")),
            error=None if d.get("error") is None else str(d.get("error")),
            stdout=_str(d.get("stdout")),
            stderr=_str(d.get("stderr")),
            stdout_truncated=bool(d.get("stdout_truncated")),
            stderr_truncated=bool(d.get("stderr_truncated")),
            stdout_b64=d.get("stdout_b64"),
            stderr_b64=d.get("stderr_b64"),
            usage=Usage.from_dict(d.get("usage")),
            enforcement=Enforcement.from_dict(d.get("enforcement")),
            network=[NetworkEvent.from_dict(n) for n in (d.get("network") or []) if isinstance(n, Mapping)],
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

    memory_bytes: int = 0
    cpus: float = 0.0
    pids: int = 0
    disk_bytes: int = 0
    output_limit_bytes: int = 0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Limits":
        cpus = d.get("cpus")
        return cls(
            memory_bytes=_int(d.get("memory_bytes")),
            cpus=float(cpus) if isinstance(cpus, (int, float)) else 0.0,
            pids=_int(d.get("pids")),
            disk_bytes=_int(d.get("disk_bytes")),
            output_limit_bytes=_int(d.get("output_limit_bytes")),
        )


@dataclass
class SandboxInfo:
    """What the server knows about a sandbox.

    ``state`` is ``"running"``, ``"deleted"``, ``"expired"``, ``"reaped"`` or ``"failed"``;
    ``created_at`` and ``expires_at`` are Unix seconds. ``enforcement`` and ``limits`` are
    only known while the sandbox runs.
    """

    id: str
    state: str
    profile: str = ""
    created_at: int = 0
    expires_at: int = 0
    metadata: Dict[str, str] = field(default_factory=dict)
    enforcement: Optional[Enforcement] = None
    limits: Optional[Limits] = None
    ended_reason: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

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
            ended_reason=None if d.get("ended_reason") is None else str(d.get("ended_reason")),
            raw=dict(d),
        )

    @property
    def running(self) -> bool:
        return self.state == "running"


@dataclass
class Entry:
    """A file, directory or link inside a sandbox.

    ``type`` is ``"file"``, ``"dir"``, ``"symlink"`` or another kind the server names;
    ``mode`` holds the permission bits; ``modified`` is the modification time as the server
    sends it (Unix time).
    """

    name: str
    path: str
    type: str
    size: int = 0
    mode: int = 0
    modified: Optional[float] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Entry":
        m = d.get("modified")
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
            modified=float(m) if isinstance(m, (int, float)) else None,
            raw=dict(d),
        )

    @property
    def is_dir(self) -> bool:
        return self.type in ("dir", "directory")

    @property
    def is_file(self) -> bool:
        return self.type == "file"


@dataclass
class CommandInfo:
    """A background command: its output so far and, once it ended, its :class:`Outcome`."""

    command_id: str
    cmd: List[str] = field(default_factory=list)
    running: bool = False
    started_at_ms: int = 0
    stdout: str = ""
    stderr: str = ""
    outcome: Optional[Outcome] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CommandInfo":
        o = d.get("outcome")
        return cls(
            command_id=_str(d.get("command_id")),
            cmd=[str(a) for a in (d.get("cmd") or [])],
            running=bool(d.get("running")),
            started_at_ms=_int(d.get("started_at_ms")),
            stdout=_str(d.get("stdout")),
            stderr=_str(d.get("stderr")),
            outcome=Outcome.from_dict(o) if isinstance(o, Mapping) else None,
            raw=dict(d),
        )
