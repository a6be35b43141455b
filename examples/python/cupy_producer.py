"""CuPy producer: shares an array under a name (one device-to-device copy, sealed)."""
import cupy

import gpubroker

client = gpubroker.connect()
a = cupy.linspace(0, 1, 1 << 20, dtype=cupy.float32)
buf = client.share(a, name="example.signal")  # copied on CuPy's stream, sealed there
print("cupy: shared", buf)
input("cupy: press Enter to stop (the buffer goes with this process)... ")
