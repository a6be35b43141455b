"""Buffer: a lease on broker memory, and the views that frameworks build over it."""

from __future__ import annotations

from ctypes import byref, c_size_t, c_void_p, string_at
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable, Dict, Literal, Optional, Tuple, Union

if TYPE_CHECKING:
    from threading import RLock

    from ._client import BufferInfo, Client
else:
    from _thread import RLock  # the C lock itself, without threading's wrapper

from . import _dtypes, _fork, _interop, _lib, _tickets
from ._errors import Error, ForkError, InvalidArgument, Released

_KDL_CPU, _KDL_CUDA = 1, 2
_LEGACY_DEFAULT_STREAM = 0  # cudaStream_t 0


class _Hold:
    """A hold on the mapping and the lease (a C view): what an array made
    from a Buffer keeps alive, released when the array is gone."""

    __slots__ = ("_lib", "_view")

    def __init__(self, lib: Any, view: int):
        self._lib = lib
        self._view: Optional[int] = view

    def __del__(self) -> None:
        view, self._view = getattr(self, "_view", None), None
        if view:
            self._lib.view_release(view)


class _HostHold(_Hold):
    """A hold that an array takes through NumPy's array interface."""

    __slots__ = ("_iface",)

    def __init__(self, lib: Any, view: int, iface: Dict[str, Any]):
        self._lib, self._view, self._iface = lib, view, iface

    @property
    def __array_interface__(self) -> Dict[str, Any]:
        return self._iface


class _CudaHold(_Hold):
    """A hold that an array takes through the CUDA array interface."""

    __slots__ = ("_iface",)

    def __init__(self, lib: Any, view: int, iface: Dict[str, Any]):
        self._lib, self._view, self._iface = lib, view, iface

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        return self._iface


class _Facts:
    """What a handle says about its buffer, read in one call and kept: the
    attributes stay readable after release()."""

    __slots__ = ("id", "nbytes", "name", "device", "is_owner", "base", "dt", "dtype", "shape",
                 "strides", "byte_offset", "array", "ordinal")  # fmt: skip

    def __init__(self, lib: Any, handle: int, get: Optional[Callable[..., int]] = None,
                 filled: Any = None):  # fmt: skip
        if filled is None:
            filled = _lib.BufferFacts(_lib.FACTS_SIZE)
            rc = (get or lib.buffer_get_facts)(handle, filled)
            if rc:
                raise lib.error(rc)
        f = filled
        nbytes: int
        ordinal: int
        byte_offset: int
        (_, flags, id_, nbytes, base, _, _, ordinal, dtype, ndim, _, byte_offset,
         _, _) = _lib.FACTS_LAYOUT.unpack_from(f)  # fmt: skip
        self.nbytes, self.ordinal, self.byte_offset = nbytes, ordinal, byte_offset
        # A buffer this client made has no id until it is published: None,
        # and asking for it publishes it (one round trip).
        self.id: Optional[int] = id_ or None
        self.base: int = base or 0
        self.name: str = f.name.decode()
        self.device: str = f.device.decode()
        self.is_owner = bool(flags & _lib.FACT_OWNER)
        self.array: Optional[Tuple[Any, ...]] = None  # as_cupy's layout, made on first use
        if flags & _lib.FACT_TENSOR:
            self.dt: Optional[_dtypes.DType] = _dtypes.BY_CODE.get(dtype)
            self.dtype: Optional[str] = self.dt.name if self.dt else None
            self.shape: Optional[Tuple[int, ...]] = tuple(f.shape[:ndim])
            self.strides: Optional[Tuple[int, ...]] = tuple(f.strides[:ndim])
        else:
            self.dt = self.dtype = self.shape = self.strides = None


