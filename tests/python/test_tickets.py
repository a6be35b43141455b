"""Tickets: a Buffer pickled into another process (multiprocessing's Pipes
and Queues, pickle itself) arrives as a Buffer of that process's own on the
same memory, kept by the daemon in between, even if the sender is gone."""

import gc
import multiprocessing as mp
import os
import pickle
import signal
import time
import weakref
from datetime import timedelta

import numpy as np
import pytest

import gpubroker
from gpubroker import _tickets
from conftest import eventually, used_bytes

pytestmark = pytest.mark.skipif(not gpubroker._lib.load().has_tickets,
                                reason="this libgpubroker has no tickets")  # fmt: skip

NOT_FOUND = "no such ticket"


def buffers(client):
    return {b.id: b for b in client.list()}


def ticket_events(daemon, event):
    return daemon.metric(f'gpubroker_tickets_total{{event="{event}"}}')


def sealed(client, shape=(64, 32), dtype="float32", **kw):
    buf = client.allocate(shape=shape, dtype=dtype, **kw)
    a = buf.as_numpy()
    a[...] = np.arange(a.size, dtype=a.dtype).reshape(a.shape)
    buf.seal()
    return buf


# A consumer in a process of its own (spawn: nothing inherited but what the
# Pipe brings). It has no client and no socket directory: the ticket says
# which daemon to claim from.
def _consumer(conn, queue):
    try:
        buf = conn.recv()
        a = buf.as_numpy()
        same = bool((a == np.arange(a.size, dtype=a.dtype).reshape(a.shape)).all())
        a[0, 0], a[-1, -1] = -1.0, -2.0  # seen by the producer
        conn.send(("got", isinstance(buf, gpubroker.Buffer), buf.shape, buf.dtype, buf.strides,
                   same))  # fmt: skip
        assert conn.recv() == "written"
        conn.send(("seen", float(a[1, 1]), float(a[2, 2])))  # the producer's later writes
        queue.put(buf)  # forwarded: pickled again, from a claimed Buffer, over a Queue
        assert conn.recv() == "bye"
        del a
        buf.release()
        conn.send(("released",))
    except BaseException as e:  # noqa: BLE001 - reported to the test
        conn.send(("error", repr(e)))


def test_a_pickled_buffer_crosses_a_pipe_and_both_processes_see_each_others_writes(daemon,
                                                                                   client):
    ctx = mp.get_context("spawn")
    conn, child_end = ctx.Pipe()
    queue = ctx.Queue()
    proc = ctx.Process(target=_consumer, args=(child_end, queue), daemon=True)
    proc.start()
    try:
        buf = sealed(client)  # unnamed: a ticket needs no name
        a = buf.as_numpy()
        conn.send(buf)  # pickled: a ticket
        assert conn.poll(60), "the consumer said nothing"
        assert conn.recv() == ("got", True, (64, 32), "float32", (32, 1), True)
        assert (a[0, 0], a[-1, -1]) == (-1.0, -2.0), "the consumer's writes are not seen"
        a[1, 1], a[2, 2] = 7.0, 8.0
        conn.send("written")
        assert conn.recv() == ("seen", 7.0, 8.0)
        back = queue.get(timeout=60)  # the consumer's Buffer, forwarded back
        assert isinstance(back, gpubroker.Buffer) and back._client is client
        assert back.as_numpy()[-1, -1] == -2.0 and back.id == buf.id
        info = buffers(client)[buf.id]
        assert info.leases == 3  # this handle, the consumer's, the forwarded one's
        conn.send("bye")
        assert conn.recv() == ("released",)
        proc.join(30)
        assert proc.exitcode == 0
        back.release()
        buf.release()
        del a
        gc.collect()
        assert eventually(lambda: buffers(client) == {})
    finally:
        if proc.is_alive():
            proc.kill()


def test_a_ticket_outlives_the_producers_release_and_its_session(daemon, client):
    producer = gpubroker.connect(daemon.dir)
    buf = sealed(producer, name="t.outlives")
    raw = pickle.dumps(buf)
    ident = buf.id
    buf.release()  # an unkept buffer of its owner: freed, but the ticket keeps it
    producer.close()
    gc.collect()
    assert eventually(lambda: client.status().sessions == 1)
    info = buffers(client)[ident]
    assert (info.state, info.leases) == ("freed", 1), info
    with pytest.raises(gpubroker.NotFound):
        client.open("t.outlives")  # the name is gone; the ticket still claims it
    got = pickle.loads(raw)
    assert got._client is client, "this process's Client of that daemon is reused"
    a = got.as_numpy()
    assert float(a[63, 31]) == 64 * 32 - 1
    assert got.is_sealed, "a freed buffer reads as sealed to its claimer"
    got.release()
    del a
    gc.collect()
    assert eventually(lambda: buffers(client) == {})


