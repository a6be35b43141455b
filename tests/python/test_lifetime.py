"""Arrays keep their memory: no use-after-free is reachable, and memory comes
back when the last view dies. Checked through the daemon's own status."""

import gc
import signal
import threading

import numpy as np
import pytest

import gpubroker
from conftest import eventually, used_bytes


@pytest.fixture(autouse=True)
def _daemon_made_buffers(monkeypatch):
    """These tests read the daemon's books of each buffer, which see a buffer
    of the daemon's from its allocation on: the clients here make none
    themselves (test_client_made.py covers the buffers a client makes)."""
    monkeypatch.setenv("GPUBROKER_SUBALLOCATE", "0")

PAGE = 4096


def buffers(client):
    return {b.name: b for b in client.list()}


def test_array_outlives_release_of_the_owners_buffer(client):
    buf = client.allocate(shape=(1024,), dtype="float32", name="life.a")
    a = buf.as_numpy()
    a[:] = 3.0
    buf.release()
    assert buf.is_released
    assert "life.a" in buffers(client), "the owner's release freed memory an array still uses"
    assert used_bytes(client) == PAGE
    a[:] += 1.0  # still mapped and writable
    assert float(a.sum()) == 4.0 * 1024
    del a
    gc.collect()
    assert eventually(lambda: "life.a" not in buffers(client) and used_bytes(client) == 0)


def test_torch_tensor_shares_the_memory_and_outlives_release(client):
    torch = pytest.importorskip("torch")
    buf = client.allocate(shape=(4, 8), dtype="float32", name="life.torch")
    t = buf.as_torch()
    assert t.shape == (4, 8) and t.dtype == torch.float32 and t.device.type == "cpu"
    assert t.data_ptr() == buf.data_ptr
    t.fill_(2.0)
    assert float(buf.as_numpy().sum()) == 64.0, "torch and NumPy see the same bytes"
    buf.release()
    assert "life.torch" in buffers(client), "the owner's release freed memory a tensor uses"
    t += 1.0  # still mapped and writable
    assert float(t.sum()) == 96.0
    del t
    gc.collect()
    assert eventually(lambda: "life.torch" not in buffers(client) and used_bytes(client) == 0)


def test_array_outlives_the_dropped_buffer_object(client):
    a = client.allocate(shape=(16,), dtype="int64", name="life.drop").as_numpy()
    gc.collect()  # the Buffer object is gone
    assert "life.drop" in buffers(client)
    a[:] = 5
    view = a[4:8]
    del a
    gc.collect()
    assert "life.drop" in buffers(client), "a slice of the array still uses the memory"
    assert view.tolist() == [5, 5, 5, 5]
    del view
    gc.collect()
    assert eventually(lambda: used_bytes(client) == 0)


def test_released_buffer_refuses_new_views_with_a_clear_error(client):
    buf = client.allocate(64, name="life.rel")
    buf.release()
    for export in (buf.as_numpy, buf.__dlpack__, lambda: buf.__array_interface__,
                   buf.seal, buf.wait_ready, buf.info):  # fmt: skip
        with pytest.raises(gpubroker.Released, match="released"):
            export()
    buf.release()  # idempotent
    assert eventually(lambda: used_bytes(client) == 0)


def test_release_on_a_stream_gives_host_memory_back_at_once(client):
    buf = client.allocate(shape=(256,), dtype="float32", name="life.stream")
    buf.release(stream=0)  # the host has no stream work to wait for
    assert buf.is_released
    assert "life.stream" not in buffers(client)
    assert client.stats()["books"]["pending_releases"] == 0
    assert used_bytes(client) == 0
    buf.release(stream=0)  # idempotent
    # Under a live array the array's end releases, as without a stream.
    buf = client.allocate(shape=(8,), dtype="uint8", name="life.stream.view")
    a = buf.as_numpy()
    buf.release(stream=0)
    assert "life.stream.view" in buffers(client)
    del a
    gc.collect()
    assert eventually(lambda: used_bytes(client) == 0)


def test_interface_consumer_keeps_the_buffer_after_release(client):
    buf = client.allocate(shape=(8,), dtype="uint8", name="life.iface")
    a = np.asarray(buf)  # numpy keeps `buf` as the array's base
    buf.release()
    assert "life.iface" in buffers(client)
    a[:] = 7
    del buf
    gc.collect()
    assert "life.iface" in buffers(client)
    assert a.tolist() == [7] * 8
    del a
    gc.collect()
    assert eventually(lambda: used_bytes(client) == 0)