class Buffer:
    """A lease on a broker buffer and this process's mapping of it.

    Arrays made from it (DLPack, the array interfaces, ``as_numpy()`` and the
    other ``as_*``) keep the mapping and the lease alive until they are gone,
    also after ``release()`` or once the Buffer object is dropped: the memory
    returns to the pool (an owner's unkept buffer is freed) when the last of
    them dies. A released Buffer gives no new views.

    Attributes: ``name``, ``id``, ``nbytes``, ``device`` (the device's UUID,
    "host" for host memory), ``device_id`` (its CUDA ordinal in this process,
    -1 for host memory), ``shape``, ``dtype`` (NumPy's name) and ``strides``
    (in elements, as DLPack and torch count them) of the tensor descriptor
    (None when the producer gave none), ``byte_offset``, ``data_ptr`` (the
    first element's address), ``is_sealed``, ``is_owner``, ``is_cuda``.

    Pickling a Buffer (``pickle``, a multiprocessing Pipe or Queue) sends a
    ticket (``ticket()``): the receiving process gets a Buffer of its own on
    the same memory, claimed on its client of the same daemon.
    """

    # _claim: None, or for a posted claim or open (Client.claim(posted=True), an
    # unpickled Buffer) True until the daemon's answer is taken in (its first
    # use), then None, or the refusal, raised again at every later use.
    # _client: the Client that an unpickled Buffer keeps alive (unset otherwise).
    __slots__ = ("_lib", "_h", "_lock", "_pin", "_generation", "_device_id", "_facts", "_claim",
                 "_client", "__weakref__")  # fmt: skip
    _client: Client

    def __init__(self, lib: Any, handle: int, posted: bool = False):
        self._lib = lib
        self._h: Optional[int] = handle
        self._lock = RLock()  # properties read facts under it too
        self._pin: Optional[int] = None  # a view held for the Buffer's own interfaces
        self._generation = _fork.generation
        self._facts: Optional[_Facts] = None  # read on first use (the hot path needs none)
        # Read with the facts, or alone where it is asked first: nothing is
        # asked of the library here. A posted claim's answer says where its memory is.
        self._device_id: Optional[int] = None
        self._claim: Union[None, Literal[True], Error] = True if posted else None

    @property
    def device_id(self) -> int:
        """The CUDA ordinal of its device in this process (-1: host memory)."""
        d = self._device_id
        if d is not None:
            return d
        with self._lock:
            f = self._facts
            if f is None and self._claim is not None:
                self._answer()  # the facts come with the answer
                f = self._facts
            # Read already (always, once released), or asked alone.
            d = f.ordinal if f is not None else self._lib.buffer_device_ordinal(self._held())
            self._device_id = d
            return d

    def _answer(self) -> None:
        """Takes a posted claim's answer in (with the lock held). A refusal
        releases the handle (it holds nothing) and is raised, now and at
        every later use."""
        c = self._claim
        if c is None:
            return
        if isinstance(c, Error):
            raise _again(c)
        if self._generation != _fork.generation:
            raise ForkError("this Buffer was claimed or opened by the parent of this process "
                            "(made by fork()): claim or open it anew here")  # fmt: skip
        h = self._held()
        try:
            # The facts call waits for the answer (the GIL released), and maps the memory.
            f = _Facts(self._lib, h, self._lib.buffer_get_facts_waiting)
        except Error as e:
            self._refused(h, e)
            raise
        self._keep_facts(f)

    def _refused(self, h: int, e: Error) -> None:
        """A posted claim's or open's refusal (with the lock held): kept, to
        be raised at every later use, and the handle released (it holds no lease)."""
        self._claim, self._h = e, None
        self._lib.buffer_release(h)

    def _keep_facts(self, f: "_Facts") -> None:
        """The handle's facts, read (with the lock held)."""
        self._facts, self._device_id = f, f.ordinal
        self._claim = None  # a posted claim's or open's answer came with them

    def _read_facts(self) -> "_Facts":
        """The handle's facts, read once (with the lock held, or before release)."""
        f = self._facts
        if f is None and self._claim is not None:
            self._answer()  # the facts come with the answer
            f = self._facts
        if f is None:
            f = _Facts(self._lib, self._held())
            self._keep_facts(f)
        return f

    def _held(self) -> int:
        """The handle, where it is held (with the lock held)."""
        h = self._h
        if h is None:
            raise Released("buffer was released")
        return h

    def _f(self) -> "_Facts":
        f = self._facts
        if f is not None:
            return f
        with self._lock:
            if self._h is None:  # released before anything was read: facts were kept
                if isinstance(self._claim, Error):
                    raise _again(self._claim)
                raise Released("buffer was released")
            return self._read_facts()

    @property
    def id(self) -> int:
        """The buffer's id. A buffer this client made is published first (one
        round trip, the first time), so that another process may open it by
        this id; 0 once released unpublished. Raises AlreadyExists when its
        name is taken (it stays unpublished, and asking again tries again)."""
        f = self._f()
        if f.id is None:
            with self._lock:
                h = self._h
                if f.id is None and h is not None:
                    # The publication's refusal is raised (the C ABI's id
                    # would answer 0), and no 0 is kept: a later seal may
                    # still publish it.
                    self._publish()
                    f.id = self._lib.buffer_id(h) or None
        return f.id or 0

    @property
    def is_published(self) -> bool:
        """False for a buffer this client made and has not published yet: no
        other process can open it."""
        with self._lock:
            if self._h is None:
                return bool(self._f().id)
            self._answer()
            return bool(self._lib.buffer_is_published(self._h))

    def publish(self) -> int:
        """Makes a buffer this client made known to the daemon now, under its
        name, unsealed, so that others may open it (``id`` does it too), and
        returns its id. Nothing is sent for a buffer known already. Raises
        AlreadyExists when its name is taken."""
        self._publish()
        return self.id

    def _publish(self) -> None:
        from ._client import check

        with self._lock:
            check(self._lib, self._lib.buffer_publish(self._usable()))

    @property
    def name(self) -> str:
        """Its name ("" when unnamed)."""
        return self._f().name

    @property
    def nbytes(self) -> int:
        """Bytes asked for at allocation."""
        return self._f().nbytes

    @property
    def device(self) -> str:
        """UUID of its device ("host")."""
        return self._f().device

    @property
    def is_owner(self) -> bool:
        """Whether it came from allocate()."""
        return self._f().is_owner

    @property
    def shape(self) -> Optional[Tuple[int, ...]]:
        """The descriptor's shape, or None."""
        return self._f().shape

    @property
    def dtype(self) -> Optional[str]:
        """The descriptor's dtype name, or None."""
        return self._f().dtype

    @property
    def strides(self) -> Optional[Tuple[int, ...]]:
        """Strides in elements, or None."""
        return self._f().strides

    @property
    def byte_offset(self) -> int:
        """Bytes before element 0."""
        return self._f().byte_offset

    @property
    def _dt(self) -> Optional[_dtypes.DType]:
        return self._f().dt

    @property
    def _base(self) -> int:
        return self._f().base

    # Facts ------------------------------------------------------------------

    @property
    def data_ptr(self) -> int:
        """Address of the first element in this process (device pointer on a GPU)."""
        return self._base + self.byte_offset

    @property
    def is_cuda(self) -> bool:
        return self.device_id >= 0

    @property
    def is_sealed(self) -> bool:
        """Whether the producer's writes are complete (as this handle last saw it)."""
        with self._lock:
            self._answer()
            return self._h is not None and bool(self._lib.buffer_is_sealed(self._h))

    @property
    def is_released(self) -> bool:
        return self._h is None

    def __repr__(self) -> str:
        if self._claim is not None:  # a posted claim or open: its answer (a repr never raises)
            try:
                with self._lock:
                    self._answer()
            except Error as e:
                if self._claim is True:  # not taken in: the parent's, after fork()
                    return "<gpubroker.Buffer claimed or opened by the parent of this process>"
                return f"<gpubroker.Buffer refused, holding nothing: {e}>"
        desc = f"{self.dtype}{list(self.shape)}" if self.shape is not None else "bytes"
        state = "released" if self._h is None else ("sealed" if self.is_sealed else "allocated")
        # No publication for a repr: an unpublished buffer shows no id.
        shown = self._facts.id if self._facts is not None and self._facts.id else "-"
        return (f"<gpubroker.Buffer {self.name or '(unnamed)'} id={shown} {desc} "
                f"{self.nbytes} bytes on {self.device} {state}>")  # fmt: skip

    def info(self) -> "BufferInfo":
        """The daemon's description of the buffer (tenant, leases, keep,
        backing...). A buffer this client made is published first, as for
        ``id``: AlreadyExists when its name is taken."""
        import json

        from ._client import BufferInfo

        with self._lock:
            h = self._usable()
            self._publish()  # the C ABI would describe it unpublished, id 0
            out = c_void_p()
            self._lib.check(self._lib.buffer_info_json(h, byref(out)))
            return BufferInfo.from_json(json.loads(self._lib.take_string(out)))

    # Ordering -----------------------------------------------------------------

    def seal(self, stream: Any = None, *, posted: bool = False) -> None:
        """Marks the writes complete; readers waiting in ``open(wait=True)`` wake up.

        On a GPU the ready fence is recorded on `stream` first (any framework's
        stream object or a raw cudaStream_t; None: the legacy default stream),
        so the producer need not synchronize: a reader's stream waits for the
        work queued on `stream` before the seal.

        ``posted=True`` returns once the seal is sent, without waiting for the
        daemon's answer. A reader that this process tells the name afterwards
        (over a pipe, a queue, a socket) still finds the buffer sealed; a
        refusal (the name taken) is raised by this buffer's next ``id``,
        ``publish()``, ``seal()`` or ``release()`` instead of here.
        """
        s = stream if stream is None or type(stream) is int else _interop.stream_handle(stream)
        with self._lock:
            seal = self._lib.buffer_seal_posted if posted else self._lib.buffer_seal_on
            rc = seal(self._usable(), s)
        if rc:
            raise self._lib.error(rc)

    def wait_ready(self, stream: Any = None) -> None:
        """Makes `stream` (any framework's stream or a raw handle; None: the
        legacy default stream) wait for the producer's sealed writes. Exports
        through DLPack do this on the consumer's stream by themselves."""
        s = stream if stream is None or type(stream) is int else _interop.stream_handle(stream)
        with self._lock:
            rc = self._lib.buffer_wait_ready(self._usable(), s)
        if rc:
            raise self._lib.error(rc)

    def wait_sealed(self, timeout: Union[None, float, timedelta] = None, *,
                    awake: Union[None, float, timedelta] = None) -> None:  # fmt: skip
        """Waits until the buffer is sealed, for a Buffer opened before the seal
        (``open(name, wait=True, allow_unsealed=True)``, a consumer that asks
        first and maps while the producer works); returns at once for a sealed
        one. Afterwards the arrays made from it (``as_cupy()``, DLPack) order
        their stream after the producer's writes, as for a Buffer opened sealed.

        `timeout`: seconds or a timedelta (None: 30 s). Raises NotFound when the
        buffer is freed, or its producer's session ends (a crash included),
        before the seal; Timeout after `timeout`; FailedPrecondition for a
        buffer this client made.

        `awake`: seconds the wait stays awake, polling here and in the
        daemon's session thread, as ``Client.open(wait=True, awake=...)``.
        """
        lib = self._lib
        if lib.buffer_wait_sealed is None:
            raise _too_old(lib, "cannot wait for a seal (gpubroker_buffer_wait_sealed)")
        from ._client import _ms, _us  # the package's conversions of times

        ms = -1 if timeout is None else _ms(timeout, "timeout")  # -1: the library's default
        wait: _lib.CFunction = lib.buffer_wait_sealed
        more: Tuple[int, ...] = ()
        if awake is not None:
            if lib.buffer_wait_sealed_awake is None:
                raise _too_old(lib, "cannot keep a wait awake (gpubroker_buffer_wait_sealed_awake)")
            wait, more = lib.buffer_wait_sealed_awake, (_us(awake, "awake"),)
        with self._lock:
            rc = wait(self._usable(), ms, *more)
        if rc:
            raise lib.error(rc)

    # Tickets ------------------------------------------------------------------

    def ticket(self, ttl: Union[None, float, timedelta] = None) -> bytes:
        """A ticket: bytes that hand this buffer to another process, which
        passes them to ``Client.claim()`` for a lease of its own (the same
        memory), without knowing the buffer's name. Pickling the Buffer
        makes one (with the default ttl) and unpickling claims it.

        Until the ticket is claimed, once, or `ttl` passes (seconds or a
        timedelta; None: 60 s; at most an hour), the daemon keeps the buffer
        for it, even after this Buffer is released, its owner's session has
        ended or this process has died. Seal the writes first (``seal()``,
        posted or not): a claim of an unsealed buffer is refused.

        Costs no round trip (the hold is posted, as ``seal(posted=True)``
        is); a refusal (say, the tenant's limit of unclaimed tickets) is
        raised by this buffer's next ``seal()`` or ``release()``. The bytes
        may contain NULs.
        """
        lib = self._lib
        if not lib.has_tickets:
            raise _no_tickets(lib)
        ms = _ticket_ms(ttl)
        out, size = c_void_p(), c_size_t()
        with self._lock:
            rc = lib.buffer_ticket(self._usable(), ms, byref(out), byref(size))
        if rc:
            raise lib.error(rc)
        try:
            return string_at(_lib.written(out), size.value)
        finally:
            lib.string_free(out)

    def __reduce__(self) -> Tuple[Any, Tuple[bytes]]:
        """Pickles as a new ticket (60 s): unpickling claims it, posted, on
        the receiving process's client of the ticket's daemon."""
        if self._h is None and self._claim is None:
            f = self._facts
            raise Released(
                f"buffer {(f.name or f.id) if f else ''} was released: it cannot be pickled "
                "(pickling makes a ticket, which needs the lease): pickle it before release()"
            )
        return (_tickets.claim_pickled, (self.ticket(),))

    # Life ---------------------------------------------------------------------

    def release(self, stream: Any = None) -> None:
        """Drops this handle's lease (and, for an owner's unkept buffer, frees
        it) now, or once the arrays made from it are gone. Idempotent.

        On a GPU, with no `stream`, the release first waits for all of the
        device's work, as ``cudaFree`` does. With a `stream` (any framework's
        stream object or a raw cudaStream_t, 0 for the legacy default stream)
        it does not wait: the memory is given back once the work queued on
        `stream` so far is complete (at this client's next ``allocate`` or
        ``open`` after that, at ``trim()``, or when it disconnects), as a
        caching allocator does with a block freed on a stream. All work that
        uses the buffer must be on `stream` or ordered before it. On the host
        `stream` changes nothing. A stream of another device raises, and the
        buffer is released as without one.
        """
        s = None
        if stream is not None:
            s = stream if type(stream) is int else _interop.stream_handle(stream)
        with self._lock:
            h = self._h
            if h is None:
                return
            if self._claim is not None and self._generation != _fork.generation:
                # The parent's posted claim or open: dropped here without its answer.
                self._h = self._claim = None
                self._lib.buffer_release(h)
                return
            f = self._read_facts()  # the attributes stay readable (a refused claim: raises)
            if f.id is None and self._lib.buffer_is_published(h):
                f.id = self._lib.buffer_id(h)
            self._h = None
            if stream is None:
                rc = self._lib.buffer_release(h)
            else:
                rc = self._lib.buffer_release_on(h, s)
        if rc:
            raise self._lib.error(rc)

    def __enter__(self) -> "Buffer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __del__(self) -> None:
        lib = getattr(self, "_lib", None)
        if lib is None:
            return
        h, self._h = getattr(self, "_h", None), None
        if h is not None:
            lib.buffer_release(h)
        pin, self._pin = getattr(self, "_pin", None), None
        if pin is not None:
            lib.view_release(pin)

    def _usable(self) -> int:
        """The handle, for a call made with the lock held (a posted claim's
        or open's answer taken in first)."""
        h = self._h
        if h is None:
            if isinstance(self._claim, Error):
                raise _again(self._claim)
            f = self._facts
            raise Released(
                f"buffer {(f.name or f.id) if f else ''} was released: it gives no new views "
                "(arrays made from it before stay valid)"
            )
        if self._generation != _fork.generation:
            f = self._facts if self._claim is not None else self._read_facts()
            raise ForkError(
                f"buffer {(f.name or f.id) if f else ''} belongs to the parent of this process "
                "(made by fork()): connect and open it anew here"
            )
        if self._claim is not None:
            self._answer()
        return h

    def _new_view(self) -> int:
        out = c_void_p()
        self._lib.check(self._lib.buffer_view(self._usable(), byref(out)))
        return _lib.written(out)

    # DLPack -------------------------------------------------------------------

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (_KDL_CUDA, self.device_id) if self.device_id >= 0 else (_KDL_CPU, 0)

    def __dlpack__(
        self,
        stream: Any = None,
        *,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any:
        """A DLPack capsule of the buffer: versioned (DLPack 1.x) when the
        consumer's `max_version` allows, the legacy one otherwise.

        On a GPU, `stream` is the consumer's (the array API's convention:
        None or 1 the legacy default stream, 2 the per-thread one, -1 none):
        it is made to wait for the producer's sealed writes.
        """
        if copy:
            raise BufferError("gpubroker shares buffers in place; copy=True is not offered: "
                              "copy in the consuming framework")  # fmt: skip
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(
                f"buffer is on DLPack device {self.__dlpack_device__()}, not {tuple(dl_device)}"
            )
        versioned = max_version is not None and max_version[0] >= 1
        flags = _lib.DLPACK_VERSIONED if versioned else 0
        lib = self._lib
        out = c_void_p()
        with self._lock:
            h = self._usable()
            if self.device_id < 0 or stream == -1:
                rc = lib.buffer_to_dlpack(h, flags, byref(out))
            else:  # the consumer's stream waits for the sealed writes, in the same call
                s = stream if type(stream) is int else _interop.stream_handle(stream)
                rc = lib.buffer_to_dlpack_on(h, flags, s, byref(out))
        if rc:
            raise lib.error(rc)
        return _interop.capsule(_lib.written(out), versioned)

    # Array interfaces ---------------------------------------------------------

    def _interface(self, ready_stream: Optional[int]) -> Dict[str, Any]:
        dt = self._dt or _dtypes.BY_NAME["uint8"]
        shape = self.shape if self.shape is not None else (self.nbytes,)
        strides = None
        if self.strides is not None and self.strides != _contiguous(shape):
            strides = tuple(s * dt.itemsize for s in self.strides)
        iface: Dict[str, Any] = {
            "shape": shape,
            "typestr": dt.typestr,
            "data": (self.data_ptr, False),
            "strides": strides,
            "version": 3,
        }
        if ready_stream is not None or self.device_id >= 0:
            iface["stream"] = ready_stream
        return iface

    def _ready_stream(self, h: int) -> Optional[int]:
        """For the CUDA Array Interface: the library's stream that waits for
        the sealed writes, or None (unsealed: nothing to wait for)."""
        if not self._lib.buffer_is_sealed(h):
            return None
        out = c_void_p()
        self._lib.check(self._lib.buffer_ready_stream(h, byref(out)))
        return out.value  # NULL on the host backend

    def _pinned_interface(self, cuda: bool) -> Dict[str, Any]:
        with self._lock:
            h = self._usable()
            if self._pin is None:  # what the consumer's array keeps: this object
                self._pin = self._new_view()
            return self._interface(self._ready_stream(h) if cuda else None)

    @property
    def __array_interface__(self) -> Dict[str, Any]:
        if self.device_id >= 0:
            raise AttributeError("a GPU buffer has no __array_interface__ (see __cuda_array_interface__)")
        return self._pinned_interface(False)

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        if self.device_id < 0:
            raise AttributeError("a host buffer has no __cuda_array_interface__ (see __array_interface__)")
        return self._pinned_interface(True)

    # Frameworks ----------------------------------------------------------------

    def as_numpy(self) -> Any:
        """A writable NumPy array over the (host) buffer, no copy."""
        import numpy

        if self.device_id >= 0:
            raise TypeError("a GPU buffer: use as_cupy(), as_torch(), as_jax() or as_numba()")
        dt = self._dt
        target = _dtypes.numpy_dtype(dt) if dt is not None and dt.name == "bfloat16" else None
        with self._lock:
            self._usable()
            hold = _HostHold(self._lib, self._new_view(), self._interface(None))
        a = numpy.asarray(hold)
        return a.view(target) if target is not None else a

    def as_torch(self) -> Any:
        """A torch tensor over the buffer (CPU or CUDA), no copy, ordered after
        the producer's writes on torch's current stream."""
        import torch

        from_capsule, current_stream = _torch_entry_points(torch)
        if from_capsule is None or (
            self.device_id >= 0 and (current_stream is None or not torch.cuda.is_initialized())
        ):
            return torch.from_dlpack(self)  # which also brings torch's CUDA up
        # What torch.from_dlpack(self) does, without its Python layer (which
        # builds a torch.cuda.Stream object per call): the export waits on
        # torch's current stream of the buffer's device, in the same C call.
        lib = self._lib
        out = c_void_p()
        with self._lock:
            h = self._usable()
            if self.device_id >= 0:
                rc = lib.buffer_to_dlpack_on(h, 0, current_stream(self.device_id), byref(out))
            else:
                rc = lib.buffer_to_dlpack(h, 0, byref(out))
        if rc:
            raise lib.error(rc)
        return from_capsule(_interop.capsule(_lib.written(out), False))

    def as_cupy(self) -> Any:
        """A CuPy array over the GPU buffer, no copy, ordered after the
        producer's writes on CuPy's current stream."""
        import cupy

        lib = self._lib
        out = c_void_p()
        if self._facts is None and lib.buffer_view_on_facts is not None:
            # Nothing asked of this Buffer yet (a fresh open's; a posted one's
            # answer not taken in): its facts (with the answer), CuPy's
            # stream's wait for the sealed writes and the view, in one C call.
            stream = cupy.cuda.get_current_stream().ptr
            with self._lock:
                h = self._h
                if self._facts is None and h is not None and self._generation == _fork.generation:
                    filled = _lib.BufferFacts(_lib.FACTS_SIZE)
                    rc = lib.buffer_view_on_facts(h, stream, filled, byref(out))
                    if rc and not filled.size and self._claim is not None:
                        e = lib.error(rc)  # the posted claim's or open's refusal
                        self._refused(h, e)
                        raise e
                    if filled.size:  # read, also where only the view failed
                        self._keep_facts(_Facts(lib, h, filled=filled))
                    if rc:
                        raise lib.error(rc)
        # A view made above is released with `hold`, whatever happens next.
        hold = _Hold(lib, out.value) if out.value else None
        layout = self._cupy_layout()  # the facts, read in the same call as the device
        if self.device_id < 0:
            raise TypeError("a host buffer: use as_numpy() (CuPy arrays live on a GPU)")
        if layout is None:  # a dtype CuPy may not know by NumPy's name: its own DLPack import
            return cupy.from_dlpack(self)
        shape, dtype, strides, data, span = layout
        # What cupy.from_dlpack(self) makes, built directly: memory that holds
        # a view (the lease and the mapping) until the array is gone, after
        # CuPy's current stream has waited for the sealed writes (one C call).
        if hold is None:
            with self._lock:
                rc = lib.buffer_view_on(self._usable(), cupy.cuda.get_current_stream().ptr,
                                        byref(out))  # fmt: skip
            if rc:
                raise lib.error(rc)
            hold = _Hold(lib, _lib.written(out))
        mem = cupy.cuda.UnownedMemory(data, span, hold, self.device_id)
        return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(mem, 0), strides)

    def _cupy_layout(self) -> Optional[Tuple[Any, ...]]:
        """(shape, dtype, strides in bytes or None, first element's address,
        bytes from it to the buffer's end), worked out once; None for bfloat16."""
        f = self._f()
        if f.array is None:
            dt = f.dt or _dtypes.BY_NAME["uint8"]
            if dt.name == "bfloat16":
                return None
            shape = f.shape if f.shape is not None else (f.nbytes,)
            strides = None
            if f.strides is not None and f.strides != _contiguous(shape):
                strides = tuple(st * dt.itemsize for st in f.strides)
            f.array = (shape, dt.name, strides, f.base + f.byte_offset,
                       max(f.nbytes - f.byte_offset, 0))  # fmt: skip
        return f.array

    def as_jax(self) -> Any:
        """A JAX array over the buffer, no copy where JAX allows (JAX arrays
        are immutable: write through another framework's view)."""
        import jax.dlpack

        return jax.dlpack.from_dlpack(self)

    def as_numba(self) -> Any:
        """A Numba device array over the GPU buffer (CUDA Array Interface), no copy."""
        from numba import cuda

        if self.device_id < 0:
            raise TypeError("a host buffer: use as_numpy()")
        with self._lock:
            h = self._usable()
            hold = _CudaHold(self._lib, self._new_view(), self._interface(self._ready_stream(h)))
        return cuda.as_cuda_array(hold)


