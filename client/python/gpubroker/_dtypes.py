"""Element types: the broker's names and codes, and how frameworks spell them."""

from __future__ import annotations

from typing import Any, Dict, NamedTuple


class DType(NamedTuple):
    name: str  # NumPy's name: "float32", "bfloat16"
    code: int  # gpubroker_dtype_t
    itemsize: int
    typestr: str  # the array interfaces' typestr


_TABLE = [
    DType("bool", 1, 1, "|b1"),
    DType("int8", 2, 1, "|i1"),
    DType("uint8", 3, 1, "|u1"),
    DType("int16", 4, 2, "<i2"),
    DType("uint16", 5, 2, "<u2"),
    DType("int32", 6, 4, "<i4"),
    DType("uint32", 7, 4, "<u4"),
    DType("int64", 8, 8, "<i8"),
    DType("uint64", 9, 8, "<u8"),
    DType("float16", 10, 2, "<f2"),
    # NumPy has no bfloat16; ml_dtypes' one describes itself as two raw bytes.
    DType("bfloat16", 11, 2, "<V2"),
    DType("float32", 12, 4, "<f4"),
    DType("float64", 13, 8, "<f8"),
    DType("complex64", 14, 8, "<c8"),
    DType("complex128", 15, 16, "<c16"),
]
BY_NAME: Dict[str, DType] = {d.name: d for d in _TABLE}
BY_CODE: Dict[int, DType] = {d.code: d for d in _TABLE}
_ALIASES = {"bool_": "bool", "half": "float16", "bf16": "bfloat16"}


def resolve(dtype: Any) -> DType:
    """The broker's dtype for a name ("float32", "f4", "<f2"), a NumPy dtype or
    type (``numpy.float16``), a torch dtype (``torch.bfloat16``), a JAX or
    CuPy type, or an ml_dtypes type. Raises TypeError for anything else."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        name = dtype
    elif type(dtype).__module__.startswith("torch"):
        name = str(dtype).rpartition(".")[2]  # "torch.float32"
    elif isinstance(dtype, type):  # numpy.float16, jnp.bfloat16, ml_dtypes.bfloat16
        name = dtype.__name__
    else:
        if not hasattr(dtype, "name") and hasattr(dtype, "dtype"):
            dtype = dtype.dtype  # an array
        named = getattr(dtype, "name", None)
        if not isinstance(named, str):
            raise TypeError(f"not a dtype: {dtype!r}")
        name = named
    name = _ALIASES.get(name, name)
    found = BY_NAME.get(name)
    if found is not None:
        return found
    return _from_numpy(dtype)


def _from_numpy(dtype: Any) -> DType:
    try:
        import numpy
    except ImportError:
        raise TypeError(f"unknown dtype {dtype!r}") from None
    try:
        d = numpy.dtype(dtype)
    except TypeError:
        raise TypeError(f"unknown dtype {dtype!r}") from None
    if d.byteorder == ">":
        raise TypeError(f"dtype {dtype!r} is big-endian; the broker keeps little-endian data")
    found = BY_NAME.get(_ALIASES.get(d.name, d.name))
    if found is None:
        raise TypeError(f"dtype {dtype!r} ({d.name}) has no broker equivalent")
    return found


def numpy_dtype(d: DType) -> Any:
    """The NumPy dtype of `d`; bfloat16 needs ml_dtypes."""
    import numpy

    if d.name != "bfloat16":
        return numpy.dtype(d.name)
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError(
            "NumPy has no bfloat16: install ml_dtypes, read the buffer with "
            "as_torch() or as_jax(), or take its bytes with "
            "numpy.asarray(buffer).view(numpy.uint16)"
        ) from None
    return numpy.dtype(ml_dtypes.bfloat16)