def test_dlpack_capsule_holds_the_buffer_until_consumed_array_or_capsule_dies(client):
    buf = client.allocate(shape=(4,), dtype="float64", name="life.dl")
    capsule = buf.__dlpack__()  # never consumed: its destructor must free
    arr = np.from_dlpack(buf)  # consumed: numpy's array owns the export
    buf.release()
    del buf
    gc.collect()
    assert "life.dl" in buffers(client)
    del capsule
    gc.collect()
    assert "life.dl" in buffers(client), "the array still holds an export"
    assert arr.tolist() == [0.0] * 4 or arr.size == 4
    del arr
    gc.collect()
    assert eventually(lambda: used_bytes(client) == 0)


def test_versioned_and_legacy_dlpack_capsules(client):
    buf = client.allocate(shape=(2, 2), dtype="float32", name="life.ver")
    assert type(buf.__dlpack__(max_version=(1, 0))).__name__ == "PyCapsule"
    for cap in (buf.__dlpack__(), buf.__dlpack__(max_version=(1, 1)), buf.__dlpack__(stream=None)):
        del cap
    with pytest.raises(BufferError):
        buf.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        buf.__dlpack__(dl_device=(2, 0))
    assert buf.__dlpack__(dl_device=(1, 0)) is not None
    buf.release()
    gc.collect()
    assert eventually(lambda: used_bytes(client) == 0)


def test_readers_lease_keeps_freed_memory_until_its_array_dies(daemon, client, children):
    buf = client.allocate(shape=(1000,), dtype="uint8", name="life.reader")
    buf.as_numpy()[:] = 9
    buf.seal()
    reader = children("""
        import gc
        b = gpubroker.connect().open("life.reader")
        a = b.as_numpy()
        b.release()
        say("holding")
        hear()
        say("sum", int(a.sum()))
        del a
        gc.collect()
        say("dropped")
        hear()
    """, daemon.dir)
    assert reader.expect() == "holding"
    buf.release()  # the owner frees; the memory stays leased by the reader
    info = buffers(client)["life.reader"]
    assert (info.state, info.leases) == ("freed", 1)
    assert used_bytes(client) == PAGE
    with pytest.raises(gpubroker.NotFound):
        client.open("life.reader")
    reader.send("go")
    assert reader.expect() == "sum 9000"
    assert reader.expect() == "dropped"
    assert eventually(lambda: used_bytes(client) == 0 and buffers(client) == {})
    reader.finish()


def test_client_closed_with_live_arrays_keeps_the_session_until_they_go(daemon):
    watcher = gpubroker.connect(daemon.dir)
    c = gpubroker.connect(daemon.dir)
    a = c.allocate(shape=(10,), dtype="int32", name="life.closed").as_numpy()
    c.close()
    with pytest.raises(gpubroker.Closed):
        c.list()
    assert watcher.status().sessions == 2
    a[:] = 1
    del a
    gc.collect()
    assert eventually(lambda: watcher.status().sessions == 1 and used_bytes(watcher) == 0)
    watcher.close()


def test_sigkilled_python_producer_is_reclaimed(daemon, client, children):
    producer = children("""
        c = gpubroker.connect()
        bufs = [c.allocate(1 << 20, name=f"kill.{i}") for i in range(3)]
        keep = c.allocate(4096, name="kill.kept", keep=True)
        say("ready")
        hear()
    """, daemon.dir)
    assert producer.expect() == "ready"
    assert used_bytes(client) == 3 * (1 << 20) + PAGE
    before = daemon.metric('gpubroker_reclaimed_bytes_total{cause="died"}')
    producer.proc.send_signal(signal.SIGKILL)
    producer.proc.wait()
    assert eventually(lambda: set(buffers(client)) == {"kill.kept"})
    assert used_bytes(client) == PAGE
    assert daemon.metric('gpubroker_reclaimed_bytes_total{cause="died"}') - before == 3 * (1 << 20)
    client.free("kill.kept")


def test_threads_share_a_client(client):
    errors = []

    def work(k):
        try:
            for i in range(30):
                b = client.allocate(shape=(64,), dtype="int32", name=f"thr.{k}.{i}")
                b.as_numpy()[:] = k
                b.seal()
                r = client.open(f"thr.{k}.{i}")
                assert int(r.as_numpy().sum()) == 64 * k
                r.release()
                b.release()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    gc.collect()
    assert eventually(lambda: used_bytes(client) == 0)


def test_buffer_release_racing_exports_from_threads_is_safe(client):
    for _ in range(20):
        buf = client.allocate(shape=(256,), dtype="uint8")
        got = []

        def export():
            for _ in range(50):
                try:
                    got.append(buf.as_numpy())
                except gpubroker.Released:
                    return

        t = threading.Thread(target=export)
        t.start()
        buf.release()
        t.join()
        for x in got:
            x[:] = 1  # every array made is still valid
        got.clear()
        x = None
        gc.collect()
    assert eventually(lambda: used_bytes(client) == 0)
