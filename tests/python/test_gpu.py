"""GPU memory across frameworks and processes, no copy: PyTorch, CuPy, JAX,
Numba. They skip, saying why, where no GPU or framework is present."""

import importlib.util

import pytest

import gpubroker
from conftest import eventually

pytestmark = pytest.mark.gpu

JAX_ENV = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "JAX_PLATFORMS": "cuda"}
MIB = 1 << 20


def need(*modules):
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"not installed here: {', '.join(missing)}")


@pytest.fixture
def gpu_daemon(make_daemon):
    """The daemon on the CUDA backend; skips where no GPU qualifies."""
    try:
        return make_daemon("--backend", "cuda", "--pool-bytes", "16GiB")
    except RuntimeError as e:
        pytest.skip(f"no GPU backend here: {str(e).splitlines()[-1][:200]}")


def test_torch_produces_cupy_writes_back_jax_reads_one_buffer_no_copy(gpu_daemon, children):
    need("torch", "cupy", "jax")
    rows, cols = 4096, 4096  # float32: 64 MiB, so that a copy would show in free memory
    producer = children(f"""
        import torch
        c = gpubroker.connect()
        buf = c.allocate(shape=({rows}, {cols}), dtype=torch.float32, name="gpu.tri")
        t = buf.as_torch()
        assert t.is_cuda and t.data_ptr() == buf.data_ptr, (t.data_ptr(), buf.data_ptr)
        t.copy_(torch.arange({rows * cols}, dtype=torch.float32, device=t.device).view({rows}, {cols}))
        buf.seal(torch.cuda.current_stream())   # no synchronize: the fence orders readers
        say("sealed", buf.device, buf.data_ptr)
        assert hear() == "written back"
        torch.cuda.synchronize()
        say("torch sees", float(t[0, 0]), float(t[-1, -1]), float(t[1, 2]))
        hear()
    """, gpu_daemon.dir)
    words = producer.expect(120).split()
    assert words[0] == "sealed" and words[1].startswith("GPU-"), words

    consumer = children(f"""
        import cupy
        free_before = cupy.cuda.runtime.memGetInfo()[0]
        c = gpubroker.connect()
        buf = c.open("gpu.tri", wait=True, timeout=60)
        a = buf.as_cupy()                       # waits on CuPy's current stream
        free_after = cupy.cuda.runtime.memGetInfo()[0]
        same = a.data.ptr == buf.data_ptr
        n = {rows * cols}
        ok = bool((a == cupy.arange(n, dtype=cupy.float32).reshape({rows}, {cols})).all())
        a[0, 0] = -1.0
        a[-1, -1] = -2.0
        cupy.cuda.get_current_stream().synchronize()
        say(same, ok, free_before - free_after, buf.nbytes)
        hear()
    """, gpu_daemon.dir)
    same, ok, grew, nbytes = consumer.expect(120).split()
    assert same == "True", "CuPy's pointer is not the broker's"
    assert ok == "True", "CuPy read wrong values"
    assert int(grew) < int(nbytes) // 2, f"device memory fell by {grew} bytes on open: a copy?"

    reader = children("""
        import jax, jax.numpy as jnp
        c = gpubroker.connect()
        buf = c.open("gpu.tri")
        x = buf.as_jax()
        same = x.unsafe_buffer_pointer() == buf.data_ptr
        say(same, float(x[0, 0]), float(x[-1, -1]), float(x[3, 5]), x.dtype, x.shape)
        hear()
    """, gpu_daemon.dir, env=JAX_ENV)
    jax_words = reader.expect(180).split(maxsplit=5)
    assert jax_words[0] == "True", "JAX's pointer is not the broker's"
    assert [float(v) for v in jax_words[1:4]] == [-1.0, -2.0, 3 * cols + 5.0]
    assert jax_words[4] == "float32"

    producer.send("written back")
    assert producer.expect(60) == f"torch sees -1.0 -2.0 {cols + 2.0}", "PyTorch misses the write-back"
    for p in (producer, consumer, reader):
        p.send("done")
        p.finish(60)


