"""The package's own cost: each operation through gpubroker against the same
C call made through bare ctypes with prepared arguments, interleaved, so that
both see the same daemon and machine state, and the cost of a ctypes call
that does nothing."""

from __future__ import annotations

import ctypes
import time

import gpubroker
from gpubroker import _lib

from stats import pct, row

def overhead(socket_dir: str, n: int):
    c = gpubroker.connect(socket_dir)
    lib = _lib.load()
    h = c._h
    rows = []
    # A ctypes call that does nothing but cross into C and back.
    raw_buf = ctypes.c_void_p()
    lib.allocate(h, 4096, None, ctypes.byref(raw_buf))
    t = []
    for _ in range(n * 10):
        t0 = time.perf_counter_ns()
        lib.buffer_size(raw_buf.value)
        t.append((time.perf_counter_ns() - t0) / 1000)
    rows.append(row("ctypes call, no work (gpubroker_buffer_size)", t))
    lib.buffer_release(raw_buf.value)

    pkg = {"allocate": [], "seal": [], "open": [], "wrap": [], "release": []}
    bare = {k: [] for k in pkg}
    opts = _lib.AllocOptions()
    lib.alloc_options_init(ctypes.byref(opts))
    opts.dtype, opts.ndim = 12, 1
    shape = (ctypes.c_int64 * 1)(1024)
    opts.shape = shape
    oo = _lib.OpenOptions()
    lib.open_options_init(ctypes.byref(oo))
    for i in range(n):
        # Interleaved, so that both see the same daemon and machine state.
        name = f"ovh.p.{i}"
        t0 = time.perf_counter_ns()
        b = c.allocate(shape=(1024,), dtype="float32", name=name)
        t1 = time.perf_counter_ns()
        b.seal()
        t2 = time.perf_counter_ns()
        r = c.open(name)
        t3 = time.perf_counter_ns()
        cap = r.__dlpack__()
        t4 = time.perf_counter_ns()
        del cap
        r.release()
        t5 = time.perf_counter_ns()
        b.release()
        for k, a, z in (("allocate", t0, t1), ("seal", t1, t2), ("open", t2, t3),
                        ("wrap", t3, t4)):  # fmt: skip
            pkg[k].append((z - a) / 1000)
        pkg["release"].append((time.perf_counter_ns() - t5) / 1000)

        nm = f"ovh.b.{i}".encode()
        opts.name = nm
        out, got = ctypes.c_void_p(), ctypes.c_void_p()
        t0 = time.perf_counter_ns()
        lib.allocate(h, 4096, ctypes.byref(opts), ctypes.byref(out))
        t1 = time.perf_counter_ns()
        lib.buffer_seal_on(out.value, None)
        t2 = time.perf_counter_ns()
        lib.open(h, nm, ctypes.byref(oo), ctypes.byref(got))
        t3 = time.perf_counter_ns()
        lib.buffer_to_dlpack(got.value, 0, ctypes.byref(raw_buf))
        t4 = time.perf_counter_ns()
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(
            ctypes.c_void_p.from_address(raw_buf.value + 56).value)(raw_buf.value)
        lib.buffer_release(got.value)
        t5 = time.perf_counter_ns()
        lib.buffer_release(out.value)
        for k, a, z in (("allocate", t0, t1), ("seal", t1, t2), ("open", t2, t3),
                        ("wrap", t3, t4)):  # fmt: skip
            bare[k].append((z - a) / 1000)
        bare["release"].append((time.perf_counter_ns() - t5) / 1000)
    table = []
    for k in pkg:
        p, b = pct(pkg[k], 50), pct(bare[k], 50)
        table.append({"op": k, "package_p50_us": round(p, 2), "c_abi_p50_us": round(b, 2),
                      "added_us": round(p - b, 2)})  # fmt: skip
    c.close()
    return rows, table

