"""PyTorch consumer of the NumPy producer's table: a tensor over the same memory."""
import gpubroker

client = gpubroker.connect()
t = client.open("example.table", wait=True, timeout=60).as_torch()
print("torch:", t.device, t.dtype, tuple(t.shape), t.sum().item())
