"""Finding libgpubroker and declaring its C ABI to ctypes, once per process."""

from __future__ import annotations

import ctypes
import importlib
import os
import struct
import threading
from ctypes import (
    POINTER,
    Structure,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import Any, Callable, List, Optional

from ._errors import Internal, LibraryNotFound, from_status

SONAME = "libgpubroker.so.0"

# A C function as ctypes binds it (its prototype declared in Library._declare).
CFunction = Callable[..., Any]

# Functions a library must have for this package; an older library lacks some.
_REQUIRED = (
    "gpubroker_buffer_view",
    "gpubroker_buffer_to_dlpack",
    "gpubroker_buffer_device_ordinal",
    "gpubroker_buffer_ready_stream",
    "gpubroker_client_check",
    "gpubroker_buffer_get_facts",
    "gpubroker_buffer_to_dlpack_on",
    "gpubroker_allocate_named",
    "gpubroker_buffer_view_on",
)


class AllocOptions(Structure):
    """gpubroker_alloc_options_t."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("device", c_char_p),
        ("name", c_char_p),
        ("keep", c_int),
        ("ttl_ms", c_uint64),
        ("dtype", c_int32),
        ("ndim", c_uint32),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
        ("share_with", POINTER(c_char_p)),
        ("n_share_with", c_uint32),
    ]


class OpenOptions(Structure):
    """gpubroker_open_options_t."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("wait", c_int),
        ("timeout_ms", c_int64),
        ("allow_unsealed", c_int),
        ("posted", c_int),
        ("awake_us", c_int64),
        ("daemon_awake_us", c_int64),
    ]


class ConnectOptions(Structure):
    """gpubroker_connect_options_t."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("client_name", c_char_p),
        ("spin_us", c_int64),
    ]


class BufferFacts(Structure):
    """gpubroker_buffer_facts_t: what a handle knows, filled in one call."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("flags", c_uint32),
        ("id", c_uint64),
        ("size", c_uint64),
        ("data", c_void_p),
        ("name", c_char_p),
        ("device", c_char_p),
        ("device_ordinal", c_int32),
        ("dtype", c_int32),
        ("ndim", c_uint32),
        ("reserved", c_uint32),
        ("byte_offset", c_uint64),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
    ]


FACTS_SIZE = ctypes.sizeof(BufferFacts)
# The struct's scalars in one unpack (the pointers come out as integers):
# struct_size, flags, id, size, data, name, device, device_ordinal, dtype,
# ndim, reserved, byte_offset, shape, strides.
FACTS_LAYOUT = struct.Struct("@IIQQPPPiiIIQPP")
assert FACTS_LAYOUT.size == FACTS_SIZE, "BufferFacts does not match its struct layout"
FACT_OWNER, FACT_SEALED, FACT_TENSOR = 1, 2, 4

DLPACK_VERSIONED = 1
DLPACK_READ_ONLY = 2


def written(out: c_void_p) -> int:
    """The pointer that a call which succeeded wrote to `out` (never NULL)."""
    value = out.value
    if value is None:
        raise Internal("libgpubroker reported success but wrote no pointer")
    return value


def candidates() -> List[str]:
    """Where the library is looked for, in order."""
    env = os.environ.get("GPUBROKER_LIBRARY")
    if env:
        return [env]  # asked for: that one or none
    here = Path(__file__).resolve().parent
    out = [str(here / SONAME), str(here / "libgpubroker.so")]
    try:  # written by CMake (build tree, install)
        out.append(importlib.import_module("._location", __package__).LIBRARY)
    except ImportError:
        pass
    out.append(SONAME)  # the dynamic loader's own search: LD_LIBRARY_PATH, ld.so.cache
    for d in ("/usr/local/lib", "/usr/lib", "/usr/local/lib64", "/usr/lib64"):
        out.append(f"{d}/{SONAME}")
    return out


