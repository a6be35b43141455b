"""Every error type, raised where the daemon (or the package) refuses."""

import os
import tempfile

import pytest

import gpubroker
from gpubroker import _errors, _lib


def has_reasons() -> bool:
    return _lib.load().last_error_reason is not None


def refused(exc_info, cls):
    """ResourceExhausted always; the precise subclass once the library says why."""
    assert isinstance(exc_info.value, gpubroker.ResourceExhausted)
    assert exc_info.value.code_name == "RESOURCE_EXHAUSTED"
    if not has_reasons():
        pytest.skip("this libgpubroker has no gpubroker_last_error_reason: no subclass to check")
    assert isinstance(exc_info.value, cls), type(exc_info.value)


def test_not_found(client):
    with pytest.raises(gpubroker.NotFound, match="no buffer named 'nope'") as e:
        client.open("nope")
    assert isinstance(e.value, LookupError) and e.value.code == 5
    with pytest.raises(gpubroker.NotFound):
        client.open(987654)
    with pytest.raises(gpubroker.NotFound):
        client.free("nope")


def test_invalid_argument(client):
    for call in (lambda: client.allocate(0),
                 lambda: client.allocate(64, name="1starts.with.a.digit"),
                 lambda: client.allocate(64, name="has space"),
                 lambda: client.allocate(16, shape=(10,), dtype="float32"),  # 40 bytes > 16
                 lambda: client.allocate(shape=(2, 2), dtype="int8", strides=(1,)),
                 lambda: client.allocate(64, strides=(1,)),
                 lambda: client.allocate(64, ttl=-1)):  # fmt: skip
        with pytest.raises(gpubroker.InvalidArgument) as e:
            call()
        assert isinstance(e.value, ValueError)
    with pytest.raises(TypeError, match="dtype"):
        client.allocate(shape=(2,), dtype="float128")


def test_already_exists(client):
    first = client.allocate(64, name="dup")  # held: dropping it frees it
    published = first.publish()
    assert published != 0 and first.id == published
    assert first.publish() == published  # known already: the same id
    # A buffer the client makes itself takes its name when it is published...
    second = client.allocate(64, name="dup")
    with pytest.raises(gpubroker.AlreadyExists, match="taken"):
        second.publish()
    with pytest.raises(gpubroker.AlreadyExists, match="taken"):
        second.seal()
    # ...one of the daemon's (kept past the session) when it is allocated.
    with pytest.raises(gpubroker.AlreadyExists, match="taken"):
        client.allocate(64, name="dup", keep=True)


def test_failed_precondition_and_timeout(client):
    held = client.allocate(64, name="unsealed")
    with pytest.raises(gpubroker.NotFound):
        client.open("unsealed")  # private to its maker until published
    held.publish()
    with pytest.raises(gpubroker.FailedPrecondition):
        client.open("unsealed")
    assert client.open("unsealed", allow_unsealed=True).nbytes == 64
    with pytest.raises(gpubroker.Timeout) as e:
        client.open("never", wait=True, timeout=0.2)
    assert isinstance(e.value, TimeoutError) and e.value.code_name == "DEADLINE_EXCEEDED"


def test_quota_exceeded(make_daemon):
    d = make_daemon("--default-quota", "64KiB")
    with gpubroker.connect(d.dir) as c:
        held = c.allocate(48 << 10)  # noqa: F841
        with pytest.raises(gpubroker.ResourceExhausted, match="over quota") as e:
            c.allocate(32 << 10)
        refused(e, gpubroker.QuotaExceeded)
        assert e.value.reason == "quota"


def test_out_of_memory(make_daemon):
    d = make_daemon("--host-pool-bytes", "1MiB")
    with gpubroker.connect(d.dir) as c:
        held = c.allocate(600 << 10)  # noqa: F841
        with pytest.raises(gpubroker.ResourceExhausted) as e:
            c.allocate(600 << 10)
        refused(e, gpubroker.OutOfMemory)
        assert e.value.reason == "out_of_memory"


def test_refusal_reasons_map_to_their_classes():
    for reason, cls, word in ((1, gpubroker.QuotaExceeded, "quota"),
                              (2, gpubroker.OutOfMemory, "out_of_memory"),
                              (3, gpubroker.LimitExceeded, "limit"),
                              (0, gpubroker.ResourceExhausted, None)):  # fmt: skip
        e = _errors.from_status(8, "no room", reason)
        assert type(e) is cls and e.reason == word and str(e) == "RESOURCE_EXHAUSTED: no room"
    assert type(_errors.from_status(9, "x", 1)) is gpubroker.FailedPrecondition
    assert type(_errors.from_status(15, "lost")) is gpubroker.Error


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another user")
def test_permission_denied_on_another_tenants_share(daemon, client, helpers):
    other = helpers(daemon.dir, uid=4242)
    _, tenant = other.ok("session").split()
    buf_id = other.ok(f"alloc x 4096 name=shared.by.other share={client.tenant}")
    other.ok("seal x")
    view = client.open(int(buf_id))
    assert view.nbytes == 4096
    with pytest.raises(gpubroker.PermissionDenied) as e:
        view.seal()
    assert isinstance(e.value, PermissionError)
    with pytest.raises(gpubroker.PermissionDenied):
        client.free(int(buf_id))
    assert tenant != client.tenant


def test_unavailable(make_daemon):
    empty = tempfile.mkdtemp()
    with pytest.raises(gpubroker.Unavailable, match=empty) as e:
        gpubroker.connect(empty)
    assert isinstance(e.value, ConnectionError)
    d = make_daemon()
    c = gpubroker.connect(d.dir)
    assert d.stop() == 0
    with pytest.raises(gpubroker.Unavailable):
        c.allocate(64)
    with pytest.raises(gpubroker.Unavailable):
        c.list()


def test_daemon_keeps_serving_after_bad_requests(client):
    for _ in range(3):
        with pytest.raises(gpubroker.Error):
            client.allocate(0)
    assert client.allocate(64).nbytes == 64


def test_errors_share_one_base_and_carry_the_message(client):
    with pytest.raises(gpubroker.Error) as e:
        client.open("absent.buffer")
    assert e.value.message == "no buffer named 'absent.buffer'"
    assert e.value.code_name == "NOT_FOUND" and e.value.reason is None


def test_library_not_found_names_the_paths_it_tried(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "libgpubroker.so.0"
    bad.write_text("not a library")
    out = subprocess.run([sys.executable, "-c", "import gpubroker; gpubroker.connect()"],
                         env=dict(os.environ, GPUBROKER_LIBRARY=str(bad)),
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 1
    assert "LibraryNotFound" in out.stderr and str(bad) in out.stderr
    assert "GPUBROKER_LIBRARY" in out.stderr


