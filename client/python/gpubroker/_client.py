"""Client: a session with gpubrokerd, and the daemon's answers as dataclasses."""

from __future__ import annotations

import json
import math
import os
import sys
import threading
from ctypes import byref, c_char_p, c_int64, c_void_p
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import _dtypes, _fork, _lib, _tickets
from ._buffer import Buffer, _no_tickets, _too_old
from ._errors import Closed, ForkError, InvalidArgument


def check(lib: Any, rc: int) -> None:
    """Raises the Error of a failed C ABI call (read on the thread that failed)."""
    if rc:
        raise lib.error(rc)


@dataclass(frozen=True)
class BufferInfo:
    """A buffer as the daemon describes it."""

    id: int
    name: str
    size: int
    reserved_size: int
    device: str
    tenant: str
    state: str  # "allocated", "sealed", "freed"
    dtype: Optional[str]
    shape: Optional[Tuple[int, ...]]
    strides: Optional[Tuple[int, ...]]  # in elements; None: C-contiguous or no descriptor
    byte_offset: int
    keep: bool
    expires_unix_ms: int  # 0: no TTL
    shared_with: Tuple[str, ...]
    leases: int
    owner_session: int  # 0 once the owner's session has ended
    created_unix_ms: int
    backing: str  # "host-arena", "host-fd", "cuda-arena", "cuda-pool", "cuda-vmm"
    client_made: bool = False  # made by its owner's client in a range it leased

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "BufferInfo":
        t = j.get("tensor")
        return cls(
            id=j["id"], name=j["name"], size=j["size"], reserved_size=j["reserved_size"],
            device=j["device"], tenant=j["tenant"], state=j["state"],
            dtype=t["dtype"] if t else None,
            shape=tuple(t["shape"]) if t else None,
            strides=tuple(t["strides"]) if t and t["strides"] else None,
            byte_offset=t["byte_offset"] if t else 0,
            keep=j["keep"], expires_unix_ms=j["expires_unix_ms"],
            shared_with=tuple(j["shared_with"]), leases=j["leases"],
            owner_session=j["owner_session"], created_unix_ms=j["created_unix_ms"],
            backing=j["backing"], client_made=j.get("client_made", False),
        )  # fmt: skip


@dataclass(frozen=True)
class DeviceStatus:
    uuid: str
    name: str
    backend: str
    ordinal: int
    total_bytes: int
    capacity_bytes: int  # what the broker may lend
    reserved_bytes: int
    used_bytes: int
    free_bytes: int
    buffers: int
    compute_capability: str


@dataclass(frozen=True)
class TenantStatus:
    name: str
    quota_bytes: int  # 0: unlimited
    used_bytes: int  # charged: ranges its clients lease, buffers of the daemon's
    buffers: int
    sessions: int
    range_bytes: int = 0  # of used_bytes: the ranges its clients lease
    ranges: int = 0


def _known(cls: Any, j: Dict[str, Any]) -> Dict[str, Any]:
    """The fields of `j` that `cls` has: a newer daemon may say more."""
    names = cls.__dataclass_fields__.keys()
    return {k: v for k, v in j.items() if k in names}


@dataclass(frozen=True)
class Status:
    """The daemon's status: devices, pools, tenants, sessions."""

    version: str
    backend: str
    devices: Tuple[DeviceStatus, ...]
    tenants: Tuple[TenantStatus, ...]
    sessions: int
    buffers: int
    metrics_address: str
    socket_dir: str
    started_unix_ms: int
    session_id: int  # this client's
    tenant: str  # this client's
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "Status":
        return cls(
            version=j["version"], backend=j["backend"],
            devices=tuple(DeviceStatus(**_known(DeviceStatus, d)) for d in j["devices"]),
            tenants=tuple(TenantStatus(**_known(TenantStatus, t)) for t in j["tenants"]),
            sessions=j["sessions"], buffers=j["buffers"], metrics_address=j["metrics_address"],
            socket_dir=j["socket_dir"], started_unix_ms=j["started_unix_ms"],
            session_id=j["self"]["session_id"], tenant=j["self"]["tenant"], raw=j,
        )  # fmt: skip

    def tenant_status(self, name: Optional[str] = None) -> Optional[TenantStatus]:
        """This client's tenant's line (or `name`'s), None when it holds nothing."""
        name = name or self.tenant
        return next((t for t in self.tenants if t.name == name), None)


