"""The torch.multiprocessing baseline of gpubroker-bench --backend cuda.

The parent allocates a CUDA tensor, hands it to a child process through a
torch.multiprocessing queue; the child writes into it, synchronizes and
replies. Prints one JSON document with the latencies in microseconds.
"""
import argparse
import json
import time

import torch
import torch.multiprocessing as mp


def child(inbox, outbox):
    torch.cuda.set_device(0)
    while True:
        t = inbox.get()
        if t is None:
            return
        t[:4].fill_(1)
        torch.cuda.synchronize()
        outbox.put(1)
        del t


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=64 << 20)
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=child, args=(inbox, outbox))
    proc.start()
    torch.cuda.set_device(0)
    us = []
    for i in range(a.warmup + a.iterations):
        t0 = time.perf_counter()
        x = torch.empty(a.size, dtype=torch.uint8, device="cuda")
        inbox.put(x)
        outbox.get()
        dt = (time.perf_counter() - t0) * 1e6
        del x
        if i >= a.warmup:
            us.append(dt)
    inbox.put(None)
    proc.join()
    print(json.dumps({"torch": torch.__version__, "size": a.size, "us": us}))


if __name__ == "__main__":
    main()
