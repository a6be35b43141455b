"""The errors the package raises: one class per daemon answer, with its message."""

from __future__ import annotations

from typing import Dict, Optional, Type

_CODE_NAMES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)

# gpubroker_reason_t: why a RESOURCE_EXHAUSTED refusal was made.
REASON_NONE, REASON_QUOTA, REASON_OUT_OF_MEMORY, REASON_LIMIT = 0, 1, 2, 3
_REASON_NAMES = {REASON_QUOTA: "quota", REASON_OUT_OF_MEMORY: "out_of_memory", REASON_LIMIT: "limit"}


class Error(Exception):
    """Base of every gpubroker error.

    Attributes:
        code: the gRPC status code of the failure (``code_name`` spells it).
        message: what the daemon (or the library) said.
        reason: for refusals of resources, ``"quota"``, ``"out_of_memory"`` or
            ``"limit"``; else None.
    """

    code: int = 2

    def __init__(self, message: str, code: Optional[int] = None, reason: Optional[str] = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.reason = reason

    @property
    def code_name(self) -> str:
        return _CODE_NAMES[self.code] if 0 <= self.code < len(_CODE_NAMES) else "UNKNOWN"

    def __str__(self) -> str:
        return f"{self.code_name}: {self.message}"


class Cancelled(Error):
    code = 1


class InvalidArgument(Error, ValueError):
    """A bad request: size 0, a size over the device, a bad name, dtype or shape."""

    code = 3


class Timeout(Error, TimeoutError):
    """A wait ran out (``open(..., wait=True, timeout=...)``)."""

    code = 4


class NotFound(Error, LookupError):
    """No such buffer, or one that this tenant may not see."""

    code = 5


class AlreadyExists(Error):
    """The buffer name is taken."""

    code = 6


class PermissionDenied(Error, PermissionError):
    """Another tenant's buffer may be opened but not sealed or freed."""

    code = 7


class ResourceExhausted(Error):
    """The daemon has no room for the request; the message has the numbers."""

    code = 8


class QuotaExceeded(ResourceExhausted):
    """The tenant's byte quota would be exceeded."""


class OutOfMemory(ResourceExhausted):
    """The device (or host pool) has no room, fragmentation included."""


class LimitExceeded(ResourceExhausted):
    """A count limit: sessions, buffers or descriptors per tenant, waiters."""


class FailedPrecondition(Error):
    """The call does not fit the state, e.g. opening an unsealed buffer without wait."""

    code = 9


class Released(FailedPrecondition, ValueError):
    """The Buffer was released: it gives no new views (those made before stay valid)."""


class Closed(FailedPrecondition, ValueError):
    """The Client was closed."""


class ForkError(FailedPrecondition):
    """A Client or Buffer made before ``fork()`` was used in the child: connect anew there."""


class Unimplemented(Error):
    code = 12


class Internal(Error):
    code = 13


class Unavailable(Error, ConnectionError):
    """No daemon answers, or it is shutting down."""

    code = 14


class Unauthenticated(Error):
    """The session is not (or no longer) valid."""

    code = 16


class LibraryNotFound(Error, OSError):
    """libgpubroker could not be loaded; the message lists where it was looked for."""

    code = 12


_BY_CODE: Dict[int, Type[Error]] = {
    cls.code: cls
    for cls in (
        Cancelled,
        InvalidArgument,
        Timeout,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        ResourceExhausted,
        FailedPrecondition,
        Unimplemented,
        Internal,
        Unavailable,
        Unauthenticated,
    )
}
_BY_REASON: Dict[int, Type[Error]] = {
    REASON_QUOTA: QuotaExceeded,
    REASON_OUT_OF_MEMORY: OutOfMemory,
    REASON_LIMIT: LimitExceeded,
}


def from_status(code: int, message: str, reason: int = REASON_NONE) -> Error:
    """The Error for a failed call's status, message and refusal reason."""
    cls = _BY_CODE.get(code, Error)
    if cls is ResourceExhausted:
        cls = _BY_REASON.get(reason, ResourceExhausted)
    return cls(message, code=code, reason=_REASON_NAMES.get(reason))
