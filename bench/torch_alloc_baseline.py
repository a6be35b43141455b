"""The allocation baseline of gpubroker-bench --backend cuda: torch's CUDA
caching allocator.

In this process, torch.empty + del of a small tensor, timed one pair at a
time; with --gpubroker-lib, the broker's allocate + release from Python over
its C ABI takes turns with it. Then N processes at once (--processes), each
allocating and freeing as fast as it can for --milliseconds: pairs per second
over all of them. Prints one JSON document (latencies in microseconds).
"""
import argparse
import json
import os
import random
import sys
import time

import torch
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

RESERVOIR = 20000


def worker(size, milliseconds, ready, go, results):
    torch.cuda.set_device(0)
    for _ in range(1000):
        x = torch.empty(size, dtype=torch.uint8, device="cuda")
        del x
    ready.put(1)
    go.wait()
    samples = []
    ops = 0
    start = time.perf_counter()
    end = start + milliseconds / 1000.0
    while True:
        t0 = time.perf_counter()
        x = torch.empty(size, dtype=torch.uint8, device="cuda")
        del x
        t1 = time.perf_counter()
        ops += 1
        if len(samples) < RESERVOIR:
            samples.append((t1 - t0) * 1e6)
        else:
            k = random.randrange(ops)
            if k < RESERVOIR:
                samples[k] = (t1 - t0) * 1e6
        if t1 >= end:
            break
    results.put((ops, time.perf_counter() - start, samples))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--iterations", type=int, default=2000)
    p.add_argument("--processes", default="1,8,16")
    p.add_argument("--milliseconds", type=int, default=1000)
    p.add_argument("--gpubroker-lib", default="")
    p.add_argument("--socket-dir", default="")
    a = p.parse_args()
    torch.cuda.set_device(0)
    broker = None
    if a.gpubroker_lib:
        from gpubroker_ctypes import Broker

        broker = Broker(a.gpubroker_lib, a.socket_dir)
    out = {"torch": torch.__version__, "size": a.size, "torch_us": [], "gpubroker_us": []}
    warm = a.iterations // 10
    for i in range(warm + a.iterations):
        t0 = time.perf_counter()
        x = torch.empty(a.size, dtype=torch.uint8, device="cuda")
        del x
        t1 = time.perf_counter()
        if broker:
            b = broker.allocate(a.size)
            broker.release(b)
        t2 = time.perf_counter()
        if i >= warm:
            out["torch_us"].append((t1 - t0) * 1e6)
            if broker:
                out["gpubroker_us"].append((t2 - t1) * 1e6)
    ctx = mp.get_context("spawn")
    out["throughput"] = []
    for n in [int(s) for s in a.processes.split(",") if s]:
        ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        procs = [ctx.Process(target=worker, args=(a.size, a.milliseconds, ready, go, results))
                 for _ in range(n)]
        for pr in procs:
            pr.start()
        for _ in procs:
            ready.get()
        go.set()
        ops, longest, samples = 0, 0.0, []
        for _ in procs:
            o, secs, s = results.get()
            ops += o
            longest = max(longest, secs)
            samples += s
        for pr in procs:
            pr.join()
        out["throughput"].append({"processes": n, "per_second": ops / longest, "us": samples})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
