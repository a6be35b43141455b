"""gpubroker: share GPU (and host) buffers between processes and frameworks, no copy.

A producer allocates a named buffer from gpubrokerd, writes into it through
any framework and seals it; a consumer in another process opens it by name
and reads it where it lies, through DLPack or the array interfaces::

    import gpubroker, torch
    with gpubroker.connect() as client:
        buf = client.allocate(shape=(1024, 1024), dtype=torch.float32, name="activations")
        t = buf.as_torch()            # the broker's memory, no copy
        t.normal_()
        buf.seal(torch.cuda.current_stream())

    # in another process
    import gpubroker, cupy
    client = gpubroker.connect()
    x = client.open("activations", wait=True).as_cupy()   # same memory, stream-ordered

A Buffer also travels by itself, with no name: pickled (``conn.send(buf)``
on a multiprocessing Pipe, a Queue's ``put``) it becomes a ticket that the
receiving process claims as a Buffer of its own on the same memory.

The package is pure Python over libgpubroker's C ABI (ctypes). It finds the
library through ``$GPUBROKER_LIBRARY``, next to the package, or where it was
installed.
"""

from ._buffer import Buffer
from ._client import BufferInfo, Client, DeviceStatus, Status, TenantStatus, connect
from ._errors import (
    AlreadyExists,
    Cancelled,
    Closed,
    Error,
    FailedPrecondition,
    ForkError,
    Internal,
    InvalidArgument,
    LibraryNotFound,
    LimitExceeded,
    NotFound,
    OutOfMemory,
    PermissionDenied,
    QuotaExceeded,
    Released,
    ResourceExhausted,
    Timeout,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)

__version__ = "0.1.0"


def library_version() -> str:
    """The version of the loaded libgpubroker."""
    from . import _lib

    version: bytes = _lib.load().version()
    return version.decode()


def library_path() -> str:
    """Where the loaded libgpubroker is."""
    from . import _lib

    return _lib.load().path


__all__ = [
    "AlreadyExists",
    "Buffer",
    "BufferInfo",
    "Cancelled",
    "Client",
    "Closed",
    "DeviceStatus",
    "Error",
    "FailedPrecondition",
    "ForkError",
    "Internal",
    "InvalidArgument",
    "LibraryNotFound",
    "LimitExceeded",
    "NotFound",
    "OutOfMemory",
    "PermissionDenied",
    "QuotaExceeded",
    "Released",
    "ResourceExhausted",
    "Status",
    "TenantStatus",
    "Timeout",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "connect",
    "library_path",
    "library_version",
]
