"""JAX consumer: reads the shared array where it lies (set XLA_PYTHON_CLIENT_PREALLOCATE=false)."""
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import jax.numpy as jnp  # noqa: E402

import gpubroker  # noqa: E402

client = gpubroker.connect()
x = client.open("example.signal", wait=True, timeout=60).as_jax()
print("jax:", x.shape, x.dtype, "mean =", float(jnp.mean(x)))