def test_consumers_stream_waits_for_the_producers_fence_and_fails_without(gpu_daemon, children):
    need("torch", "cupy")
    n = 16 * MIB // 4
    # The consumer comes up first (CUDA's start-up takes a while), then the
    # producer queues >= 5 s of GPU time before its writes and seals at once.
    consumer = children("""
        import cupy

        class NoWait:
            # The control: the same export with the stream wait removed (-1).
            def __init__(self, b):
                self.b = b
            def __dlpack_device__(self):
                return self.b.__dlpack_device__()
            def __dlpack__(self, stream=None, **kw):
                return self.b.__dlpack__(stream=-1, **kw)

        cupy.zeros(1).sum()
        c = gpubroker.connect()
        say("ready")
        control = cupy.from_dlpack(NoWait(c.open("gpu.fence.0", wait=True, timeout=120)))
        early = float(control.sum())
        # Sealed before gpu.fence.0 was: a posted open finds it, and its
        # answer is taken in by as_cupy(), whose stream wait comes after.
        waited = c.open("gpu.fence.1", posted=True).as_cupy()
        late = float(waited.sum())
        say(early, late)
    """, gpu_daemon.dir)
    # The same with torch in B: as_torch() waits on torch's current stream.
    torch_consumer = children("""
        import torch

        class NoWait:
            def __init__(self, b):
                self.b = b
            def __dlpack_device__(self):
                return self.b.__dlpack_device__()
            def __dlpack__(self, stream=None, **kw):
                return self.b.__dlpack__(stream=-1, **kw)

        torch.zeros(1, device="cuda").sum().item()
        c = gpubroker.connect()
        say("ready")
        control = torch.from_dlpack(NoWait(c.open("gpu.fence.2", wait=True, timeout=120)))
        early = control.sum().item()
        waited = c.open("gpu.fence.3", wait=True).as_torch()
        late = waited.sum().item()
        say(early, late)
    """, gpu_daemon.dir)
    assert consumer.expect(120) == "ready"
    assert torch_consumer.expect(120) == "ready"
    producer = children(f"""
        import torch
        c = gpubroker.connect()
        bufs = [c.allocate(shape=({n},), dtype="float32", name=f"gpu.fence.{{k}}") for k in range(4)]
        ts = [b.as_torch() for b in bufs]
        for t in ts:
            t.fill_(1.0)
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            torch.cuda._sleep(10_000_000_000)   # >= 5 s of GPU time at <= 2 GHz
            for t in ts:
                t.fill_(2.0)
        for k in (1, 0, 2, 3):                  # gpu.fence.1 before the cupy control's
            bufs[k].seal(side)                  # returns at once: nothing synchronized
        say("sealed")
        hear()
        torch.cuda.synchronize()
    """, gpu_daemon.dir)
    assert producer.expect(120) == "sealed"
    early, late = (float(v) for v in consumer.expect(120).split())
    assert late == 2.0 * n, "the consumer's stream did not wait for the producer's writes"
    assert early == 1.0 * n, "the control saw the writes without waiting: the test shows nothing"
    early, late = (float(v) for v in torch_consumer.expect(120).split())
    assert late == 2.0 * n, "torch's current stream did not wait for the producer's writes"
    assert early == 1.0 * n, "torch's control saw the writes without waiting: the test shows nothing"
    producer.send("done")
    producer.finish(60)
    consumer.finish(60)
    torch_consumer.finish(60)


def test_a_consumer_asking_first_maps_before_the_seal_and_its_stream_waits(gpu_daemon,
                                                                          children):
    """docs/fast-path.md, "the consumer asks first": open(wait, allow_unsealed)
    is answered before the seal; wait_sealed() returns at the seal, after
    which as_cupy() orders its stream by itself, and wait_ready(stream)
    orders a stream before it; without either the stream does not wait."""
    need("torch", "cupy")
    n = 16 * MIB // 4
    consumer = children("""
        import cupy

        cupy.zeros(1).sum()
        c = gpubroker.connect()
        say("ready")
        bufs = [c.open(f"gpu.early.{k}", wait=True, allow_unsealed=True, timeout=120)
                for k in range(3)]
        say("opened", *(int(b.is_sealed) for b in bufs))
        with cupy.cuda.Stream(non_blocking=True):  # the control: no wait of any kind
            early = float(bufs[1].as_cupy().sum())
        bufs[2].wait_sealed(timeout=120)        # on the host, until A seals (its GPU still busy)
        with cupy.cuda.Stream(non_blocking=True):
            after_seal = float(bufs[2].as_cupy().sum())
        s = cupy.cuda.Stream(non_blocking=True)
        bufs[0].wait_ready(s)
        with s:
            late = float(bufs[0].as_cupy().sum())
        say(early, after_seal, late)
    """, gpu_daemon.dir)
    assert consumer.expect(120) == "ready"
    producer = children(f"""
        import torch
        c = gpubroker.connect()
        bufs = [c.allocate(shape=({n},), dtype="float32", name=f"gpu.early.{{k}}") for k in range(3)]
        ts = [b.as_torch() for b in bufs]
        for t in ts:
            t.fill_(1.0)
        torch.cuda.synchronize()
        for b in bufs:
            b.publish()                         # the names are bound: the consumer is answered
        hear()                                  # it has them, unsealed
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            torch.cuda._sleep(10_000_000_000)   # >= 5 s of GPU time at <= 2 GHz
            for t in ts:
                t.fill_(2.0)
        for b in bufs:
            b.seal(side)                        # returns at once: nothing synchronized
        say("sealed")
        hear()
        torch.cuda.synchronize()
    """, gpu_daemon.dir)
    assert consumer.expect(120) == "opened 0 0 0", "answered before the seal"
    producer.send("go")
    assert producer.expect(120) == "sealed"
    early, after_seal, late = (float(v) for v in consumer.expect(120).split())
    assert after_seal == 2.0 * n, "as_cupy() after wait_sealed() did not order its stream"
    assert late == 2.0 * n, "the consumer's stream did not wait for the seal"
    assert early == 1.0 * n, "the control saw the writes without waiting: the test shows nothing"
    producer.send("done")
    producer.finish(60)
    consumer.finish(60)


