"""The torch.multiprocessing baseline of gpubroker-bench --backend cuda.

At each size, the parent allocates a CUDA tensor and hands it to a child
process through a torch.multiprocessing queue; the child writes into it,
synchronizes and replies. With --gpubroker-lib, the same hand-over through
the broker from Python over its C ABI takes turns with it, through the same
queue: the parent allocates and seals, the child opens by id, makes its
stream wait on the fence, writes with torch, synchronizes and replies.
Prints one JSON document with the latencies in microseconds.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def child(inbox, outbox, lib_path, socket_dir):
    torch.cuda.set_device(0)
    torch.cuda.synchronize()
    broker = None
    if lib_path:
        from gpubroker_ctypes import Broker, CudaArray

        broker = Broker(lib_path, socket_dir)
    while True:
        msg = inbox.get()
        if msg is None:
            return
        kind, payload, size = msg
        if kind == "torch":
            t = payload
            t[:4].fill_(1)
            torch.cuda.synchronize()
            outbox.put(1)
            del t
            outbox.put(2)
        else:
            buf = broker.open_id(payload)
            stream = torch.cuda.current_stream()
            broker.wait_ready(buf, stream.cuda_stream)
            t = torch.as_tensor(CudaArray(broker.data(buf), size), device="cuda")
            t[:4].fill_(1)
            torch.cuda.synchronize()
            outbox.put(1)
            del t
            broker.release(buf)
            outbox.put(2)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default=str(64 << 20))
    p.add_argument("--size", type=int, default=0)
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--gpubroker-lib", default="")
    p.add_argument("--socket-dir", default="")
    a = p.parse_args()
    sizes = [a.size] if a.size else [int(s) for s in a.sizes.split(",") if s]
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=child, args=(inbox, outbox, a.gpubroker_lib, a.socket_dir))
    proc.start()
    torch.cuda.set_device(0)
    broker = None
    if a.gpubroker_lib:
        from gpubroker_ctypes import Broker

        broker = Broker(a.gpubroker_lib, a.socket_dir)
    out = {"torch": torch.__version__, "sizes": {}}
    for size in sizes:
        n = a.iterations if size < (1 << 30) else (max(10, a.iterations // 4) if size < (16 << 30) else 5)
        times = {"torch_us": [], "gpubroker_us": []}
        try:
            for i in range(a.warmup + n):
                for kind in ("torch", "gpubroker") if broker else ("torch",):
                    stream = torch.cuda.current_stream()
                    t0 = time.perf_counter()
                    if kind == "torch":
                        x = torch.empty(size, dtype=torch.uint8, device="cuda")
                        inbox.put(("torch", x, size))
                    else:
                        x = broker.allocate(size)
                        broker.seal(x, stream.cuda_stream)
                        inbox.put(("gpubroker", broker.id(x), size))
                    outbox.get()
                    dt = (time.perf_counter() - t0) * 1e6
                    outbox.get()
                    if kind == "torch":
                        del x
                    else:
                        broker.release(x)
                    if i >= a.warmup:
                        times[kind + "_us"].append(dt)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            print("size %d: %s" % (size, e), file=sys.stderr)
        torch.cuda.empty_cache()
        if times["torch_us"]:
            out["sizes"][str(size)] = times
    inbox.put(None)
    proc.join()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
