"""Exceptions raised by the SDK.

Every error the server reports (``{"error": {"code": ..., "message": ...}}``) becomes a
:class:`CordonError` subclass carrying the server's ``code``, ``message`` and the HTTP
``status``. Transport problems become :class:`CordonTimeoutError` or
:class:`CordonConnectionError`.
"""

from __future__ import annotations

import builtins
from typing import Optional

__all__ = [
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


class CordonError(Exception):
    """Base class of every error raised by the SDK.

    Attributes:
        message: what went wrong, as the server (or the SDK) said it.
        code: the server's stable error code (``"not_found"``, ``"rate_limited"``, ...), or an
            SDK code such as ``"timeout"`` or ``"connection"``.
        status: the HTTP status of the answer, ``None`` when there was no answer.
    """

    def __init__(self, message: str, *, code: str = "error", status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status

    def __str__(self) -> str:
        if self.status is not None:
            return f"{self.message} ({self.status} {self.code})"
        return f"{self.message} ({self.code})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(message={self.message!r}, code={self.code!r}, status={self.status!r})"


class AuthenticationError(CordonError):
    """401: the API key is missing, wrong or revoked."""


class NotFoundError(CordonError):
    """404: no such sandbox, command, file or directory (or it belongs to another key)."""


class RateLimitError(CordonError):
    """429: a rate limit or quota was hit. ``retry_after`` is the server's hint in seconds."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "rate_limited",
        status: Optional[int] = 429,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(message, code=code, status=status)
        self.retry_after = retry_after


class SandboxError(CordonError):
    """Any other error answer; the subclasses below name the common ones."""


class BadRequestError(SandboxError):
    """400: the request was refused as invalid (``invalid_request``, ``invalid_path``...)."""


class PermissionDeniedError(SandboxError):
    """403: the sandbox refused the operation (``read_only``: a path outside its writable dirs)."""


class ConflictError(SandboxError):
    """409: the sandbox cannot do this now (``conflict``, ``kernel_failed``, ``sandbox_unavailable``...)."""


class PayloadTooLargeError(SandboxError):
    """413: the upload or request body is larger than the server accepts (``too_large``)."""


class InsufficientStorageError(SandboxError):
    """507: the sandbox's disk is full (``no_space``)."""


class ServerError(SandboxError):
    """5xx: the server failed (``internal``, ``kernel_died``, ``sandbox_failed``...)."""


class CordonTimeoutError(CordonError, builtins.TimeoutError):
    """The server did not answer in time, or a command did not finish within ``wait(timeout)``.

    Also an instance of the built-in :class:`TimeoutError`. Note that a command that runs past
    its own ``timeout`` is not an exception: its :class:`~cordon_sdk.Outcome` has
    ``status == "timeout"``.
    """

    def __init__(self, message: str, *, code: str = "timeout", status: Optional[int] = None) -> None:
        super().__init__(message, code=code, status=status)


class CordonConnectionError(CordonError, builtins.ConnectionError):
    """The server could not be reached (refused, reset, DNS...)."""

    def __init__(self, message: str, *, code: str = "connection", status: Optional[int] = None) -> None:
        super().__init__(message, code=code, status=status)
