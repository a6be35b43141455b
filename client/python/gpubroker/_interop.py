"""What the framework protocols need from ctypes: stream handles and DLPack capsules."""

from __future__ import annotations

import ctypes
from typing import Any, Dict

from . import _lib

# Array API / DLPack: for CUDA, 1 is the legacy default stream and 2 the
# per-thread default one, which are also CUDA's own handles for them.
LEGACY_DEFAULT_STREAM = 1


def stream_handle(stream: Any) -> int:
    """A cudaStream_t from a stream object of any framework or a raw handle.

    None is the legacy default stream. Accepts ints, ``torch.cuda.Stream``
    (``cuda_stream``), ``cupy.cuda.Stream`` (``ptr``), Numba streams
    (``handle``), objects with ``__cuda_stream__`` (cuda.core) and ctypes pointers.
    """
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int(proto()[1])
    for attr in ("cuda_stream", "ptr", "handle", "value"):
        v = getattr(stream, attr, None)
        if v is None:
            continue
        if isinstance(v, int):
            return v
        if isinstance(v, ctypes.c_void_p):  # numba's handle
            return v.value or 0
    raise TypeError(f"not a CUDA stream: {stream!r}")


# PyCapsule through the C API of the running interpreter (the GIL is held).
_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

# Capsule names must outlive every capsule: module constants.
_LEGACY = b"dltensor"
_VERSIONED = b"dltensor_versioned"
_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# Where the deleter lies in DLManagedTensor and DLManagedTensorVersioned.
_DELETER_AT = {_LEGACY: 56, _VERSIONED: 16}


_deleters: Dict[int, Any] = {}  # the library's deleters (two), made callable once


def _destroy(capsule: int, name: bytes) -> None:
    # A consumer renames the capsule ("used_dltensor") when it takes the
    # tensor over; one that was never consumed still owns it.
    if _api.PyCapsule_IsValid(capsule, name):
        managed = _api.PyCapsule_GetPointer(capsule, name)
        address = ctypes.c_void_p.from_address(managed + _DELETER_AT[name]).value
        if address:
            deleter = _deleters.get(address)
            if deleter is None:
                deleter = _deleters[address] = _Deleter(address)
            deleter(managed)


_destroy_legacy = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(lambda c: _destroy(c, _LEGACY))
_destroy_versioned = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(lambda c: _destroy(c, _VERSIONED))
# Their addresses, for PyCapsule_New (the callbacks above keep them alive).
_DESTROY_LEGACY = ctypes.cast(_destroy_legacy, ctypes.c_void_p).value
_DESTROY_VERSIONED = ctypes.cast(_destroy_versioned, ctypes.c_void_p).value
_capsule_new = _api.PyCapsule_New


def capsule(managed: int, versioned: bool) -> Any:
    """A DLPack capsule owning the managed tensor at `managed`."""
    if versioned:
        return _capsule_new(managed, _VERSIONED, _DESTROY_VERSIONED)
    return _capsule_new(managed, _LEGACY, _DESTROY_LEGACY)


def dlpack_flags(versioned: bool) -> int:
    return _lib.DLPACK_VERSIONED if versioned else 0
