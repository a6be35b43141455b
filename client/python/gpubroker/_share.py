"""Client.share: a framework array into a new sealed buffer, copied once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence, Tuple

from ._buffer import Buffer
from ._errors import InvalidArgument

if TYPE_CHECKING:
    from ._client import Client


def _module(array: Any) -> str:
    return type(array).__module__.partition(".")[0]


def _dense(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether the layout covers its elements without gaps (any dimension order)."""
    dims = sorted((s, d) for d, s in zip(shape, strides) if d != 1)
    expected = 1
    for s, d in dims:
        if s != expected:
            return False
        expected *= d
    return True


def _layout(shape: Tuple[int, ...], strides: Sequence[int]) -> Optional[Tuple[int, ...]]:
    """The strides to allocate with: the source's when dense (a transposed
    view stays transposed), else None (C-contiguous)."""
    strides = tuple(int(s) for s in strides)
    if any(s < 0 for s in strides) or not _dense(shape, strides):
        return None
    c, stride = [], 1
    for d in reversed(shape):
        c.append(stride)
        stride *= d
    return None if tuple(reversed(c)) == strides else strides


def _element_strides(array: Any) -> Tuple[int, ...]:
    return tuple(s // array.itemsize for s in array.strides)


def share(client: Client, array: Any, *, stream: Any = None, **allocate: Any) -> Buffer:
    kind = _module(array)
    if kind in ("jax", "jaxlib") or (kind not in ("torch", "cupy", "numpy")
                                     and hasattr(array, "__dlpack__")):  # fmt: skip
        array = _via_dlpack(array)
        kind = _module(array)
    if kind == "torch":
        shape, dtype, strides = tuple(array.shape), array.dtype, array.stride()
    elif kind in ("cupy", "numpy") or hasattr(array, "__array_interface__"):
        if kind != "cupy":
            import numpy

            array = numpy.asarray(array)
        shape, dtype, strides = tuple(array.shape), array.dtype, _element_strides(array)
    else:
        raise TypeError(f"cannot share a {type(array).__name__}: give a NumPy, torch, CuPy or "
                        "JAX array, or anything with __dlpack__")  # fmt: skip
    buf = client.allocate(shape=shape, dtype=dtype, strides=_layout(shape, strides), **allocate)
    try:
        _copy_and_seal(buf, array, kind, stream)
    except BaseException:
        buf.release()
        raise
    return buf


def _via_dlpack(array: Any) -> Any:
    """A torch, CuPy or NumPy view of a DLPack producer (JAX...), no copy."""
    device_type = array.__dlpack_device__()[0]
    if device_type == 1:
        import numpy

        return numpy.from_dlpack(array)
    for name in ("torch", "cupy"):
        try:
            mod = __import__(name)
        except ImportError:
            continue
        return mod.from_dlpack(array)
    raise TypeError("sharing a GPU array through DLPack needs torch or CuPy to copy with")


def _copy_and_seal(buf: Buffer, src: Any, kind: str, stream: Any) -> None:
    if kind == "torch":
        import torch

        dst = buf.as_torch()
        if dst.is_cuda:
            s = stream if stream is not None else torch.cuda.current_stream(dst.device)
            if isinstance(s, int):
                s = torch.cuda.ExternalStream(s, device=dst.device)
            with torch.cuda.stream(s):
                dst.copy_(src, non_blocking=True)
            buf.seal(s)
        else:
            dst.copy_(src)  # from a GPU tensor this waits for the copy
            buf.seal()
        return
    if buf.is_cuda:
        try:
            import cupy
        except ImportError:
            cupy = None
        if cupy is not None:
            s = stream
            if s is None:
                s = cupy.cuda.get_current_stream()
            elif isinstance(s, int):
                s = cupy.cuda.ExternalStream(s)
            with s:
                buf.as_cupy()[...] = cupy.asarray(src)
            buf.seal(s)
            return
        try:
            import torch
        except ImportError:
            raise InvalidArgument("the broker lends GPU memory here: sharing a NumPy array "
                                  "needs CuPy or torch to copy it to the GPU") from None  # fmt: skip
        _copy_and_seal(buf, torch.from_numpy(src), "torch", stream)
        return
    if kind == "cupy":
        src = src.get()
    import numpy

    numpy.copyto(buf.as_numpy(), src, casting="no")
    buf.seal()