def _again(e: Error) -> Error:
    """A refusal raised again: the same class, message and reason."""
    return type(e)(e.message, code=e.code, reason=e.reason)


_TICKET_TTL_MAX_MS = 3600 * 1000


def _ticket_ms(ttl: Union[None, float, timedelta]) -> int:
    """A ticket's ttl in ms for the C ABI (0: its default, 60 s)."""
    if ttl is None:
        return 0
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
    if not seconds > 0:
        raise InvalidArgument(f"a ticket's ttl must be positive (None: 60 s), not {ttl!r}")
    if seconds * 1000 > _TICKET_TTL_MAX_MS:
        raise InvalidArgument(f"a ticket's ttl is at most an hour, not {seconds:g} s")
    return max(int(round(seconds * 1000)), 1)


def _too_old(lib: Any, lacks: str) -> Error:
    """The error of a call that the loaded library is too old for."""
    from ._errors import Unimplemented

    return Unimplemented(f"{lib.path} {lacks}: install a matching libgpubroker")


def _no_tickets(lib: Any) -> Error:
    return _too_old(lib, "has no tickets (gpubroker_buffer_ticket, gpubroker_claim)")


_TORCH: Optional[Tuple[Any, Any]] = None


def _torch_entry_points(torch: Any) -> Tuple[Any, Any]:
    """torch's C entry points behind torch.from_dlpack: the capsule import and
    the current stream's raw handle per device (None where a torch lacks one)."""
    global _TORCH
    if _TORCH is None:
        c = getattr(torch, "_C", None)
        _TORCH = (getattr(c, "_from_dlpack", None), getattr(c, "_cuda_getCurrentRawStream", None))
    return _TORCH


def _contiguous(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    out, stride = [], 1
    for d in reversed(shape):
        out.append(stride)
        stride *= d
    return tuple(reversed(out))
