"""PyTorch producer: fills a named tensor in broker memory, seals it on its stream."""
import torch

import gpubroker

client = gpubroker.connect()
buf = client.allocate(shape=(1024, 1024), dtype=torch.float32, name="example.activations")
t = buf.as_torch()  # the broker's memory: no copy
t.copy_(torch.arange(t.numel(), dtype=torch.float32, device=t.device).view_as(t))
buf.seal(torch.cuda.current_stream())  # no synchronize: readers' streams wait on the fence
print("torch: sealed", buf)
input("torch: press Enter (after the consumer ran) to see its write-back... ")
torch.cuda.synchronize()
print("torch: t[0, 0] =", float(t[0, 0]))