def test_a_sigkilled_producers_ticket_is_still_claimed_and_read(daemon, client, children):
    producer = children("""
        import pickle, signal
        import numpy as np
        c = gpubroker.connect()
        buf = c.allocate(shape=(1000,), dtype="int64")
        buf.as_numpy()[:] = np.arange(1000) * 3
        buf.seal(posted=True)
        say(pickle.dumps(buf).hex())
        os.kill(os.getpid(), signal.SIGKILL)   # at once: the hold was posted before the ticket left
    """, daemon.dir)
    raw = bytes.fromhex(producer.expect())
    producer.proc.wait(30)
    assert producer.proc.returncode == -signal.SIGKILL
    assert eventually(lambda: client.status().sessions == 1), "the producer's session lingers"
    buf = pickle.loads(raw)
    assert buf.as_numpy().tolist() == [i * 3 for i in range(1000)]
    assert (buf.dtype, buf.shape) == ("int64", (1000,))
    buf.release()
    gc.collect()
    assert eventually(lambda: buffers(client) == {})


def test_a_ticket_is_claimed_once_posted_or_not(daemon, client):
    buf = sealed(client)
    ticket = buf.ticket()
    assert isinstance(ticket, bytes)
    first = client.claim(ticket)
    assert first.shape == (64, 32) and not first.is_owner
    with pytest.raises(gpubroker.NotFound, match=NOT_FOUND):
        client.claim(ticket)
    # Posted: the refusal is raised at the first use, and at every use after
    # it; the Buffer holds nothing and stays usable as an object.
    late = client.claim(ticket, posted=True)
    for use in (lambda: late.shape, late.as_numpy, late.__dlpack__, lambda: late.device_id,
                lambda: late.__array_interface__, late.info, lambda: late.is_sealed,
                late.wait_ready, lambda: late.data_ptr, late.ticket, lambda: pickle.dumps(late),
                lambda: np.from_dlpack(late)):  # fmt: skip
        with pytest.raises(gpubroker.NotFound, match=NOT_FOUND):
            use()
    assert late.is_released
    assert "holding nothing" in repr(late) and "NOT_FOUND" in repr(late)
    late.release()  # the refusal was raised already: nothing more to say
    # A posted claim first used by its release raises there.
    with pytest.raises(gpubroker.NotFound, match=NOT_FOUND):
        client.claim(ticket, posted=True).release()
    # Pickled bytes are a ticket too: the second Buffer unpickled from them holds nothing.
    raw = pickle.dumps(buf)
    once, twice = pickle.loads(raw), pickle.loads(raw)
    assert once.as_numpy()[0, 1] == 1.0
    with pytest.raises(gpubroker.NotFound, match=NOT_FOUND):
        twice.as_numpy()
    assert ticket_events(daemon, "claimed") == 2 and ticket_events(daemon, "held") == 2
    del twice
    gc.collect()
    assert buffers(client)[buf.id].leases == 3  # buf, first, once: no lease for the refused
    for b in (first, once, late, buf):
        b.release()
    assert eventually(lambda: buffers(client) == {})


def test_an_expired_ticket_is_not_found_and_its_buffer_goes(daemon, client):
    buf = sealed(client, shape=(16,), dtype="uint8")
    short = buf.ticket(ttl=0.2)
    posted = buf.ticket(ttl=timedelta(milliseconds=200))
    raw = pickle.dumps(buf)  # the default ttl: 60 s
    buf.release()
    time.sleep(0.5)
    with pytest.raises(gpubroker.NotFound, match=NOT_FOUND):
        client.claim(short)
    late = client.claim(posted, posted=True)
    with pytest.raises(gpubroker.NotFound, match=NOT_FOUND):
        late.nbytes
    # Counted when the timer reaps them, which under load may come after the
    # refused claims (refused all the same: past their expiry).
    assert eventually(lambda: ticket_events(daemon, "expired") == 2)
    # The pickled ticket's lease is the last one: its claim still reads the bytes.
    got = pickle.loads(raw)
    assert got.as_numpy().tolist() == list(range(16))
    got.release()
    assert eventually(lambda: buffers(client) == {})