def _seconds(value: Union[float, timedelta], what: str) -> float:
    """Seconds given as a number or a timedelta, refused when negative or NaN."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not seconds >= 0:
        raise InvalidArgument(f"{what} is negative or not a number")
    return seconds


def _ms(value: Union[None, float, timedelta], what: str) -> int:
    return 0 if value is None else int(round(_seconds(value, what) * 1000))


def _us(value: Union[float, timedelta], what: str) -> int:
    return int(round(min(_seconds(value, what), 1e9) * 1_000_000))  # a wait ends long before


# Prepared options by tensor layout (shape, dtype, strides, byte_offset): a
# program allocates the same few layouts over and over, and the library only
# reads them. Bounded: cleared when full (a call in flight holds its own).
_TENSOR_OPTIONS: Dict[Any, Tuple[int, Any]] = {}
_CACHE_MAX = 256
# The end of daemon_awake_us in gpubroker_open_options_t: a library whose
# options end before it (its struct_size) does not read it.
_DAEMON_AWAKE_END = _lib.OpenOptions.daemon_awake_us.offset + 8


def _tensor_options(lib: Any, shape: Any, dtype: Any, strides: Any, byte_offset: int,
                    nbytes: Optional[int]) -> Tuple[int, Any]:  # fmt: skip
    """(bytes the tensor spans, options that describe it)."""
    key = None
    if shape is not None:
        try:
            key = (shape if type(shape) is tuple else tuple(shape), dtype,
                   strides if strides is None or type(strides) is tuple else tuple(strides),
                   byte_offset)  # fmt: skip
            found = _TENSOR_OPTIONS.get(key)
        except TypeError:  # unhashable: worked out below, not kept
            key = found = None
        if found is not None:
            return found
    dt = _dtypes.resolve(dtype if dtype is not None else "uint8")
    if shape is None:
        if nbytes is None:
            raise InvalidArgument("give nbytes or shape")
        shape = (nbytes // dt.itemsize,)
    shape = tuple(map(int, shape))
    if strides is not None:
        strides = tuple(map(int, strides))
        if len(strides) != len(shape):
            raise InvalidArgument(f"{len(shape)} dimensions but {len(strides)} strides")
    n = len(shape)
    o = _lib.AllocOptions.from_buffer_copy(lib.alloc_defaults)
    o.dtype = dt.code
    o.ndim = n
    o.shape = (c_int64 * n)(*shape)  # kept alive by `o`
    if strides is not None:
        o.strides = (c_int64 * n)(*strides)
    o.byte_offset = byte_offset
    # An empty tensor still needs a buffer.
    found = (max(byte_offset + _extent(shape, strides) * dt.itemsize, 1), o)
    if key is not None:
        if len(_TENSOR_OPTIONS) >= _CACHE_MAX:
            _TENSOR_OPTIONS.clear()
        _TENSOR_OPTIONS[key] = found
    return found


_OPEN_OPTIONS: Dict[Tuple[bool, Optional[int], bool, bool, int, int], Any] = {}


def _open_options(lib: Any, wait: bool, timeout_ms: Optional[int], allow_unsealed: bool,
                  posted: bool = False, awake_us: int = 0, daemon_awake_us: int = 0) -> Any:  # fmt: skip
    """The open options for these values, made once: the C call only reads them."""
    key = (wait, timeout_ms, allow_unsealed, posted, awake_us, daemon_awake_us)
    o = _OPEN_OPTIONS.get(key)
    if o is None:
        o = _lib.OpenOptions.from_buffer_copy(lib.open_defaults)
        o.wait = 1 if wait else 0
        if timeout_ms is not None:
            o.timeout_ms = timeout_ms
        o.allow_unsealed = 1 if allow_unsealed else 0
        o.posted = 1 if posted else 0
        o.awake_us = awake_us
        o.daemon_awake_us = daemon_awake_us
        if len(_OPEN_OPTIONS) >= _CACHE_MAX:
            _OPEN_OPTIONS.clear()
        _OPEN_OPTIONS[key] = o
    return o


def _extent(shape: Sequence[int], strides: Optional[Sequence[int]]) -> int:
    """Elements that a tensor of this layout spans."""
    if any(d == 0 for d in shape):
        return 0
    if strides is None:
        return math.prod(shape)
    return 1 + sum((d - 1) * s for d, s in zip(shape, strides))


class Client:
    """A session with gpubrokerd (``gpubroker.connect()``).

    Threads may share a Client. Closing it (or leaving its ``with`` block)
    drops this handle; the session ends once its Buffers and the arrays made
    from them are gone too. A Client made before ``fork()`` fails with
    ForkError in the child, which connects anew.
    """

    def __init__(self, socket_dir: Optional[str] = None, *, client_name: Optional[str] = None,
                 spin_us: Optional[int] = None):  # fmt: skip
        self._lib = _lib.load()
        out = c_void_p()
        # Absolute: the directory goes into this client's tickets, which other
        # processes (in other working directories) connect to.
        arg = os.path.abspath(socket_dir).encode() if socket_dir else None
        if spin_us is not None and (type(spin_us) is not int or spin_us < 0):
            raise InvalidArgument(f"spin_us must be a whole number of µs >= 0, not {spin_us!r}")
        if client_name is None:
            script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
            client_name = f"python {script}" if script else "python"
        if hasattr(self._lib, "connect_with"):
            o = _lib.ConnectOptions()
            self._lib.connect_options_init(byref(o))
            o.client_name = client_name.encode()[:64]
            if spin_us is not None:
                o.spin_us = spin_us
            check(self._lib, self._lib.connect_with(arg, byref(o), byref(out)))
        else:
            check(self._lib, self._lib.connect(arg, byref(out)))
        self._h: Optional[int] = out.value
        self._generation = _fork.generation
        self._mu = threading.Lock()
        self._calls = 0  # in flight: close() waits for them before disconnecting
        self._closing = False
        # The device ordinal in this process of the buffers allocate() makes
        # for each `device` asked (None: the daemon's first), read once: the
        # producer's as_torch() and DLPack exports need it, and it never changes.
        self._ordinals: Dict[Optional[str], int] = {}
        self.session_id: int = self._lib.client_session_id(self._h)
        self.tenant: str = self._lib.client_tenant(self._h).decode()
        self.socket_dir = socket_dir
        # This process's pickled Buffers of its daemon are claimed on it.
        _tickets.register(self, _tickets.resolve(socket_dir))

    # The handle for one call: never destroyed under a call in flight.
    def _enter(self) -> int:
        if self._generation != _fork.generation:
            raise ForkError("this Client was connected by the parent of this process (made by "
                            "fork()): call gpubroker.connect() anew here")  # fmt: skip
        with self._mu:
            if self._closing or self._h is None:
                raise Closed("the Client is closed")
            self._calls += 1
            return self._h

    def _leave(self) -> None:
        with self._mu:
            self._calls -= 1
            if self._closing and self._calls == 0:
                self._disconnect_locked()

    def _disconnect_locked(self) -> None:
        h, self._h = self._h, None
        if h is not None:
            self._lib.disconnect(h)

    def close(self) -> None:
        """Drops the handle (once calls in flight on other threads return)."""
        with self._mu:
            self._closing = True
            if self._calls == 0:
                self._disconnect_locked()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        lib, h = getattr(self, "_lib", None), getattr(self, "_h", None)
        if lib is not None and h is not None:
            self._h = None
            lib.disconnect(h)

    def __repr__(self) -> str:
        return f"<gpubroker.Client session={self.session_id} tenant={self.tenant}>"

    # Buffers ------------------------------------------------------------------

    def allocate(
        self,
        nbytes: Optional[int] = None,
        *,
        shape: Optional[Sequence[int]] = None,
        dtype: Any = None,
        strides: Optional[Sequence[int]] = None,
        byte_offset: int = 0,
        name: Optional[str] = None,
        device: Union[None, int, str] = None,
        keep: bool = False,
        ttl: Union[None, float, timedelta] = None,
        share_with: Iterable[str] = (),
    ) -> Buffer:
        """A new buffer, owned and leased by this session.

        Give `nbytes`, or a tensor (`shape` and `dtype`, optional `strides` in
        elements and `byte_offset` in bytes) from which the size follows; the
        descriptor is stored in the daemon so that readers get it back.
        `dtype`: a name ("float32", "bfloat16"), a NumPy, torch, CuPy or JAX
        dtype. `device`: UUID or the daemon's ordinal (None: its first).
        `keep`: outlive this session; `ttl`: seconds or a timedelta;
        `share_with`: tenants that may open it too.

        Raises InvalidArgument, AlreadyExists, QuotaExceeded, OutOfMemory,
        LimitExceeded (all ResourceExhausted), Unavailable.
        """
        lib = self._lib
        if shape is None and dtype is None:
            if strides is not None or byte_offset:
                raise InvalidArgument("strides and byte_offset describe a tensor: give shape and "
                                      "dtype")  # fmt: skip
            if nbytes is None:
                raise InvalidArgument("give nbytes or shape")
            o = None  # NULL: the defaults
        else:
            needed, o = _tensor_options(lib, shape, dtype, strides, byte_offset, nbytes)
            if nbytes is None:
                nbytes = needed
        if device is not None or keep or ttl or share_with:
            # Options of this call alone (the prepared ones are shared).
            o = _lib.AllocOptions.from_buffer_copy(o if o is not None else lib.alloc_defaults)
            if device is not None:
                o.device = str(device).encode()
            o.keep = 1 if keep else 0
            o.ttl_ms = _ms(ttl, "ttl")
            tenants = [t.encode() for t in share_with]
            if tenants:
                o.share_with = (c_char_p * len(tenants))(*tenants)
                o.n_share_with = len(tenants)
        out = c_void_p()
        h = self._enter()
        try:
            # The name beside the options: prepared options serve every call.
            rc = lib.allocate_named(h, int(nbytes), name.encode() if name else None, o, byref(out))
        finally:
            self._leave()
        if rc:
            raise lib.error(rc)
        buf = Buffer(lib, _lib.written(out))
        where = None if device is None else str(device)
        ordinal = self._ordinals.get(where)
        if ordinal is None:
            self._ordinals[where] = buf.device_id  # asked of the library once
        else:
            buf._device_id = ordinal
        return buf

    def open(
        self,
        name_or_id: Union[str, int],
        *,
        wait: bool = False,
        timeout: Union[None, float, timedelta] = None,
        allow_unsealed: bool = False,
        posted: bool = False,
        awake: Union[None, float, timedelta] = None,
        daemon_awake: Union[None, float, timedelta] = None,
    ) -> Buffer:
        """Opens a buffer by name (``tenant/name`` for another tenant's share)
        or id, with a lease of its own.

        `wait`: wait until it exists and is sealed, for `timeout` seconds
        (default 30). Raises NotFound, FailedPrecondition (not sealed and no
        wait), Timeout.

        `awake` (with `wait`): seconds the wait stays awake before it sleeps,
        polling in this process and in the daemon's session thread (up to the
        daemon's ``--max-wait-awake-us``), so that a seal within it reaches
        this consumer without two wake-ups of sleeping threads. Costs a CPU
        here and one in the daemon for as long as it lasts.

        `daemon_awake` (with `wait`): seconds the daemon's session thread
        polls while this wait is parked, while this process sleeps; where
        its tenant has a wake board the producer's seal wakes it before the
        daemon answers, so the seal reaches it about as fast as with `awake`
        for one CPU (the daemon's) and none here.

        `posted`: return at once, without waiting for the daemon's answer,
        as ``claim(posted=True)`` does; the Buffer takes the answer in at its
        first use (an attribute, an array, DLPack, ``wait_ready()``,
        ``release()``), which raises the refusal instead. The round trip
        overlaps what the caller does in between, and opens posted one after
        another share one: post every open first, then use the Buffers. Not
        with `wait` (InvalidArgument).
        """
        lib = self._lib
        o = None  # NULL: the defaults (no wait)
        if (wait or timeout is not None or allow_unsealed or posted or awake is not None
                or daemon_awake is not None):
            awake_us = 0 if awake is None else _us(awake, "awake")
            daemon_awake_us = 0 if daemon_awake is None else _us(daemon_awake, "daemon_awake")
            if daemon_awake_us and lib.open_defaults.struct_size < _DAEMON_AWAKE_END:
                raise _too_old(lib, "cannot keep the daemon awake for a wait (daemon_awake_us)")
            o = _open_options(lib, bool(wait), None if timeout is None else _ms(timeout, "timeout"),
                              bool(allow_unsealed), bool(posted), awake_us,
                              daemon_awake_us)  # fmt: skip
        out = c_void_p()
        h = self._enter()
        try:
            if isinstance(name_or_id, int):
                rc = lib.open_id(h, name_or_id, o, byref(out))
            else:
                rc = lib.open(h, name_or_id.encode(), o, byref(out))
        finally:
            self._leave()
        if rc:
            raise lib.error(rc)
        return Buffer(lib, _lib.written(out), bool(posted))

    def claim(self, ticket: bytes, *, posted: bool = False) -> Buffer:
        """Claims a ticket (``Buffer.ticket()``, made in any process): a
        Buffer with a lease of this session's on the ticket's buffer, as
        ``open()`` gives. One claim per ticket.

        `posted`: return at once, without waiting for the daemon's answer
        (the Buffer knows nothing yet); the answer is taken at the Buffer's
        first use (an attribute, ``as_numpy()`` or another array, DLPack,
        ``wait_ready()``, ``release()``), which raises the refusal instead,
        and at every use after it. Unpickling a Buffer claims this way.

        Raises InvalidArgument (bytes that are not a ticket), NotFound
        (claimed already, expired, or not visible to this tenant),
        FailedPrecondition (its buffer is not sealed).
        """
        lib = self._lib
        if not lib.has_tickets:
            raise _no_tickets(lib)
        if type(ticket) is not bytes:
            if not isinstance(ticket, (bytes, bytearray, memoryview)):
                raise TypeError(f"a ticket is bytes (Buffer.ticket() makes them), not "
                                f"{type(ticket).__name__}")  # fmt: skip
            ticket = bytes(ticket)
        out = c_void_p()
        h = self._enter()
        try:
            rc = lib.claim(h, ticket, len(ticket), 1 if posted else 0, byref(out))
        finally:
            self._leave()
        if rc:
            raise lib.error(rc)
        return Buffer(lib, _lib.written(out), bool(posted))

    def share(
        self,
        array: Any,
        *,
        name: str,
        device: Union[None, int, str] = None,
        keep: bool = False,
        ttl: Union[None, float, timedelta] = None,
        share_with: Iterable[str] = (),
        stream: Any = None,
    ) -> Buffer:
        """Puts a framework array (NumPy, torch, CuPy, JAX, anything with
        DLPack) into a new sealed buffer: allocated with its shape, dtype and
        layout, copied once (device to device on a GPU), sealed.

        On a GPU the copy runs on `stream` (default: the framework's current
        stream) and the seal is recorded there: no synchronization.
        """
        from ._share import share

        return share(self, array, name=name, device=device, keep=keep, ttl=ttl,
                     share_with=share_with, stream=stream)  # fmt: skip

    def free(self, name_or_id: Union[str, int]) -> None:
        """Frees a buffer of this tenant: the name goes now, the memory once no lease remains."""
        h = self._enter()
        try:
            rc = self._lib.free(h, str(name_or_id).encode())
        finally:
            self._leave()
        check(self._lib, rc)

    def list(self) -> List[BufferInfo]:
        """The buffers this tenant may see."""
        return [BufferInfo.from_json(b) for b in self._json(self._lib.list_json)]

    def trim(self) -> None:
        """Gives back to the daemon every range this client holds empty (its
        buffers are carved from ranges it leases; see docs/fast-path.md)."""
        h = self._enter()
        try:
            check(self._lib, self._lib.trim(h))
        finally:
            self._leave()

    def stats(self) -> Dict[str, Any]:
        """What this client did, by path (allocations made here or by the
        daemon, maps of memory mapped already or imported; under "maps",
        "seal_wakes": waits the producer's seal woke on the wake board), and
        its own allocator's books: ranges, bytes in use, cached, free,
        quarantined."""
        stats: Dict[str, Any] = self._json(self._lib.client_stats_json)
        return stats

    def status(self) -> Status:
        """Version, backend, devices, pools, tenants, sessions."""
        return Status.from_json(self._json(self._lib.status_json))

    def _json(self, call: _lib.CFunction) -> Any:
        out = c_void_p()
        h = self._enter()
        try:
            rc = call(h, byref(out))
        finally:
            self._leave()
        check(self._lib, rc)
        return json.loads(self._lib.take_string(out))


def connect(socket_dir: Optional[str] = None, *, client_name: Optional[str] = None,
            spin_us: Optional[int] = None) -> Client:  # fmt: skip
    """Connects to gpubrokerd.

    `socket_dir`: where its sockets are; None: ``$GPUBROKER_SOCKET_DIR``, else
    the daemon's default (/run/gpubroker as root, $XDG_RUNTIME_DIR/gpubroker
    otherwise). `client_name`: how the daemon's log names this client (None:
    "python" and the script's name). `spin_us`: how long a call waits awake
    for the daemon's answer before it blocks (None: 100 µs; 0: block at once;
    ``$GPUBROKER_SPIN_US``, where set, wins). Raises Unavailable when no
    daemon answers there.
    """
    return Client(socket_dir, client_name=client_name, spin_us=spin_us)


__all__ = ["BufferInfo", "Client", "DeviceStatus", "Status", "TenantStatus", "connect"]