class Library:
    """The loaded library with every function's prototype declared.

    ``c`` releases the GIL around calls (those that may block on the daemon);
    ``py`` keeps it, for getters that return at once.
    """

    # The C functions, bound by _declare() without their "gpubroker_" prefix.
    connect: CFunction
    connect_with: CFunction  # absent from a library older than it
    connect_options_init: CFunction
    disconnect: CFunction
    allocate: CFunction
    allocate_named: CFunction
    open: CFunction
    open_id: CFunction
    free: CFunction
    list_json: CFunction
    status_json: CFunction
    trim: CFunction
    client_stats_json: CFunction
    client_check: CFunction
    client_session_id: CFunction
    client_tenant: CFunction
    buffer_seal_on: CFunction
    buffer_seal_posted: CFunction
    buffer_wait_ready: CFunction
    buffer_ready_stream: CFunction
    buffer_release: CFunction
    buffer_release_on: CFunction
    buffer_info_json: CFunction
    buffer_id: CFunction
    buffer_publish: CFunction
    buffer_to_dlpack: CFunction
    buffer_to_dlpack_on: CFunction
    buffer_view: CFunction
    buffer_view_on: CFunction
    buffer_get_facts: CFunction
    buffer_data: CFunction
    buffer_size: CFunction
    buffer_name: CFunction
    buffer_device: CFunction
    buffer_is_sealed: CFunction
    buffer_is_owner: CFunction
    buffer_is_published: CFunction
    buffer_device_ordinal: CFunction
    view_release: CFunction
    last_error: CFunction
    version: CFunction
    string_free: CFunction
    alloc_options_init: CFunction
    open_options_init: CFunction
    # Later additions: None in a library without them.
    buffer_wait_sealed: Optional[CFunction]
    buffer_wait_sealed_awake: Optional[CFunction]
    buffer_view_on_facts: Optional[CFunction]
    last_error_reason: Optional[CFunction]
    # Tickets: present where has_tickets is true.
    buffer_ticket: CFunction
    claim: CFunction
    ticket_socket_dir: CFunction
    buffer_get_facts_waiting: CFunction

    def __init__(self, path: str):
        self.path = path
        self.c = ctypes.CDLL(path)
        self.py = ctypes.PyDLL(path)
        missing = [f for f in _REQUIRED if not hasattr(self.c, f)]
        if missing:
            raise LibraryNotFound(
                f"{path} is too old for this package (it lacks {', '.join(missing)}): "
                "install a matching libgpubroker or set GPUBROKER_LIBRARY"
            )
        self._declare()

    def _declare(self) -> None:
        c, py = self.c, self.py
        pp = POINTER(c_void_p)

        def proto(lib: ctypes.CDLL, name: str, restype: Any, *argtypes: Any) -> None:
            f = getattr(lib, name)
            f.restype = restype
            f.argtypes = list(argtypes)
            setattr(self, name[len("gpubroker_"):], f)

        # Blocking calls (the GIL is released).
        proto(c, "gpubroker_connect", c_int, c_char_p, pp)
        if hasattr(c, "gpubroker_connect_with"):  # a library older than it has connect only
            proto(c, "gpubroker_connect_with", c_int, c_char_p, POINTER(ConnectOptions), pp)
            proto(py, "gpubroker_connect_options_init", None, POINTER(ConnectOptions))
        proto(c, "gpubroker_disconnect", None, c_void_p)
        proto(c, "gpubroker_allocate", c_int, c_void_p, c_uint64, POINTER(AllocOptions), pp)
        proto(c, "gpubroker_allocate_named", c_int, c_void_p, c_uint64, c_char_p,
              POINTER(AllocOptions), pp)  # fmt: skip
        proto(c, "gpubroker_open", c_int, c_void_p, c_char_p, POINTER(OpenOptions), pp)
        proto(c, "gpubroker_open_id", c_int, c_void_p, c_uint64, POINTER(OpenOptions), pp)
        proto(c, "gpubroker_free", c_int, c_void_p, c_char_p)
        proto(c, "gpubroker_list_json", c_int, c_void_p, POINTER(c_void_p))
        proto(c, "gpubroker_status_json", c_int, c_void_p, POINTER(c_void_p))
        proto(c, "gpubroker_buffer_seal_on", c_int, c_void_p, c_void_p)
        proto(c, "gpubroker_buffer_seal_posted", c_int, c_void_p, c_void_p)
        proto(c, "gpubroker_buffer_wait_ready", c_int, c_void_p, c_void_p)
        proto(c, "gpubroker_buffer_ready_stream", c_int, c_void_p, pp)
        proto(c, "gpubroker_buffer_release", c_int, c_void_p)
        proto(c, "gpubroker_buffer_release_on", c_int, c_void_p, c_void_p)
        proto(c, "gpubroker_view_release", None, c_void_p)
        proto(c, "gpubroker_buffer_info_json", c_int, c_void_p, POINTER(c_void_p))
        # A buffer this client made is published the first time its id is
        # asked for (one round trip): blocking too.
        proto(c, "gpubroker_buffer_id", c_uint64, c_void_p)
        proto(c, "gpubroker_buffer_publish", c_int, c_void_p)
        proto(c, "gpubroker_trim", c_int, c_void_p)
        proto(c, "gpubroker_client_stats_json", c_int, c_void_p, POINTER(c_void_p))
        proto(c, "gpubroker_buffer_to_dlpack_on", c_int, c_void_p, c_uint32, c_void_p, pp)
        proto(c, "gpubroker_buffer_view_on", c_int, c_void_p, c_void_p, pp)
        # Waiting for a seal on the host came later: None without it.
        self.buffer_wait_sealed = None
        if hasattr(c, "gpubroker_buffer_wait_sealed"):
            proto(c, "gpubroker_buffer_wait_sealed", c_int, c_void_p, c_int64)
        self.buffer_wait_sealed_awake = None
        if hasattr(c, "gpubroker_buffer_wait_sealed_awake"):
            proto(c, "gpubroker_buffer_wait_sealed_awake", c_int, c_void_p, c_int64, c_int64)
        # The facts and the view in one call came later: None without it.
        self.buffer_view_on_facts = None
        if hasattr(c, "gpubroker_buffer_view_on_facts"):
            proto(c, "gpubroker_buffer_view_on_facts", c_int, c_void_p, c_void_p,
                  POINTER(BufferFacts), pp)  # fmt: skip
        # Tickets came later: a library without them serves everything else.
        self.has_tickets = hasattr(c, "gpubroker_claim")
        if self.has_tickets:
            # The ticket's bytes may hold NULs: passed with their length. A
            # buffer never published is published first (a round trip).
            proto(c, "gpubroker_buffer_ticket", c_int, c_void_p, c_uint64, POINTER(c_void_p),
                  POINTER(c_size_t))  # fmt: skip
            proto(c, "gpubroker_claim", c_int, c_void_p, c_char_p, c_size_t, c_int, pp)
            # Reads the bytes only: the GIL is kept.
            proto(py, "gpubroker_ticket_socket_dir", c_int, c_char_p, c_size_t, POINTER(c_void_p))
            # A posted claim's answer comes with the first facts (one round
            # trip): that call releases the GIL.
            self.buffer_get_facts_waiting = c.gpubroker_buffer_get_facts
            self.buffer_get_facts_waiting.restype = c_int
            self.buffer_get_facts_waiting.argtypes = [c_void_p, POINTER(BufferFacts)]
        # Getters and bookkeeping that return at once (the GIL is kept).
        proto(py, "gpubroker_last_error", c_char_p)
        proto(py, "gpubroker_version", c_char_p)
        proto(py, "gpubroker_string_free", None, c_void_p)
        proto(py, "gpubroker_alloc_options_init", None, POINTER(AllocOptions))
        proto(py, "gpubroker_open_options_init", None, POINTER(OpenOptions))
        proto(py, "gpubroker_client_check", c_int, c_void_p)
        proto(py, "gpubroker_client_session_id", c_uint64, c_void_p)
        proto(py, "gpubroker_client_tenant", c_char_p, c_void_p)
        proto(py, "gpubroker_buffer_data", c_void_p, c_void_p)
        proto(py, "gpubroker_buffer_size", c_uint64, c_void_p)
        proto(py, "gpubroker_buffer_name", c_char_p, c_void_p)
        proto(py, "gpubroker_buffer_device", c_char_p, c_void_p)
        proto(py, "gpubroker_buffer_is_sealed", c_int, c_void_p)
        proto(py, "gpubroker_buffer_is_owner", c_int, c_void_p)
        proto(py, "gpubroker_buffer_is_published", c_int, c_void_p)
        proto(py, "gpubroker_buffer_device_ordinal", c_int32, c_void_p)
        proto(
            py,
            "gpubroker_buffer_tensor",
            c_int,
            c_void_p,
            POINTER(c_int32),
            POINTER(c_uint32),
            POINTER(POINTER(c_int64)),
            POINTER(POINTER(c_int64)),
            POINTER(c_uint64),
        )
        proto(py, "gpubroker_buffer_view", c_int, c_void_p, pp)
        proto(py, "gpubroker_buffer_to_dlpack", c_int, c_void_p, c_uint32, pp)
        proto(py, "gpubroker_buffer_get_facts", c_int, c_void_p, POINTER(BufferFacts))
        # The options' defaults, copied per call instead of asking again.
        self.alloc_defaults = AllocOptions()
        self.alloc_options_init(ctypes.byref(self.alloc_defaults))
        self.open_defaults = OpenOptions()
        self.open_options_init(ctypes.byref(self.open_defaults))
        # The typed refusal reasons (RESOURCE_EXHAUSTED's quota, memory, limit)
        # came later: without them every refusal is a plain ResourceExhausted.
        if hasattr(py, "gpubroker_last_error_reason"):
            proto(py, "gpubroker_last_error_reason", c_int)
        else:
            self.last_error_reason = None

    def error(self, rc: int) -> Exception:
        """The Error of a call that returned `rc` (read on the thread that failed)."""
        message = self.last_error().decode(errors="replace")
        reason = self.last_error_reason() if self.last_error_reason is not None else 0
        return from_status(rc, message, reason)

    def check(self, rc: int) -> None:
        """Raises the Error of a failed call; hot paths test ``if rc:`` first."""
        if rc:
            raise self.error(rc)

    def take_string(self, p: c_void_p) -> str:
        """A string the library allocated, freed once read."""
        try:
            return ctypes.string_at(written(p)).decode()
        finally:
            self.string_free(p)


_lock = threading.Lock()
_library: Optional[Library] = None


def load() -> Library:
    """The library, loaded on first use."""
    global _library
    if _library is not None:
        return _library
    with _lock:
        if _library is None:
            tried = []
            for path in candidates():
                try:
                    _library = Library(path)
                    break
                except OSError as e:
                    if isinstance(e, LibraryNotFound):
                        raise
                    tried.append(f"  {path}: {e}")
            else:
                raise LibraryNotFound(
                    "cannot load libgpubroker; tried:\n"
                    + "\n".join(tried)
                    + "\nset GPUBROKER_LIBRARY to the library's path, or install it"
                )
    return _library