def test_a_tickets_ttl_is_checked(client):
    buf = sealed(client, shape=(4,), dtype="uint8")
    for bad in (0, -1, 3601, timedelta(hours=2), float("nan")):
        with pytest.raises(gpubroker.InvalidArgument, match="ttl"):
            buf.ticket(ttl=bad)
    assert client.claim(buf.ticket(ttl=timedelta(hours=1))).nbytes == 4
    tiny = buf.ticket(ttl=0.0001)  # rounded up to 1 ms, not down to the default
    time.sleep(0.1)
    with pytest.raises(gpubroker.NotFound, match=NOT_FOUND):
        client.claim(tiny)


@pytest.mark.parametrize(
    "dtype, shape, strides, byte_offset",
    [
        ("float16", (3, 5), None, 0),
        ("float32", (6, 4), (1, 6), 0),  # a transposed (column-major) view
        ("int64", (5,), None, 64),
        ("complex64", (2, 3), (3, 1), 24),
        ("bool", (7,), None, 1),
    ],
)
def test_the_descriptor_survives_pickling(client, dtype, shape, strides, byte_offset):
    buf = client.allocate(shape=shape, dtype=dtype, strides=strides, byte_offset=byte_offset)
    src = buf.as_numpy()
    src[...] = np.arange(src.size).reshape(src.shape).astype(src.dtype)
    buf.seal()
    got = pickle.loads(pickle.dumps(buf))
    assert (got.dtype, got.shape, got.strides, got.byte_offset, got.nbytes) == (
        buf.dtype, buf.shape, buf.strides, byte_offset, buf.nbytes)  # fmt: skip
    a = got.as_numpy()
    assert a.strides == src.strides and (a == src).all()
    unsized = client.allocate(100)  # no descriptor: bytes
    unsized.seal()
    raw = pickle.loads(pickle.dumps(unsized))
    assert (raw.dtype, raw.shape, raw.nbytes) == (None, None, 100)


def test_leases_go_back_to_zero_once_both_sides_release(daemon, client, monkeypatch):
    monkeypatch.setenv("GPUBROKER_SUBALLOCATE", "0")  # the daemon's books from the allocation on
    producer = gpubroker.connect(daemon.dir)
    buf = sealed(producer, name="t.books")
    assert buffers(client)[buf.id].leases == 1
    raw = pickle.dumps(buf)
    # The hold is posted on the producer's session; this client's List may be
    # served before it.
    assert eventually(lambda: buffers(client)[buf.id].leases == 2), "the ticket holds a lease"
    got = pickle.loads(raw)
    assert got._client is producer, "the latest Client of this process for that daemon"
    assert got.id == buf.id and buffers(client)[buf.id].leases == 2, "the claim takes it over"
    assert used_bytes(client) == 64 * 32 * 4 and client.status().buffers == 1
    buf.release()
    assert buffers(client)[got.id].leases == 1
    got.release()
    assert eventually(lambda: buffers(client) == {} and used_bytes(client) == 0)
    assert client.status().buffers == 0
    producer.close()


def test_client_made_buffers_go_back_once_both_sides_release(daemon, client):
    producer = gpubroker.connect(daemon.dir)
    buf = sealed(producer)
    got = pickle.loads(pickle.dumps(buf))
    assert got.id == buf.id  # the claim's answer, taken in
    assert buffers(client)[got.id].client_made and buffers(client)[got.id].leases == 2
    buf.release()
    got.as_numpy()[0, 0] = 5.0  # the producer's block stays the claimer's until it lets go
    got.release()
    assert eventually(lambda: buffers(client) == {})
    producer.trim()
    assert eventually(lambda: used_bytes(client) == 0)
    producer.close()


