"""Python client for ``cordon serve``: persistent Linux sandboxes for code that AI agents write.

    from cordon_sdk import Sandbox

    with Sandbox.create(memory="256M", ttl="10m") as sb:
        sb.files.write("/workspace/hello.py", "print('hi')")
        out = sb.commands.run(["python3", "/workspace/hello.py"])
        print(out.exit_code, out.stdout)
        cell = sb.code.run("x = 6\\nx * 7")
        print(cell.text)                      # 42

:class:`AsyncSandbox` is the same client with coroutines.
"""

from ._core import DEFAULT_TIMEOUT, DEFAULT_URL, __version__
from .async_sandbox import (
    AsyncCode,
    AsyncCommandHandle,
    AsyncCommands,
    AsyncFiles,
    AsyncNetwork,
    AsyncSandbox,
)
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
from .models import (
    CodeError,
    CodeResult,
    CommandInfo,
    ContextInfo,
    Enforcement,
    Entry,
    Limits,
    MimeBundle,
    NetworkEvent,
    NetworkInfo,
    NetworkPolicy,
    Outcome,
    SandboxInfo,
    Usage,
)
from .sandbox import Code, CommandHandle, Commands, Files, Network, Sandbox

__all__ = [
    "__version__",
    "DEFAULT_URL",
    "DEFAULT_TIMEOUT",
    "Sandbox",
    "Commands",
    "CommandHandle",
    "Files",
    "Code",
    "Network",
    "AsyncSandbox",
    "AsyncCommands",
    "AsyncCommandHandle",
    "AsyncFiles",
    "AsyncCode",
    "AsyncNetwork",
    "Outcome",
    "Usage",
    "Enforcement",
    "NetworkEvent",
    "SandboxInfo",
    "Limits",
    "Entry",
    "CommandInfo",
    "CodeResult",
    "CodeError",
    "MimeBundle",
    "ContextInfo",
    "NetworkPolicy",
    "NetworkInfo",
    "CordonError",
    "AuthenticationError",
    "NotFoundError",
    "RateLimitError",
    "SandboxError",
    "BadRequestError",
    "PermissionDeniedError",
    "ConflictError",
    "PayloadTooLargeError",
    "InsufficientStorageError",
    "ServerError",
    "CordonTimeoutError",
    "CordonConnectionError",
]
