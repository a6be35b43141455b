"""Buffers the client makes itself, in ranges it leases (docs/fast-path.md):
private until published, published (and sealed) in one call, their bytes
charged as the client's ranges, all of it given back by trim."""

import numpy as np
import pytest

import gpubroker
from conftest import eventually, used_bytes


def names(client):
    return {b.name for b in client.list()}


def books(client):
    return client.stats()["books"]


def test_a_buffer_made_here_is_private_until_published(client):
    buf = client.allocate(shape=(256,), dtype="float32", name="made.here")
    assert not buf.is_published
    assert client.stats()["allocations"]["client_made"] == 1
    assert "made.here" not in names(client)
    buf.as_numpy()[:] = 2.0
    buf.seal()  # publishes and seals in one call
    assert buf.is_published and buf.is_sealed
    info = {b.name: b for b in client.list()}["made.here"]
    assert info.client_made and info.state == "sealed" and info.id == buf.id
    other = gpubroker.connect(client.status().socket_dir)
    seen = other.open("made.here")
    assert float(seen.as_numpy().sum()) == 512.0
    seen.release()
    other.close()


def test_the_id_publishes_and_another_process_may_open_it_unsealed(client):
    buf = client.allocate(64, name="made.id")
    assert not buf.is_published
    ident = buf.id  # publishes
    assert ident != 0 and buf.is_published
    assert client.open(ident, allow_unsealed=True).nbytes == 64


def test_an_id_asked_while_the_name_is_taken_raises_and_is_not_kept(client):
    """The C ABI answers 0 for an id whose publication failed; the package
    raises the refusal instead, and keeps no 0: the seal publishes the
    buffer once its name is free, and its id is then the daemon's."""
    first = client.allocate(64, name="made.taken")
    first.seal()
    second = client.allocate(64, name="made.taken")
    with pytest.raises(gpubroker.AlreadyExists):
        second.id
    with pytest.raises(gpubroker.AlreadyExists):
        second.info()
    assert not second.is_published
    first.release()  # the owner's release of an unkept buffer frees its name
    second.seal()
    assert second.id != 0 and client.open("made.taken").id == second.id


def test_the_daemon_charges_the_clients_ranges_and_trim_gives_them_back(client):
    bufs = [client.allocate(4096 * (i + 1)) for i in range(8)]
    b = books(client)
    assert b["in_use_blocks"] == 8
    assert b["range_bytes"] >= sum(x.nbytes for x in bufs)
    assert used_bytes(client) == b["range_bytes"], "the daemon's books are the client's ranges"
    t = client.status().tenant_status()
    assert t.range_bytes == b["range_bytes"] and t.ranges == b["ranges"]
    for x in bufs:
        x.release()
    assert books(client)["in_use_bytes"] == 0
    client.trim()
    assert books(client)["range_bytes"] == 0
    assert eventually(lambda: used_bytes(client) == 0)


def test_a_published_block_waits_for_its_readers_before_it_is_reused(client):
    buf = client.allocate(shape=(1024,), dtype="uint8", name="made.held")
    buf.as_numpy()[:] = 7
    buf.seal()
    other = gpubroker.connect(client.status().socket_dir)
    reader = other.open("made.held")
    buf.release()  # the owner lets go; the reader's lease keeps the block
    assert books(client)["quarantined_bytes"] == 1024
    again = client.allocate(shape=(1024,), dtype="uint8")
    again.as_numpy()[:] = 1  # a block of its own, not the reader's
    assert np.all(reader.as_numpy() == 7)
    reader.release()
    other.close()
    again.release()
    client.trim()  # hears that the block came back, then gives everything back
    assert books(client)["quarantined_bytes"] == 0
    assert eventually(lambda: used_bytes(client) == 0)


def test_a_posted_seal_is_found_by_an_open_that_comes_after_it(client):
    other = gpubroker.connect(client.status().socket_dir)
    for i in range(50):
        buf = client.allocate(shape=(64,), dtype="int32", name=f"posted.{i}")
        buf.as_numpy()[:] = i
        buf.seal(posted=True)  # returns without the daemon's answer
        seen = other.open(f"posted.{i}")  # not waiting: the daemon serves the post first
        assert seen.is_sealed and int(seen.as_numpy()[63]) == i
        seen.release()
        assert buf.is_published and buf.id != 0  # the answer, taken in
        buf.release()
    other.close()


def leases(client, name):
    return {b.name: b for b in client.list()}[name].leases


