"""Buffers across real processes: Python and Python, C++ and Python, descriptors."""

import json
import subprocess
import sys

import numpy as np
import pytest

import gpubroker
from conftest import eventually, pattern, used_bytes


def test_two_python_processes_share_a_numpy_array_and_see_each_others_writes(daemon, children):
    producer = children("""
        import numpy as np
        c = gpubroker.connect()
        buf = c.allocate(shape=(256, 1024), dtype="float32", name="py.shared")
        a = buf.as_numpy()
        a[:] = np.arange(a.size, dtype=np.float32).reshape(a.shape)
        buf.seal()
        say("sealed", buf.data_ptr)
        assert hear() == "written"
        say("seen", float(a[0, 0]), float(a[255, 1023]))
        hear()
    """, daemon.dir)
    assert producer.expect().startswith("sealed")
    consumer = children("""
        import numpy as np
        c = gpubroker.connect()
        buf = c.open("py.shared", wait=True, timeout=10)
        a = buf.as_numpy()
        ok = bool((a == np.arange(a.size, dtype=np.float32).reshape(a.shape)).all())
        a[0, 0] = -1.0
        a[255, 1023] = -2.0
        say("checked", ok, buf.shape, buf.dtype)
        hear()
    """, daemon.dir)
    assert consumer.expect() == "checked True (256, 1024) float32"
    producer.send("written")
    assert producer.expect() == "seen -1.0 -2.0", "the consumer's write-back is not seen"
    producer.finish()
    consumer.finish()


def test_cpp_producer_to_python_consumer(daemon, helpers, client):
    cpp = helpers(daemon.dir)
    cpp.ok("alloc x 65536 name=cpp.made tensor=uint16:128x256")
    cpp.ok("fill x 42")
    cpp.ok("seal x")
    buf = client.open("cpp.made")
    assert (buf.dtype, buf.shape, buf.strides) == ("uint16", (128, 256), (256, 1))
    a = buf.as_numpy()
    assert a.tobytes() == pattern(65536, 42)
    a.reshape(-1).view(np.uint8)[17] = 201  # write back into the C++ process's memory
    assert cpp.send("peek x 17") == "ok 201"


def test_python_producer_to_cpp_consumer(daemon, helpers, client):
    buf = client.allocate(100000, name="py.made")
    buf.as_numpy()[:] = np.frombuffer(pattern(100000, 7), dtype=np.uint8)
    buf.seal()
    cpp = helpers(daemon.dir)
    assert cpp.send("open y py.made").startswith(f"ok {buf.id} 100000")
    assert cpp.send("check y 7") == "ok"
    cpp.ok("poke y 99999 3")
    assert buf.as_numpy()[99999] == 3


@pytest.mark.parametrize(
    "dtype, shape, strides, byte_offset",
    [
        ("float16", (3, 5), None, 0),
        ("bfloat16", (4, 2, 3), None, 0),
        ("float32", (6, 4), (1, 6), 0),  # a transposed (column-major) view
        ("int64", (5,), None, 64),
        ("complex64", (2, 3), (3, 1), 24),
        ("bool", (7,), None, 1),
    ],
)
def test_descriptor_round_trips_to_another_process(daemon, client, children, dtype, shape,
                                                   strides, byte_offset):  # fmt: skip
    buf = client.allocate(shape=shape, dtype=dtype, strides=strides, byte_offset=byte_offset,
                          name="py.desc")  # fmt: skip
    buf.seal()
    reader = children("""
        import json
        b = gpubroker.connect().open("py.desc")
        say(json.dumps([b.dtype, b.shape, b.strides, b.byte_offset, b.nbytes]))
    """, daemon.dir)
    expected_strides = strides or tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    got = json.loads(reader.expect())
    assert got == [dtype, list(shape), list(expected_strides), byte_offset, buf.nbytes]
    reader.finish()


def test_share_copies_numpy_arrays_keeping_layout_and_dtype(daemon, client, children):
    a = np.arange(24, dtype=np.float16).reshape(4, 6)
    t = client.share(a.T, name="py.t")  # dense but transposed: stays transposed
    assert t.is_sealed and t.shape == (6, 4) and t.strides == (1, 6)
    s = client.share(a[:, ::2], name="py.s")  # not dense: made C-contiguous
    assert s.shape == (4, 3) and s.strides == (3, 1)
    reader = children("""
        import numpy as np
        c = gpubroker.connect()
        t, s = c.open("py.t").as_numpy(), c.open("py.s").as_numpy()
        a = np.arange(24, dtype=np.float16).reshape(4, 6)
        say((t == a.T).all(), t.strides == a.T.strides, (s == a[:, ::2]).all())
    """, daemon.dir)
    assert reader.expect() == "True True True"
    reader.finish()


def test_bfloat16_reads_as_raw_bytes_or_through_ml_dtypes(client):
    buf = client.allocate(shape=(4,), dtype="bfloat16", name="py.bf16")
    raw = np.asarray(buf)  # __array_interface__: two raw bytes per element
    assert raw.dtype == np.dtype("V2") and raw.shape == (4,)
    raw.view(np.uint16)[:] = [0x3F80, 0x4000, 0xBF80, 0]  # 1, 2, -1, 0 in bfloat16
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        with pytest.raises(TypeError, match="ml_dtypes"):
            buf.as_numpy()
    else:
        assert buf.as_numpy().astype(np.float32).tolist() == [1.0, 2.0, -1.0, 0.0]


