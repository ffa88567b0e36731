"""Python client for ``cordon serve``: persistent Linux sandboxes for code that AI agents write.

    from cordon_sdk import Sandbox

    with Sandbox.create(memory="256M", ttl="10m") as sb:
        sb.files.write("/workspace/hello.py", "print('hi')")
        out = sb.commands.run(["python3", "/workspace/hello.py"])
        print(out.exit_code, out.stdout)
"""

from ._core import DEFAULT_TIMEOUT, DEFAULT_URL, __version__
from .async_sandbox import AsyncCommandHandle, AsyncCommands, AsyncFiles, AsyncSandbox
from .errors import (
    AuthenticationError,
    CordonConnectionError,
    CordonError,
    CordonTimeoutError,
    NotFoundError,
    RateLimitError,
    SandboxError,
)
from .models import CommandInfo, Enforcement, Entry, Limits, NetworkEvent, Outcome, SandboxInfo, Usage
from .sandbox import CommandHandle, Commands, Files, Sandbox

__all__ = [
    "__version__",
    "DEFAULT_URL",
    "DEFAULT_TIMEOUT",
    "Sandbox",
    "Commands",
    "CommandHandle",
    "Files",
    "AsyncSandbox",
    "AsyncCommands",
    "AsyncCommandHandle",
    "AsyncFiles",
    "Outcome",
    "Usage",
    "Enforcement",
    "NetworkEvent",
    "SandboxInfo",
    "Limits",
    "Entry",
    "CommandInfo",
    "CordonError",
    "AuthenticationError",
    "NotFoundError",
    "RateLimitError",
    "SandboxError",
    "CordonTimeoutError",
    "CordonConnectionError",
]
