"""The consumer's side of a GPU hand-over, piece by piece: where B's
`open(name)` and `as_cupy()` spend their time when they run cold, as they do
in a hand-over (handover.py), each after the process has slept.

One process, two sessions of one daemon (CUDA backend): A allocates a named
64 MiB float32 buffer and seals it (posted); the process sleeps (--sleep-us);
then B takes it, timed, in one of these ways per iteration (in turn):

  package   b.open(name), then buf.as_cupy(): what the hand-over times;
  posted    the same with b.open(name, posted=True): the open returns at
            once and as_cupy() takes the daemon's answer in;
  pieces    the same work cut where as_cupy cuts it: the C ABI's open through
            bare ctypes, the Buffer object, its facts (one C call, unpacked),
            CuPy's current stream, gpubroker_buffer_view_on (the stream's
            wait on the ready fence, and the view), CuPy's UnownedMemory, and
            the ndarray over it;
  floors    what no package can avoid, each after its own sleep: a ctypes
            call that does nothing (gpubroker_version), CuPy's current stream,
            and a CuPy ndarray over memory CuPy does not own.

Prints p50/p99 in microseconds per piece; --json-out writes them. Needs a
GPU, CuPy, and GPUBROKER_LIBRARY / GPUBROKER_BIN_DIR as handover.py does.
Reaches into the package's internals (the handle, the library's entry points)
to cut its calls apart: a measuring tool, not an example.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from ctypes import byref, c_void_p
from typing import Dict, List

import gpubroker
from gpubroker import _buffer
from handover import start_daemon
from stats import row

NAME = "consumer-steps"


def sleep_us(us: int) -> None:
    time.sleep(us / 1e6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--sleep-us", type=int, default=1000,
                    help="idle time before each timed piece of work (default 1000)")
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--json-out")
    args = ap.parse_args()

    try:
        import cupy
    except ImportError:
        print("consumer_steps: skipped (no CuPy)")
        return
    if cupy.cuda.runtime.getDeviceCount() == 0:
        print("consumer_steps: skipped (no GPU)")
        return

    daemon, socket_dir = start_daemon("cuda")
    try:
        results = measure(args, cupy, socket_dir)
    finally:
        daemon.terminate()
        daemon.wait()
        shutil.rmtree(socket_dir, ignore_errors=True)

    print(f"B's open and as_cupy() of a {args.size_mib} MiB buffer, each after "
          f"{args.sleep_us} us idle, p50 / p99 us ({args.iterations} iterations):")
    for group, rows in results.items():
        print(f"  {group}")
        for r in rows:
            print(f"    {r['case']:<58} {r['p50_us']:9.1f} {r['p99_us']:9.1f}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"sleep_us": args.sleep_us, "size_mib": args.size_mib,
                       "iterations": args.iterations, "steps": results}, f, indent=1)


def measure(args: argparse.Namespace, cupy, socket_dir: str) -> Dict[str, List[Dict]]:
    a = gpubroker.connect(socket_dir)
    b = gpubroker.connect(socket_dir)
    lib = b._lib
    n = args.size_mib << 20
    name = NAME.encode()
    cupy.cuda.Device(0).use()
    stream = cupy.cuda.Stream(non_blocking=True)
    stream.use()

    package: Dict[str, List[float]] = {k: [] for k in ("open", "as_cupy", "both")}
    posted: Dict[str, List[float]] = {k: [] for k in (
        "open(posted=True)", "as_cupy (the answer taken in)", "both")}  # fmt: skip
    pieces: Dict[str, List[float]] = {k: [] for k in (
        "open through bare ctypes (gpubroker_open)", "the Buffer object",
        "facts (gpubroker_buffer_get_facts, unpacked)", "CuPy's current stream",
        "gpubroker_buffer_view_on (fence wait + view)", "UnownedMemory + MemoryPointer",
        "cupy.ndarray over it", "sum")}  # fmt: skip
    floors: Dict[str, List[float]] = {k: [] for k in (
        "a ctypes call that does nothing (gpubroker_version)", "CuPy's current stream",
        "cupy.ndarray over UnownedMemory (no broker)")}  # fmt: skip
    scratch = cupy.empty(n // 4, dtype="float32")
    clock = time.perf_counter_ns

    def produce() -> gpubroker.Buffer:
        buf = a.allocate(shape=(n // 4,), dtype="float32", name=NAME)
        buf.seal(posted=True)
        return buf

    for i in range(args.warmup + args.iterations):
        keep = i >= args.warmup
        for mode in ("package", "posted", "pieces", "floors"):
            produced = produce()
            sleep_us(args.sleep_us)
            if mode in ("package", "posted"):
                t0 = clock()
                buf = b.open(NAME, posted=mode == "posted")
                t1 = clock()
                arr = buf.as_cupy()
                t2 = clock()
                arr[0] = 1  # used, as B uses it
                stream.synchronize()
                del arr
                buf.release()
                if keep:
                    into = package if mode == "package" else posted
                    for k, us in zip(into, (t1 - t0, t2 - t1, t2 - t0)):
                        into[k].append(us / 1e3)
            elif mode == "pieces":
                out, view = c_void_p(), c_void_p()
                t = [clock()]
                rc = lib.open(b._h, name, None, byref(out))
                t.append(clock())
                if rc:
                    raise lib.error(rc)
                buf = gpubroker.Buffer(lib, out.value)
                t.append(clock())
                shape, dtype, strides, data, span = buf._cupy_layout()
                t.append(clock())
                s = cupy.cuda.get_current_stream().ptr
                t.append(clock())
                rc = lib.buffer_view_on(buf._h, s, byref(view))
                t.append(clock())
                if rc:
                    raise lib.error(rc)
                hold = _buffer._Hold(lib, view.value)
                mem = cupy.cuda.UnownedMemory(data, span, hold, buf.device_id)
                ptr = cupy.cuda.MemoryPointer(mem, 0)
                t.append(clock())
                arr = cupy.ndarray(shape, dtype, ptr, strides)
                t.append(clock())
                arr[0] = 1
                stream.synchronize()
                del arr, ptr, mem, hold
                buf.release()
                if keep:
                    for k, (x, y) in zip(pieces, zip(t, t[1:])):
                        pieces[k].append((y - x) / 1e3)
                    pieces["sum"].append((t[-1] - t[0]) / 1e3)
            else:
                t0 = clock()
                lib.version()
                t1 = clock()
                sleep_us(args.sleep_us)
                t2 = clock()
                cupy.cuda.get_current_stream()
                t3 = clock()
                sleep_us(args.sleep_us)
                t4 = clock()
                mem = cupy.cuda.UnownedMemory(scratch.data.ptr, n, scratch, 0)
                arr = cupy.ndarray((n // 4,), "float32", cupy.cuda.MemoryPointer(mem, 0), None)
                t5 = clock()
                del arr, mem
                if keep:
                    for k, us in zip(floors, ((t1 - t0), (t3 - t2), (t5 - t4))):
                        floors[k].append(us / 1e3)
            produced.release()

    b.close()
    a.close()
    return {
        "the package (what handover.py times as B: open, B: wrap)":
            [row(k, v) for k, v in package.items()],
        "the package, the open posted": [row(k, v) for k, v in posted.items()],
        "the same work, cut apart": [row(k, v) for k, v in pieces.items()],
        "floors": [row(k, v) for k, v in floors.items()],
    }  # fmt: skip


if __name__ == "__main__":
    main()