def test_posted_opens_take_their_answers_at_first_use(client):
    other = gpubroker.connect(client.status().socket_dir)
    made = []
    for i in range(40):  # beyond the 32 answers a client leaves unread
        buf = client.allocate(shape=(8, 4), dtype="float16", name=f"posted.open.{i}")
        buf.as_numpy()[:] = i
        buf.seal(posted=True)
        made.append(buf)
    opened = [other.open(f"posted.open.{i}", posted=True) for i in range(40)]
    for i in reversed(range(40)):
        seen = opened[i]
        assert seen.shape == (8, 4) and seen.dtype == "float16"  # from the answer
        assert seen.is_sealed and float(seen.as_numpy()[7, 3]) == i
    assert leases(client, "posted.open.0") == 2  # every open was granted
    assert opened[5].id == made[5].id
    for seen in opened:
        seen.release()
    assert leases(client, "posted.open.0") == 1
    by_id = other.open(made[3].id, posted=True)
    assert by_id.name == "posted.open.3"
    by_id.release()
    for buf in made:
        buf.release()
    other.close()


def test_a_posted_open_raises_its_refusal_at_first_use(client):
    absent = client.open("posted.open.absent", posted=True)  # no error yet
    with pytest.raises(gpubroker.NotFound):
        absent.nbytes
    with pytest.raises(gpubroker.NotFound):
        absent.as_numpy()  # the same refusal, again
    assert "refused" in repr(absent)
    absent.release()  # holds nothing: nothing to give back
    with pytest.raises(gpubroker.InvalidArgument):
        client.open("posted.open.absent", posted=True, wait=True)
    dropped = client.open("posted.open.absent", posted=True)
    del dropped  # never used: its refusal goes with it, the session goes on
    buf = client.allocate(16, name="posted.open.later")
    buf.seal()
    late = client.open("posted.open.later", posted=True)
    assert late.nbytes == 16
    late.release()
    buf.release()


def test_a_consumer_that_asked_first_waits_for_the_seal(client):
    import threading

    other = gpubroker.connect(client.status().socket_dir)
    buf = client.allocate(shape=(16,), dtype="int32", name="ask.first")
    buf.publish()  # the name is bound: a consumer asking first is answered
    early = other.open("ask.first", wait=True, allow_unsealed=True)
    assert not early.is_sealed
    with pytest.raises(gpubroker.Timeout):
        early.wait_sealed(timeout=0.05)
    done = []
    waiter = threading.Thread(target=lambda: done.append(early.wait_sealed(timeout=20)))
    waiter.start()
    buf.as_numpy()[:] = 7
    buf.seal()
    waiter.join(30)
    assert done and early.is_sealed
    assert int(early.as_numpy()[15]) == 7
    with pytest.raises(gpubroker.FailedPrecondition):
        client.allocate(64).wait_sealed()
    early.release()
    buf.release()
    other.close()


def test_a_consumer_that_asked_first_can_wait_for_the_seal_awake(daemon, client):
    import threading

    other = gpubroker.connect(client.status().socket_dir)
    buf = client.allocate(shape=(16,), dtype="int32", name="ask.first.awake")
    buf.publish()
    early = other.open("ask.first.awake", wait=True, allow_unsealed=True)
    with pytest.raises(gpubroker.InvalidArgument, match="awake"):
        early.wait_sealed(timeout=20, awake=-1)
    done = []
    waiter = threading.Thread(target=lambda: done.append(early.wait_sealed(timeout=20,
                                                                           awake=0.005)))
    waiter.start()
    assert eventually(lambda: daemon.metric("gpubroker_session_awake_waits_total") == 1)
    buf.as_numpy()[:] = 3
    buf.seal()
    waiter.join(30)
    assert done and early.is_sealed
    assert int(early.as_numpy()[15]) == 3
    early.release()
    buf.release()
    other.close()


def test_a_wait_can_keep_only_the_daemon_awake(daemon, client):
    import threading

    other = gpubroker.connect(client.status().socket_dir)
    with pytest.raises(gpubroker.InvalidArgument, match="daemon_awake"):
        other.open("daemon.awake", wait=True, daemon_awake=-1)
    with pytest.raises(gpubroker.InvalidArgument, match="wait"):
        other.open("daemon.awake", daemon_awake=0.001)
    got = []
    waiter = threading.Thread(
        target=lambda: got.append(other.open("daemon.awake", wait=True, timeout=20,
                                             daemon_awake=1.0)))  # fmt: skip
    waiter.start()
    assert eventually(lambda: daemon.metric("gpubroker_session_awake_waits_total") == 1)
    buf = client.allocate(shape=(16,), dtype="int32", name="daemon.awake")
    buf.as_numpy()[:] = 5
    buf.seal()
    waiter.join(30)
    assert got and got[0].is_sealed
    assert int(got[0].as_numpy()[15]) == 5
    got[0].release()
    buf.release()
    other.close()


def test_a_posted_seal_that_the_daemon_refuses_is_raised_at_the_next_call(client):
    first = client.allocate(64, name="posted.taken")
    first.seal()
    second = client.allocate(64, name="posted.taken")
    second.seal(posted=True)  # the name is taken: the refusal comes later
    with pytest.raises(gpubroker.AlreadyExists):
        second.release()
    assert second.is_released
    assert client.open("posted.taken").id == first.id
