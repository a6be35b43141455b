"""NumPy producer: shares a host array; readers map the same pages (host backend)
or get it on the GPU (CUDA backend: the copy goes through CuPy or torch)."""
import numpy as np

import gpubroker

client = gpubroker.connect()
buf = client.share(np.arange(12, dtype=np.float32).reshape(3, 4), name="example.table")
print("numpy: shared", buf)
input("numpy: press Enter to stop... ")
