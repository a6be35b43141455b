"""fork(): the child cannot use its parent's Client or Buffers, fails clearly,
and leaves the parent's session alone; it may connect anew."""

import gc
import os

import pytest

import gpubroker
from conftest import eventually, used_bytes

# Python 3.12 warns at every fork() of a process with threads, and a
# connected client has them (gRPC's): these tests fork on purpose, to check
# what the package does about it.
pytestmark = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")


@pytest.fixture(autouse=True)
def _daemon_made_buffers(monkeypatch):
    """These tests read the daemon's books of each buffer, which see a buffer
    of the daemon's from its allocation on: the clients here make none
    themselves (test_client_made.py covers the buffers a client makes)."""
    monkeypatch.setenv("GPUBROKER_SUBALLOCATE", "0")


def _in_child(fn) -> int:
    """Runs fn in a forked child and returns its exit code (0: all checks held)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = fn()
        except BaseException as e:  # noqa: BLE001 - reported through the exit code
            os.write(2, f"child: {e!r}\n".encode())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), f"the child died of signal {os.WTERMSIG(status)}"
    return os.WEXITSTATUS(status)


def test_forked_child_fails_clearly_and_leaves_the_parents_session_alone(daemon, client):
    buf = client.allocate(shape=(1024,), dtype="int32", name="fork.parent")
    arr = buf.as_numpy()
    arr[:] = 11
    buf.seal()
    before = client.status()

    def child():
        failures = 0
        for call in (lambda: client.allocate(64), lambda: client.list(),
                     lambda: client.open("fork.parent"), lambda: buf.seal(),
                     lambda: buf.as_numpy(), lambda: buf.__dlpack__()):  # fmt: skip
            try:
                call()
                failures += 1
            except gpubroker.ForkError as e:
                failures += "fork()" not in str(e)
        # Dropping the parent's objects here (as the child's exit would) must
        # not end the parent's session nor free its buffer.
        buf.release()
        client.close()
        gc.collect()
        with gpubroker.connect(daemon.dir) as own:  # a session of its own works
            b = own.allocate(shape=(4,), dtype="int32", name="fork.child")
            b.as_numpy()[:] = 5
            b.seal()
            failures += own.open("fork.parent").as_numpy()[0] != 11
            failures += own.status().sessions != 2
            b.release()
        return failures

    assert _in_child(child) == 0
    after = client.status()
    assert after.session_id == before.session_id
    assert [b.name for b in client.list()] == ["fork.parent"]
    assert used_bytes(client) == 4096
    buf.wait_ready()  # the parent's handles still work
    assert client.allocate(64).nbytes == 64
    assert arr[0] == 11
    assert client.open("fork.parent").as_numpy()[1023] == 11


def test_multiprocessing_fork_workers_connect_anew(daemon, client):
    import multiprocessing as mp

    keep = client.share(__import__("numpy").arange(100, dtype="float64"), name="fork.data")
    ctx = mp.get_context("fork")
    with ctx.Pool(2) as pool:
        sums = pool.map(_worker_sum, [daemon.dir] * 4)
    assert sums == [4950.0] * 4
    assert eventually(lambda: client.status().sessions == 1), "the workers' sessions linger"
    keep.release()


def _worker_sum(socket_dir: str) -> float:
    with gpubroker.connect(socket_dir) as c:
        return float(c.open("fork.data").as_numpy().sum())


def test_a_posted_open_released_in_the_child_then_used_says_released(daemon, client):
    """The parent's posted open (its answer not taken in) released in the
    child, then used there: a clear Released, as for any released Buffer
    (not an error of the package's own)."""
    made = client.share(__import__("numpy").arange(8, dtype="int32"), name="fork.posted")
    buf = client.open("fork.posted", posted=True)

    def child():
        buf.release()  # the parent's handle: dropped here without its answer
        failures = 0
        for call in (lambda: buf.shape, lambda: buf.as_numpy(), lambda: buf.__dlpack__(),
                     lambda: buf.device_id):  # fmt: skip
            try:
                call()
                failures += 1
            except gpubroker.Released as e:
                failures += "released" not in str(e)
        return failures

    assert _in_child(child) == 0
    assert buf.as_numpy()[7] == 7  # the parent's posted open is untouched
    buf.release()
    made.release()
