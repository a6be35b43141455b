"""CuPy consumer: opens the tensor by name, reads it in place, writes back."""
import cupy

import gpubroker

client = gpubroker.connect()
x = client.open("example.activations", wait=True, timeout=60).as_cupy()  # waits on CuPy's stream
print("cupy:", x.shape, x.dtype, "sum =", float(x.sum()))
x[0, 0] = -1.0  # seen by the producer: it is the same memory
cupy.cuda.get_current_stream().synchronize()