def test_cuda_array_interface_consumers_share_the_memory(gpu_daemon):
    need("cupy", "numba")
    import cupy
    from numba import cuda

    with gpubroker.connect(gpu_daemon.dir) as c:
        buf = c.allocate(shape=(256, 4), dtype="float32", name="gpu.cai")
        cai = buf.__cuda_array_interface__
        assert cai["version"] == 3 and cai["data"][0] == buf.data_ptr
        assert cai["stream"] is None, "unsealed: nothing to wait for"
        with pytest.raises(AttributeError):
            buf.__array_interface__
        a = cupy.asarray(buf)  # through the CUDA Array Interface
        assert a.data.ptr == buf.data_ptr
        a[:] = 3.0
        cupy.cuda.get_current_stream().synchronize()
        buf.seal()
        stream = buf.__cuda_array_interface__["stream"]
        assert isinstance(stream, int) and stream not in (0, 1, 2)
        d = buf.as_numba()
        assert d.__cuda_array_interface__["data"][0] == buf.data_ptr
        assert d.copy_to_host().sum() == 3.0 * 1024
        buf.release()
        # cupy.asarray keeps `buf` itself (the interface's owner) alive, so the
        # memory stays until the Buffer object goes too, as on the host.
        assert "gpu.cai" in [b.name for b in c.list()]
        del a, d, buf
        import gc

        gc.collect()
        assert eventually(lambda: c.list() == [])


def test_share_copies_device_to_device_and_readers_get_the_layout(gpu_daemon, children):
    need("torch", "cupy")
    import torch

    t = torch.arange(24, dtype=torch.float16, device="cuda").reshape(4, 6).t()  # transposed
    with gpubroker.connect(gpu_daemon.dir) as c:
        buf = c.share(t, name="gpu.shared")
        assert buf.is_sealed and buf.is_cuda and buf.strides == (1, 6)
        reader = children("""
            import cupy
            b = gpubroker.connect().open("gpu.shared")
            a = b.as_cupy()
            ref = cupy.arange(24, dtype=cupy.float16).reshape(4, 6).T
            say(bool((a == ref).all()), a.strides == ref.strides)
        """, gpu_daemon.dir)
        assert reader.expect(120) == "True True"
        reader.finish(60)


def test_bfloat16_through_torch_and_jax(gpu_daemon, children):
    need("torch", "jax")
    import torch

    with gpubroker.connect(gpu_daemon.dir) as c:
        buf = c.share(torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16, device="cuda"),
                      name="gpu.bf16")  # fmt: skip
        assert buf.dtype == "bfloat16"
        reader = children("""
            b = gpubroker.connect().open("gpu.bf16")
            x = b.as_jax()
            say(x.dtype, [float(v) for v in x])
        """, gpu_daemon.dir, env=JAX_ENV)
        assert reader.expect(180) == "bfloat16 [1.5, -2.0, 3.25]"
        reader.finish(60)


