"""Real processes for the Python tests: a gpubrokerd on a temporary socket
directory, Python client processes, and the C++ test helper."""

from __future__ import annotations

import os
import re
import shutil
import select
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, List, Optional

import pytest

import gpubroker


def bin_dir() -> Path:
    """Where the daemon and the C++ helper are: $GPUBROKER_BIN_DIR, else beside the library."""
    env = os.environ.get("GPUBROKER_BIN_DIR")
    if env:
        return Path(env)
    return Path(gpubroker.library_path()).resolve().parent.parent / "bin"


def pattern(n: int, seed: int, start: int = 0) -> bytes:
    """The C++ helper's fill pattern (PatternByte in tests/integration/helper_memory.h)."""
    return bytes(((i * 131 + seed * 7 + 1) & 0xFF) for i in range(start, start + n))


class Daemon:
    def __init__(self, extra: List[str], config: str = ""):
        self.dir = tempfile.mkdtemp(prefix="gpubroker-py-")
        os.chmod(self.dir, 0o755)
        self.log_path = os.path.join(self.dir, "gpubrokerd.log")
        argv = [str(bin_dir() / "gpubrokerd"), "--socket-dir", self.dir,
                "--metrics-address", "127.0.0.1:0", "--hello-timeout", "300ms",
                "--backend", os.environ.get("GPUBROKER_TEST_BACKEND", "host"),
                "--host-pool-bytes", "256MiB"]  # fmt: skip
        if config:
            path = os.path.join(self.dir, "gpubroker.yaml")
            Path(path).write_text(config)
            argv += ["--config", path]
        argv += extra
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=open(self.log_path, "w"),
                                     text=True)  # fmt: skip
        line = _readline(self.proc.stdout, 20)
        if not line:
            log = self.log()
            self.stop()
            shutil.rmtree(self.dir, ignore_errors=True)
            raise RuntimeError(f"gpubrokerd printed no start line; log:\n{log}")
        self.start_line = line
        m = re.search(r"metrics (\S+)", line)
        self.metrics_address = m.group(1) if m else ""

    def log(self) -> str:
        return Path(self.log_path).read_text()

    def metric(self, series: str) -> float:
        body = urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=5).read()
        for line in body.decode().splitlines():
            if line.startswith(series + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def _readline(stream, timeout: float) -> str:
    ready, _, _ = select.select([stream], [], [], timeout)
    return stream.readline().strip() if ready else ""


@pytest.fixture
def make_daemon() -> Iterator[Callable[..., Daemon]]:
    started: List[Daemon] = []

    def make(*extra: str, config: str = "") -> Daemon:
        d = Daemon(list(extra), config)
        started.append(d)
        return d

    yield make
    failed = []
    for d in started:
        code = d.stop()
        if code != 0:
            failed.append(f"gpubrokerd did not exit cleanly ({code}); log:\n{d.log()}")
        shutil.rmtree(d.dir, ignore_errors=True)
    assert not failed, "\n".join(failed)


@pytest.fixture
def daemon(make_daemon) -> Daemon:
    return make_daemon()


@pytest.fixture
def client(daemon) -> Iterator[gpubroker.Client]:
    c = gpubroker.connect(daemon.dir)
    yield c
    c.close()


class Child:
    """A process that runs Python code and talks in lines: each of its
    ``say(...)`` prints one; ``expect()`` reads one."""

    def __init__(self, code: str, socket_dir: str, args: Optional[List[str]] = None,
                 env: Optional[dict] = None):  # fmt: skip
        prelude = textwrap.dedent("""\
            import os, sys
            import gpubroker
            def say(*words):
                print(*words, flush=True)
            def hear():
                return sys.stdin.readline().strip()
            """)  # fmt: skip
        full_env = dict(os.environ, GPUBROKER_SOCKET_DIR=socket_dir, **(env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", prelude + textwrap.dedent(code)] + (args or []),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=full_env)  # fmt: skip

    def expect(self, timeout: float = 30) -> str:
        line = _readline(self.proc.stdout, timeout)
        if not line and self.proc.poll() is not None:
            raise AssertionError(f"child exited {self.proc.returncode}:\n{self.proc.stderr.read()}")
        return line

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 30) -> int:
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        code = self.proc.wait(timeout)
        if code != 0:
            raise AssertionError(f"child exited {code}:\n{self.proc.stderr.read()}")
        return code

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait()


class Helper:
    """gpubroker-test-helper, the C++ client process of the integration tests."""

    def __init__(self, socket_dir: str, uid: int = -1):
        argv = [str(bin_dir() / "gpubroker-test-helper"), "--socket-dir", socket_dir]
        if uid >= 0:
            argv += ["--uid", str(uid)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)  # fmt: skip
        ready = _readline(self.proc.stdout, 20)
        assert ready.startswith("ok ready"), ready

    def send(self, command: str, timeout: float = 30) -> str:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return _readline(self.proc.stdout, timeout)

    def ok(self, command: str) -> str:
        reply = self.send(command)
        assert reply.startswith("ok"), f"{command}: {reply}"
        return reply[3:]

    def exit(self) -> None:
        if self.proc.poll() is None:
            self.send("exit")
            self.proc.wait(20)


@pytest.fixture
def helpers() -> Iterator[Callable[..., Helper]]:
    made: List[Helper] = []

    def make(socket_dir: str, uid: int = -1) -> Helper:
        h = Helper(socket_dir, uid)
        made.append(h)
        return h

    yield make
    for h in made:
        h.exit()


@pytest.fixture
def children() -> Iterator[Callable[..., Child]]:
    made: List[Child] = []

    def make(code: str, socket_dir: str, **kw) -> Child:
        c = Child(code, socket_dir, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        if c.proc.poll() is None:
            c.kill9()


def eventually(pred: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def used_bytes(client: gpubroker.Client) -> int:
    """What this client's tenant holds, freed-but-leased buffers included."""
    t = client.status().tenant_status()
    return t.used_bytes if t else 0