def test_bytes_that_are_no_ticket_are_invalid(client):
    for junk in (b"", b"not a ticket", bytes(range(256)), b"\n\x00"):
        with pytest.raises(gpubroker.InvalidArgument, match="not a gpubroker ticket"):
            client.claim(junk)
        with pytest.raises(gpubroker.InvalidArgument, match="not a gpubroker ticket"):
            client.claim(junk, posted=True)
        with pytest.raises(gpubroker.InvalidArgument):
            _tickets.claim_pickled(junk)  # what a tampered pickle runs
    # Well formed, but no ticket the daemon holds: a guess is not found.
    with pytest.raises(gpubroker.NotFound, match=NOT_FOUND):
        client.claim(b"\n\x10" + bytes(16))
    with pytest.raises(TypeError, match="bytes"):
        client.claim("a string")
    buf = sealed(client, shape=(4,), dtype="uint8")
    assert client.claim(bytearray(buf.ticket())).nbytes == 4  # any bytes-like


def test_a_released_buffer_refuses_to_be_pickled(client):
    buf = sealed(client, shape=(4,), dtype="uint8", name="t.gone")
    buf.release()
    with pytest.raises(gpubroker.Released, match="pickle"):
        pickle.dumps(buf)
    with pytest.raises(gpubroker.Released):
        buf.ticket()


def test_unpickling_connects_a_client_when_none_is_open_and_drops_it_with_its_buffers(daemon):
    producer = gpubroker.connect(daemon.dir)
    buf = sealed(producer)
    raws = [pickle.dumps(buf) for _ in range(2)]
    producer.close()  # a closed Client claims nothing (its session stays for `buf`)
    got = pickle.loads(raws[0])
    made = got._client
    assert made is not producer and made.session_id != producer.session_id
    again = pickle.loads(raws[1])
    assert again._client is made, "the Client made for the first is reused"
    assert float(again.as_numpy().sum()) == float(np.arange(64 * 32).sum())
    ref = weakref.ref(made)
    del made
    for b in (got, again, buf):
        b.release()
    del b, got, again, buf
    gc.collect()
    assert ref() is None, "the Client made for the buffers outlived them"
    with gpubroker.connect(daemon.dir) as c:
        assert eventually(lambda: c.status().sessions == 1)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")  # on purpose
def test_a_forked_child_claims_on_a_client_of_its_own(daemon, client):
    buf = sealed(client)
    raw = pickle.dumps(buf)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            got = pickle.loads(raw)
            ok = got._client is not client and got._client.session_id != client.session_id
            ok = ok and float(got.as_numpy()[2, 3]) == 2 * 32 + 3
            got.release()
            code = 0 if ok else 2
        except BaseException as e:  # noqa: BLE001 - reported through the exit code
            os.write(2, f"child: {e!r}\n".encode())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert pickle.loads(pickle.dumps(buf))._client is client, "the parent's registry is intact"
    assert client.status().sessions >= 1


def test_a_posted_claim_of_an_unsealed_buffer_is_refused_at_first_use(client):
    buf = client.allocate(shape=(8,), dtype="uint8", name="t.unsealed")
    ticket = buf.ticket()
    with pytest.raises(gpubroker.FailedPrecondition, match="not sealed"):
        client.claim(ticket)
    late = client.claim(ticket, posted=True)
    with pytest.raises(gpubroker.FailedPrecondition, match="not sealed"):
        late.as_numpy()
    buf.seal()
    assert client.claim(ticket).nbytes == 8, "a refused claim leaves the ticket for another"


def test_the_client_is_found_by_the_directory_it_reaches_however_spelled(daemon, tmp_path,
                                                                         monkeypatch):  # fmt: skip
    link = tmp_path / "via-a-link"
    link.symlink_to(daemon.dir)
    producer = gpubroker.connect(str(link) + "/")
    buf = sealed(producer)
    monkeypatch.setenv("GPUBROKER_SOCKET_DIR", daemon.dir)
    default = gpubroker.connect()  # no directory given: the environment's
    got = pickle.loads(pickle.dumps(buf))
    assert got._client is default, "the latest Client that reaches the ticket's daemon"
    default.close()
    again = pickle.loads(pickle.dumps(buf))
    assert again._client is producer, "a Client of another spelling of the same directory"
    for b in (got, again, buf):
        b.release()
    producer.close()


def test_a_ticket_names_its_daemon_by_an_absolute_directory(daemon, monkeypatch):
    monkeypatch.chdir(os.path.dirname(daemon.dir))
    with gpubroker.connect(os.path.basename(daemon.dir)) as relative:  # another cwd must find it
        ticket = sealed(relative).ticket()
        assert _tickets.socket_dir(ticket).decode() == daemon.dir
        assert relative.claim(ticket).shape == (64, 32)