def test_torch_buffer_pickled_to_a_cupy_process_waits_for_the_writes(gpu_daemon, children):
    need("torch", "cupy")
    n = 4 * MIB
    consumer = children(f"""
        import pickle
        import cupy
        cupy.zeros(1).sum()  # CUDA up before the producer's writes are queued
        say("ready")
        buf = pickle.loads(bytes.fromhex(hear()))   # the claim, posted
        a = buf.as_cupy()                           # its answer, then the stream wait
        ok = bool((a == cupy.arange({n}, dtype=cupy.float32)).all())
        a[0] = -1.0
        cupy.cuda.get_current_stream().synchronize()
        say(type(buf).__name__, buf.is_cuda, a.data.ptr == buf.data_ptr, ok)
        hear()
    """, gpu_daemon.dir)
    assert consumer.expect(120) == "ready"
    producer = children(f"""
        import pickle, torch
        c = gpubroker.connect()
        buf = c.allocate(shape=({n},), dtype=torch.float32)   # unnamed: the ticket finds it
        t = buf.as_torch()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            torch.cuda._sleep(2_000_000_000)    # the writes come late: about a second
            t.copy_(torch.arange({n}, dtype=torch.float32, device=t.device))
        buf.seal(side, posted=True)             # returns at once: nothing synchronized
        say(pickle.dumps(buf).hex())
        assert hear() == "written back"
        torch.cuda.synchronize()
        say("torch sees", float(t[0]), float(t[-1]))
        hear()
    """, gpu_daemon.dir)
    consumer.send(producer.expect(120))
    assert consumer.expect(120) == "Buffer True True True", "CuPy read early, or elsewhere"
    producer.send("written back")
    assert producer.expect(60) == f"torch sees -1.0 {n - 1.0}", "PyTorch misses the write-back"
    for p in (producer, consumer):
        p.send("done")
        p.finish(60)


def test_framework_tensor_keeps_gpu_memory_after_release(gpu_daemon):
    need("torch")
    import torch

    with gpubroker.connect(gpu_daemon.dir) as c:
        buf = c.allocate(shape=(MIB,), dtype="float32", name="gpu.keep")
        assert buf.id != 0  # published: the daemon's list shows who holds it
        t = buf.as_torch()
        buf.release()
        assert [b.name for b in c.list()] == ["gpu.keep"]
        t.fill_(7.0)
        assert float(t.sum()) == 7.0 * MIB
        del t
        import gc

        gc.collect()
        assert eventually(lambda: c.list() == [])




def test_release_on_a_stream_gives_the_buffer_back_after_its_work_without_waiting(gpu_daemon):
    need("torch")
    import torch

    with gpubroker.connect(gpu_daemon.dir) as c:
        side = torch.cuda.Stream()
        buf = c.allocate(shape=(MIB,), dtype="float32", name="gpu.release_on")
        assert buf.id != 0  # published: the daemon's list shows it
        with torch.cuda.stream(side):
            torch.cuda._sleep(2_000_000_000)  # clock cycles: about a second
        buf.release(stream=side)
        assert buf.is_released
        assert not side.query(), "release(stream=...) waited for the stream's work"
        assert c.stats()["books"]["pending_releases"] == 1
        assert [b.name for b in c.list()] == ["gpu.release_on"], "freed before its work was done"
        side.synchronize()
        c.allocate(64).release()  # the next allocate gives back what is done
        assert c.stats()["books"]["pending_releases"] == 0
        assert c.list() == []


def test_cupy_array_keeps_gpu_memory_after_release(gpu_daemon):
    need("cupy")
    import gc

    import cupy

    with gpubroker.connect(gpu_daemon.dir) as c:
        buf = c.allocate(shape=(MIB,), dtype="float32", name="gpu.keep.cupy")
        side = cupy.cuda.Stream(non_blocking=True)
        with side:
            a = buf.as_cupy()
            assert a.data.ptr == buf.data_ptr and a.dtype == cupy.float32
            assert a.shape == (MIB,) and a.flags.c_contiguous
            a[:] = 2.0
        buf.seal(side)
        opened = c.open("gpu.keep.cupy")
        with side:
            b = opened.as_cupy()  # a second array, on the reader's lease
            assert b.data.ptr == a.data.ptr
        opened.release()
        buf.release()
        del buf, opened
        gc.collect()
        assert [x.name for x in c.list()] == ["gpu.keep.cupy"], "the arrays hold the buffer"
        with side:
            a *= 2.0
            assert float(b.sum()) == 4.0 * MIB
        del a
        gc.collect()
        with side:  # the reader's lease keeps the memory mapped for the second array
            assert float(b.sum()) == 4.0 * MIB
        del b
        gc.collect()
        assert eventually(lambda: c.list() == [])
