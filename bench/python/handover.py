"""The Python package's benchmark, in one run against baselines of the same run.

1. Overhead of the package over the C ABI: each operation through gpubroker
   against the same C call made through bare ctypes with prepared arguments
   (and the cost of a ctypes call that does nothing).
2. On a GPU (torch and CuPy installed): hand a tensor from PyTorch in this
   process to CuPy in another, 64 MiB and 1 GiB, through the package
   (allocate + seal in A; open + wrap + stream wait, a write, in B), against
   torch.multiprocessing and against the copy path (tensor.cpu(), pickle over
   a pipe, cupy.asarray).

Prints tables (p50/p99 in microseconds) and ratios; --json-out writes them.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gpubroker
from gpubroker import _lib


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def row(name, us):
    return {"case": name, "p50_us": round(pct(us, 50), 2), "p99_us": round(pct(us, 99), 2),
            "n": len(us)}  # fmt: skip


def start_daemon(backend):
    d = tempfile.mkdtemp(prefix="gpubroker-bench-")
    bin_dir = os.environ.get("GPUBROKER_BIN_DIR") or str(
        Path(gpubroker.library_path()).resolve().parent.parent / "bin")
    p = subprocess.Popen([f"{bin_dir}/gpubrokerd", "--socket-dir", d, "--metrics-address",
                          "127.0.0.1:0", "--backend", backend, "--log-level", "warn"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    line = p.stdout.readline()
    if not line:
        raise RuntimeError(p.stderr.read().strip().splitlines()[-1])
    return p, d


# 1. The package's overhead -------------------------------------------------------

def overhead(socket_dir, n):
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


# 2. The GPU hand-over -------------------------------------------------------------

def broker_child(conn, socket_dir):
    import cupy

    c = gpubroker.connect(socket_dir)
    cupy.zeros(1).sum()
    conn.send("ready")
    while True:
        name = conn.recv()
        if name is None:
            return
        b = c.open(name)
        a = b.as_cupy()  # waits on CuPy's stream for the producer's fence
        a[:4] = 1
        cupy.cuda.get_current_stream().synchronize()
        del a
        b.release()
        conn.send(1)


def torch_child(inbox, outbox):
    import torch

    torch.cuda.set_device(0)
    outbox.put("ready")
    while True:
        t = inbox.get()
        if t is None:
            return
        t[:4].fill_(1)
        torch.cuda.synchronize()
        outbox.put(1)
        del t


def copy_child(conn):
    import cupy

    cupy.zeros(1).sum()
    conn.send("ready")
    while True:
        arr = conn.recv()
        if arr is None:
            return
        a = cupy.asarray(arr)
        a[:4] = 1
        cupy.cuda.get_current_stream().synchronize()
        conn.send(1)


def gpu_handover(socket_dir, sizes, n, n_copy):
    import torch

    ctx = mp.get_context("spawn")
    results = []
    for size in sizes:
        label = f"{size >> 20} MiB"
        # Through the package.
        a_end, b_end = ctx.Pipe()
        proc = ctx.Process(target=broker_child, args=(b_end, socket_dir))
        proc.start()
        assert a_end.recv() == "ready"
        c = gpubroker.connect(socket_dir)
        stream = torch.cuda.current_stream()
        us = []
        for i in range(n + 10):
            t0 = time.perf_counter()
            buf = c.allocate(shape=(size,), dtype=torch.uint8, name=f"bench.{i}")
            buf.as_torch()  # what a producer would fill (left unfilled: fill-free)
            buf.seal(stream)
            a_end.send(f"bench.{i}")
            a_end.recv()
            dt = (time.perf_counter() - t0) * 1e6
            buf.release()
            if i >= 10:
                us.append(dt)
        a_end.send(None)
        proc.join()
        c.close()
        results.append(row(f"gpubroker torch -> cupy, {label}", us))
        print(f"  broker {label}: p50 {pct(us, 50):.0f} us", file=sys.stderr)

        # torch.multiprocessing.
        import torch.multiprocessing as tmp

        tctx = tmp.get_context("spawn")
        inbox, outbox = tctx.Queue(), tctx.Queue()
        proc = tctx.Process(target=torch_child, args=(inbox, outbox))
        proc.start()
        assert outbox.get() == "ready"
        us = []
        for i in range(n + 10):
            t0 = time.perf_counter()
            x = torch.empty(size, dtype=torch.uint8, device="cuda")
            inbox.put(x)
            outbox.get()
            dt = (time.perf_counter() - t0) * 1e6
            del x
            if i >= 10:
                us.append(dt)
        inbox.put(None)
        proc.join()
        results.append(row(f"torch.multiprocessing, {label}", us))
        print(f"  torch.mp {label}: p50 {pct(us, 50):.0f} us", file=sys.stderr)

        # The copy path.
        a_end, b_end = ctx.Pipe()
        proc = ctx.Process(target=copy_child, args=(b_end,))
        proc.start()
        assert a_end.recv() == "ready"
        x = torch.zeros(size, dtype=torch.uint8, device="cuda")
        us = []
        for i in range(n_copy + 1):
            t0 = time.perf_counter()
            a_end.send(x.cpu().numpy())
            a_end.recv()
            dt = (time.perf_counter() - t0) * 1e6
            if i >= 1:
                us.append(dt)
        a_end.send(None)
        proc.join()
        results.append(row(f"copy path (cpu, pickle, cupy.asarray), {label}", us))
        print(f"  copy {label}: p50 {pct(us, 50):.0f} us", file=sys.stderr)
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--copy-iterations", type=int, default=10)
    ap.add_argument("--json-out")
    args = ap.parse_args()
    report = {"python": sys.version.split()[0], "library": gpubroker.library_version()}

    daemon, d = start_daemon("host")
    try:
        calls, table = overhead(d, args.iterations)
    finally:
        daemon.terminate()
        daemon.wait()
    report["ctypes"] = calls
    report["overhead_host"] = table
    print("== the package over the C ABI (host backend), p50 per operation")
    for r in calls:
        print(f"  {r['case']}: {r['p50_us']} us")
    print(f"  {'op':<10} {'package':>10} {'C ABI':>10} {'added':>8}")
    for t in table:
        print(f"  {t['op']:<10} {t['package_p50_us']:>8} us {t['c_abi_p50_us']:>8} us "
              f"{t['added_us']:>6} us")  # fmt: skip

    try:
        import cupy  # noqa: F401
        import torch

        if not torch.cuda.is_available():
            raise ImportError("no CUDA device for torch")
        daemon, d = start_daemon("cuda")
    except (ImportError, RuntimeError) as e:
        print(f"== GPU hand-over: skipped ({e})")
    else:
        try:
            rows = gpu_handover(d, [64 << 20, 1 << 30], args.iterations, args.copy_iterations)
        finally:
            daemon.terminate()
            daemon.wait()
        report["handover"] = rows
        print("== PyTorch in A to CuPy in B (B writes, synchronizes, answers)")
        for r in rows:
            print(f"  {r['case']:<52} p50 {r['p50_us']:>10.1f} us   p99 {r['p99_us']:>10.1f} us")
        by = {r["case"]: r["p50_us"] for r in rows}
        for label in ("64 MiB", "1024 MiB"):
            b = by[f"gpubroker torch -> cupy, {label}"]
            t = by[f"torch.multiprocessing, {label}"]
            c = by[f"copy path (cpu, pickle, cupy.asarray), {label}"]
            print(f"  {label}: {t / b:.2f}x faster than torch.multiprocessing, "
                  f"{c / b:.0f}x faster than the copy path")  # fmt: skip
            report.setdefault("ratios", {})[label] = {"vs_torch_mp": round(t / b, 2),
                                                      "vs_copy": round(c / b, 1)}  # fmt: skip
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