def test_dtypes_are_taken_in_every_spelling():
    from gpubroker import _dtypes

    assert _dtypes.resolve("float32").code == 12
    assert _dtypes.resolve("f4").name == "float32"
    assert _dtypes.resolve("<f2").name == "float16"
    assert _dtypes.resolve(np.float16).name == "float16"
    assert _dtypes.resolve(np.dtype("int8")).name == "int8"
    assert _dtypes.resolve(np.bool_).name == "bool"
    assert _dtypes.resolve("bfloat16").itemsize == 2
    assert _dtypes.resolve(np.zeros(1, np.complex128)).name == "complex128"
    with pytest.raises(TypeError, match="big-endian"):
        _dtypes.resolve(">f4")
    with pytest.raises(TypeError):
        _dtypes.resolve("float128")
    with pytest.raises(TypeError):
        _dtypes.resolve(object())


def test_numpy_from_dlpack_and_array_interface_see_the_same_memory(client):
    buf = client.allocate(shape=(8,), dtype="int32", name="py.dl")
    w = np.asarray(buf)  # writable through __array_interface__
    w[:] = np.arange(8)
    r = np.from_dlpack(buf)
    assert r.tolist() == list(range(8))
    assert r.__array_interface__["data"][0] == buf.data_ptr == w.__array_interface__["data"][0]
    assert buf.__dlpack_device__() == (1, 0)
    with pytest.raises(AttributeError):
        buf.__cuda_array_interface__


def test_open_with_wait_wakes_when_the_producer_seals(daemon, client, children):
    waiter = children("""
        b = gpubroker.connect().open("py.late", wait=True, timeout=20)
        say("opened", int(b.as_numpy()[0]))
    """, daemon.dir)
    buf = client.allocate(shape=(4,), dtype="uint8", name="py.late")
    buf.as_numpy()[0] = 99
    assert waiter.expect(timeout=0.3) == "", "open returned before the seal"
    buf.seal()
    assert waiter.expect() == "opened 99"
    waiter.finish()


def test_open_with_wait_can_wait_awake(make_daemon, children):
    """`awake`: the consumer and the daemon's session thread poll while the
    Open is parked, the daemon for no longer than its cap (0.2 s here);
    the wait goes on asleep after it, and what is answered is the same."""
    daemon = make_daemon("--max-wait-awake-us", "200000")
    waiter = children("""
        b = gpubroker.connect().open("py.awake", wait=True, timeout=20, awake=5)
        say("opened", int(b.as_numpy()[0]))
    """, daemon.dir)
    assert eventually(lambda: daemon.metric("gpubroker_session_awake_waits_total") == 1)
    # Counted every 0.1 s of polling, and at the cap.
    assert eventually(lambda: daemon.metric("gpubroker_session_awake_seconds_total") > 0)
    with gpubroker.connect(daemon.dir) as client:
        buf = client.allocate(shape=(4,), dtype="uint8", name="py.awake")
        buf.as_numpy()[0] = 7
        buf.seal()
        assert waiter.expect() == "opened 7"
        waiter.finish()


def test_awake_needs_a_wait_and_a_non_negative_time(client):
    buf = client.allocate(4096, name="py.awake.bad")
    buf.seal()
    with pytest.raises(gpubroker.InvalidArgument, match="awake"):
        client.open("py.awake.bad", awake=0.001)
    with pytest.raises(gpubroker.InvalidArgument, match="awake"):
        client.open("py.awake.bad", wait=True, awake=-1)
    assert client.open("py.awake.bad", wait=True, awake=0.001).nbytes == buf.nbytes == 4096


def test_open_by_id_and_list_and_free(client):
    buf = client.allocate(4096, name="py.byid", keep=True)
    same = client.open(buf.id, allow_unsealed=True)
    assert same.name == "py.byid" and not same.is_owner and buf.is_owner
    [info] = client.list()
    assert (info.id, info.name, info.keep, info.leases, info.state) == (
        buf.id, "py.byid", True, 2, "allocated")  # fmt: skip
    same.release()
    buf.release()
    assert client.list()[0].owner_session == client.session_id  # kept: still there
    client.free("py.byid")
    assert eventually(lambda: client.list() == [] and used_bytes(client) == 0)


def test_command_line_ls_status_cat(daemon, client):
    buf = client.share(np.arange(6, dtype=np.float32).reshape(2, 3), name="py.cli")

    def run(*args):
        out = subprocess.run([sys.executable, "-m", "gpubroker", "--socket-dir", daemon.dir, *args],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert "py.cli" in run("ls") and "float32[2, 3]" in run("ls")
    assert "backend host" in run("status")
    text = run("cat", "py.cli")
    assert "float32[2, 3]" in text and "[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]" in text
    j = json.loads(run("--json", "cat", str(buf.id), "-n", "2"))
    assert j["values"] == [0.0, 1.0] and j["shape"] == [2, 3]
    missing = subprocess.run([sys.executable, "-m", "gpubroker", "--socket-dir", daemon.dir, "cat",
                              "py.none"], capture_output=True, text=True)  # fmt: skip
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr


def test_connect_names_the_client_and_takes_its_spin(daemon):
    with gpubroker.connect(daemon.dir, client_name="ingest-7", spin_us=0) as c:
        b = c.allocate(64, name="spin.zero")
        b.seal()
        assert c.open("spin.zero").nbytes == 64  # answered with no wait awake
    with gpubroker.connect(daemon.dir):
        pass
    log = daemon.log()
    assert "client 'ingest-7'" in log
    assert "client 'python" in log, "the default name says it is Python"
    for bad in (-1, 1.5, True):
        with pytest.raises(gpubroker.InvalidArgument):
            gpubroker.connect(daemon.dir, spin_us=bad)
