"""Two processes hand a tensor over: A (this process) makes it, B (a child)
opens it, writes into it, synchronizes and answers. Each case is one way to
do it (the broker, torch.multiprocessing over a Pipe or a Queue, the copy
path, the bare channels), timed step by step. (Over 500 lines on purpose:
every case side by side, so that each side visibly does the same work.)

Both processes stamp their steps with time.perf_counter_ns(), which on Linux
is CLOCK_MONOTONIC, one clock for every process of the machine: a step that
starts in A and ends in B (the signal) is B's stamp minus A's. A hand-over's
steps add up to its total exactly. B sends its stamps at the end of the
run, never inside a timed window, and every case leaves both processes idle
before the next one starts: B answers, then does what follows the answer
(releasing its buffer, dropping the tensor), then says it is done.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import random
import time
from multiprocessing.reduction import ForkingPickler
from typing import Any, Dict, List, Optional, Tuple

import gpubroker

now = time.perf_counter_ns
# A channel waits in a blocking call before A starts: long enough for B to be in it.
PARK_S = 0.002
# How long B's open(wait=True, awake=...) stays awake in the case that asks
# it (or keeps the daemon awake, daemon_awake=...): longer than PARK_S, so
# that A's seal comes within it.
WAIT_AWAKE_S = 0.005


# How a process waits on its channel ------------------------------------------------
#
# Asleep (the default): in a blocking read, as a process with nothing else to
# do waits; the kernel parks it and the message wakes it, on a CPU that may
# have halted meanwhile. Awake: polling the channel without blocking until
# something is there, as a busy pipeline's processes are on their CPUs when a
# hand-over comes. Both sides of every case wait the same way in one run;
# only the broker's own waits (open(wait=True)) keep the library's behaviour.


def receive_bytes(conn: Any, awake: bool) -> bytes:
    if awake:
        while not conn.poll(0):
            os.sched_yield()
    return conn.recv_bytes()


def receive(conn: Any, awake: bool) -> Any:
    return ForkingPickler.loads(receive_bytes(conn, awake))


def take(q: Any, awake: bool) -> Any:
    """Queue.get, or polling it without blocking when awake."""
    if not awake:
        return q.get()
    while True:
        try:
            return q.get(block=False)
        except queue.Empty:
            os.sched_yield()


def clock_is_shared() -> bool:
    return time.get_clock_info("perf_counter").implementation == "clock_gettime(CLOCK_MONOTONIC)"


# What each side does with its framework -----------------------------------------


class Producer:
    """A's framework: torch (CUDA or CPU), or NumPy where torch is missing."""

    def __init__(self, gpu: bool):
        self.gpu = gpu
        try:
            import torch
        except ImportError:
            if gpu:
                raise
            torch = None
        self.torch = torch
        self.name = "torch" if torch is not None else "numpy"
        if gpu:
            torch.cuda.set_device(0)
            torch.zeros(1, device="cuda").sum().item()
        self.stream = torch.cuda.current_stream() if gpu else None

    def dtype(self) -> Any:
        return self.torch.uint8 if self.torch is not None else "uint8"

    def wrap(self, buf: gpubroker.Buffer) -> Any:
        return buf.as_torch() if self.torch is not None else buf.as_numpy()

    def empty(self, size: int) -> Any:
        device = "cuda" if self.gpu else "cpu"
        return self.torch.empty(size, dtype=self.torch.uint8, device=device)

    def zeros(self, size: int) -> Any:
        if self.torch is None:
            import numpy

            return numpy.zeros(size, dtype=numpy.uint8)
        return self.torch.zeros(size, dtype=self.torch.uint8, device="cuda" if self.gpu else "cpu")

    def to_host(self, x: Any) -> Any:
        return x.cpu().numpy() if self.torch is not None else x.copy()


class Consumer:
    """B's framework: 'cupy' (NumPy on host memory) or 'torch'."""

    def __init__(self, kind: str, gpu: bool):
        self.kind, self.gpu = kind, gpu
        if kind == "torch":
            import torch

            self.mod = torch
            if gpu:
                torch.cuda.set_device(0)
                torch.zeros(1, device="cuda").fill_(1)
                torch.cuda.synchronize()
        elif gpu:
            import cupy

            self.mod = cupy
            cupy.zeros(8, dtype=cupy.uint8)[:4] = 1
            cupy.cuda.get_current_stream().synchronize()
        else:
            import numpy

            self.mod = numpy

    def wrap(self, buf: gpubroker.Buffer) -> Any:
        if self.kind == "torch":
            return buf.as_torch()
        return buf.as_cupy() if self.gpu else buf.as_numpy()

    def from_tensor(self, t: Any) -> Any:
        """A torch tensor received through torch.multiprocessing, in this framework."""
        if self.kind == "torch":
            return t
        return self.mod.from_dlpack(t) if self.gpu else t.numpy()

    def from_array(self, a: Any) -> Any:
        """A NumPy array received by value (the copy path), in this framework."""
        if self.kind == "torch":
            return self.mod.from_numpy(a).cuda() if self.gpu else self.mod.from_numpy(a)
        return self.mod.asarray(a)

    def write(self, a: Any) -> None:
        if self.kind == "torch":
            a[:4].fill_(1)
        else:
            a[:4] = 1

    def sync(self) -> None:
        if not self.gpu:
            return
        if self.kind == "torch":
            self.mod.cuda.synchronize()
        else:
            self.mod.cuda.get_current_stream().synchronize()


# The cases ---------------------------------------------------------------------

# name: (label, consumer kind, channel). Channel "pipe": the signal is A's
# message on the Pipe; "queue": torch.multiprocessing's Queues; "wait": B
# waits in the broker (open(wait=True)) and A's seal wakes it.
CASES = {
    "broker-cupy": ("gpubroker {a} -> {cupy}", "cupy", "pipe"),
    "broker-torch": ("gpubroker torch -> torch", "torch", "pipe"),
    "broker-posted-cupy": ("gpubroker {a} -> {cupy}, posted seal (seal(posted=True))", "cupy", "pipe"),
    "broker-postedopen-cupy": ("gpubroker {a} -> {cupy}, posted seal and posted open "
                               "(open(posted=True))", "cupy", "pipe"),
    "broker-wait-cupy": ("gpubroker {a} -> {cupy}, B waits in open(wait=True)", "cupy", "wait"),
    "broker-waitawake-cupy": ("gpubroker {a} -> {cupy}, B waits awake in open(wait=True, "
                              "awake=5 ms), posted seal", "cupy", "wait"),
    "broker-waitdaemon-cupy": ("gpubroker {a} -> {cupy}, B asleep in open(wait=True, "
                               "daemon_awake=5 ms), posted seal", "cupy", "wait"),
    "broker-ticket-cupy": ("gpubroker {a} -> {cupy}, the Buffer pickled into the message (ticket)",
                           "cupy", "pipe"),
    "tmp-pipe-cupy": ("torch.multiprocessing (Pipe) torch -> {cupy}", "cupy", "pipe"),
    "tmp-pipe-torch": ("torch.multiprocessing (Pipe) torch -> torch", "torch", "pipe"),
    "tmp-queue-torch": ("torch.multiprocessing (Queue) torch -> torch", "torch", "queue"),
    "pipe-ping": ("channel: Pipe round trip, small message", None, "pipe"),
    "queue-ping": ("channel: torch.multiprocessing Queue round trip, small message", None, "queue"),
    "copy": ("copy path: to host, pickled over the Pipe, {asarray} in B", "cupy", "pipe"),
}
# Issue #12's hand-over: "allocate + fill-free + seal in A; open + wrap +
# stream wait in B", and the same steps of the other ways: what each case's
# steps are counted in it (by the start of their names). The channel, B's
# write and synchronize and the answer are not; nor torch.multiprocessing's
# Queues, whose put and get hide the IPC export and import inside the signal.
ISSUE_WINDOW = {
    "broker-cupy": ("A: allocate", "A: wrap", "A: seal", "B: open", "B: wrap"),
    "broker-torch": ("A: allocate", "A: wrap", "A: seal", "B: open", "B: wrap"),
    "broker-posted-cupy": ("A: allocate", "A: wrap", "A: seal", "B: open", "B: wrap"),
    "broker-postedopen-cupy": ("A: allocate", "A: wrap", "A: seal", "B: open", "B: wrap"),
    "broker-wait-cupy": ("A: allocate", "A: wrap", "wake-up:", "B: wrap"),
    "broker-waitawake-cupy": ("A: allocate", "A: wrap", "wake-up:", "B: wrap"),
    "broker-waitdaemon-cupy": ("A: allocate", "A: wrap", "wake-up:", "B: wrap"),
    "broker-ticket-cupy": ("A: allocate", "A: wrap", "A: seal", "A: pickle", "B: unpickle",
                           "B: wrap"),
    "tmp-pipe-cupy": ("A: allocate", "A: pickle", "B: unpickle", "B: wrap"),
    "tmp-pipe-torch": ("A: allocate", "A: pickle", "B: unpickle", "B: wrap"),
    "copy": ("A: to host", "A: pickle", "B: unpickle", "B: to the consumer"),
}
ISSUE_LABEL = "issue #12's hand-over (A: allocate, wrap, seal or export; B: open or import, wrap)"


def issue_window(case: str, steps: List[Tuple[str, float]]) -> Optional[float]:
    """The case's steps that issue #12 counts, summed; None for a case it has none of."""
    prefixes = ISSUE_WINDOW.get(case)
    if prefixes is None:
        return None
    return sum(v for n, v in steps if n.startswith(prefixes))


NEEDS_TORCH = {"broker-torch", "tmp-pipe-cupy", "tmp-pipe-torch", "tmp-queue-torch", "queue-ping"}


def label(case: str, gpu: bool, producer: str = "torch") -> str:
    return CASES[case][0].format(a=producer, cupy="cupy" if gpu else "numpy",
                                 asarray="cupy.asarray" if gpu else "numpy")  # fmt: skip


# B: the child -------------------------------------------------------------------


def child(conn: Any, inbox: Any, outbox: Any, socket_dir: str, gpu: bool, kinds: List[str],
          awake: bool) -> None:  # fmt: skip
    """B's loop: one message per case on the Pipe, stamps kept for the end."""
    try:
        import torch.multiprocessing  # noqa: F401  (tensors' reductions for the Pipe)
    except ImportError:
        pass
    consumers = {k: Consumer(k, gpu) for k in kinds}
    client = gpubroker.connect(socket_dir)
    stamps: Dict[Tuple[str, int], List[int]] = {}
    conn.send("ready")
    while True:
        raw = receive_bytes(conn, awake)
        t_recv = now()
        msg = ForkingPickler.loads(raw)
        t_loaded = now()
        case = msg[0]
        if case == "report":
            conn.send(stamps)
            continue
        if case == "stop":
            client.close()
            return
        i = msg[1]
        kind = CASES[case][1] if case in CASES else None
        fw = consumers.get(kind) if kind else None
        if case in ("broker-cupy", "broker-torch", "broker-posted-cupy", "broker-postedopen-cupy"):
            # A posted open returns at once; the wrap takes its answer in.
            buf = client.open(msg[2], posted=case == "broker-postedopen-cupy")
            t_open = now()
            a = fw.wrap(buf)  # the consumer's stream waits for A's fence here
            t_wrap = now()
            fw.write(a)
            t_write = now()
            fw.sync()
            t_sync = now()
            conn.send(1)
            t_answer = now()
            del a
            buf.release()
            stamps[case, i] = [t_recv, t_loaded, t_open, t_wrap, t_write, t_sync, t_answer, now()]
        elif case == "broker-ticket-cupy":
            buf = msg[2]  # unpickled above: the ticket's claim, posted
            a = fw.wrap(buf)  # takes the claim's answer in, then the stream wait
            t_wrap = now()
            fw.write(a)
            t_write = now()
            fw.sync()
            t_sync = now()
            conn.send(1)
            t_answer = now()
            del a, msg
            buf.release()
            stamps[case, i] = [t_recv, t_loaded, t_wrap, t_write, t_sync, t_answer, now()]
        elif CASES[case][2] == "wait":  # B waits in the broker
            conn.send("parked")
            buf = client.open(msg[2], wait=True, timeout=30,
                              awake=WAIT_AWAKE_S if case == "broker-waitawake-cupy" else None,
                              daemon_awake=(WAIT_AWAKE_S if case == "broker-waitdaemon-cupy"
                                            else None))  # fmt: skip
            t_open = now()
            a = fw.wrap(buf)
            t_wrap = now()
            fw.write(a)
            t_write = now()
            fw.sync()
            t_sync = now()
            conn.send(1)
            t_answer = now()
            del a
            buf.release()
            stamps[case, i] = [t_open, t_wrap, t_write, t_sync, t_answer, now()]
        elif case in ("tmp-pipe-cupy", "tmp-pipe-torch", "copy"):
            t = msg[2]  # unpickled above: for a CUDA tensor, torch's IPC import
            a = fw.from_tensor(t) if case != "copy" else fw.from_array(t)
            t_wrap = now()
            fw.write(a)
            t_write = now()
            fw.sync()
            t_sync = now()
            conn.send(1)
            t_answer = now()
            del a, t, msg
            stamps[case, i] = [t_recv, t_loaded, t_wrap, t_write, t_sync, t_answer, now()]
        elif case == "tmp-queue-torch":
            conn.send("parked")
            t = take(inbox, awake)
            t_got = now()
            fw.write(t)
            t_write = now()
            fw.sync()
            t_sync = now()
            outbox.put(1)
            t_answer = now()
            del t
            stamps[case, i] = [t_got, t_write, t_sync, t_answer, now()]
        elif case == "pipe-ping":
            conn.send(1)
            stamps[case, i] = [t_recv, t_loaded]
        elif case == "queue-ping":
            conn.send("parked")
            take(inbox, awake)
            t_got = now()
            outbox.put(1)
            stamps[case, i] = [t_got]
        else:
            raise ValueError(f"unknown case {case!r}")
        conn.send("done")


# A: this process ------------------------------------------------------------------


class Run:
    """A's side of every case against one child B."""

    def __init__(self, socket_dir: str, gpu: bool, cases: List[str], awake: bool = False):
        self.gpu = gpu
        self.awake = awake
        self.producer = Producer(gpu)
        if self.producer.torch is None:
            cases = [c for c in cases if c not in NEEDS_TORCH and not c.startswith("tmp-")]
        self.cases = cases
        kinds = sorted({CASES[c][1] for c in cases if CASES[c][1]})
        if self.producer.torch is not None:
            import torch.multiprocessing as tmp

            ctx = tmp.get_context("spawn")
        else:
            ctx = mp.get_context("spawn")
        self.conn, child_end = ctx.Pipe()
        self.inbox, self.outbox = ctx.Queue(), ctx.Queue()
        args = (child_end, self.inbox, self.outbox, socket_dir, gpu, kinds, awake)
        self.proc = ctx.Process(target=child, args=args, daemon=True)
        self.proc.start()
        child_end.close()  # B's end is B's alone: its death is an EOF here
        try:
            if not self.conn.poll(300):
                raise EOFError
            assert self.conn.recv() == "ready"
        except EOFError:
            self.proc.join(5)
            raise RuntimeError(f"B did not start (exit status {self.proc.exitcode}; its stderr "
                               "says why)") from None  # fmt: skip
        self.client = gpubroker.connect(socket_dir)
        self.marks: Dict[Tuple[str, int], List[Tuple[str, int]]] = {}
        self.after: Dict[Tuple[str, int], int] = {}
        self.aside: Dict[Tuple[str, int], Dict[str, int]] = {}  # within a step, not in the sum
        self._n = 0

    def close(self) -> None:
        self.conn.send(("stop",))
        self.proc.join(30)
        self.client.close()

    def _send(self, msg: Any) -> None:
        self.conn.send_bytes(ForkingPickler.dumps(msg))  # what Connection.send does

    def _settle(self, expect: str = "done") -> None:
        got = receive(self.conn, self.awake)
        assert got == expect, f"B said {got!r}, not {expect!r}"

    def _park(self, msg: Any) -> None:
        """Tells B what comes, then gives it time to block in its channel."""
        self._send(msg)
        self._settle("parked")
        time.sleep(PARK_S)

    def one(self, case: str, size: int, i: int) -> None:
        """One hand-over: A's stamps into self.marks[case, i]."""
        p = self.producer
        name = f"bench.{os.getpid()}.{self._n}"
        self._n += 1
        m: List[Tuple[str, int]] = []
        waits = CASES[case][2] == "wait"  # B waits in the broker
        if case in ("broker-cupy", "broker-torch", "broker-wait-cupy", "broker-posted-cupy",
                    "broker-postedopen-cupy", "broker-waitawake-cupy",
                    "broker-waitdaemon-cupy"):  # fmt: skip
            if waits:
                self._park((case, i, name))
            t0 = now()
            buf = self.client.allocate(shape=(size,), dtype=p.dtype(), name=name)
            t1 = now()
            x = p.wrap(buf)  # what the producer would fill
            t2 = now()
            buf.seal(p.stream, posted=case in ("broker-posted-cupy", "broker-postedopen-cupy",
                                               "broker-waitawake-cupy",
                                               "broker-waitdaemon-cupy"))  # fmt: skip
            t3 = now()
            if not waits:
                self._send((case, i, name))
            receive(self.conn, self.awake)
            t_end = now()
            del x
            buf.release()
            self.after[case, i] = now() - t_end
            m = [("start", t0), ("A: allocate", t1), ("A: wrap (as_" + p.name + ")", t2)]
            if waits:
                # B may wake before A's seal returns: the wake-up starts with the call.
                self.aside[case, i] = {"A: the seal call (within the wake-up)": t3 - t2}
            else:
                m.append(("A: seal", t3))
            m.append(("end", t_end))
        elif case == "broker-ticket-cupy":
            # No name: the message carries the Buffer itself (pickled: a ticket).
            t0 = now()
            buf = self.client.allocate(shape=(size,), dtype=p.dtype())
            t1 = now()
            x = p.wrap(buf)
            t2 = now()
            buf.seal(p.stream, posted=True)
            t3 = now()
            raw = ForkingPickler.dumps((case, i, buf))  # the ticket: its hold posted
            t4 = now()
            self.conn.send_bytes(raw)
            receive(self.conn, self.awake)
            t_end = now()
            del x, raw
            buf.release()
            self.after[case, i] = now() - t_end
            m = [("start", t0), ("A: allocate", t1), ("A: wrap (as_" + p.name + ")", t2),
                 ("A: seal", t3), ("A: pickle (ticket)", t4), ("end", t_end)]  # fmt: skip
        elif case in ("tmp-pipe-cupy", "tmp-pipe-torch"):
            t0 = now()
            x = p.empty(size)
            t1 = now()
            raw = ForkingPickler.dumps((case, i, x))  # torch's IPC export of the storage
            t2 = now()
            self.conn.send_bytes(raw)
            receive(self.conn, self.awake)
            t_end = now()
            del x, raw
            self.after[case, i] = now() - t_end
            m = [("start", t0), ("A: allocate (torch.empty)", t1), ("A: pickle (IPC export)", t2),
                 ("end", t_end)]  # fmt: skip
        elif case == "tmp-queue-torch":
            self._park((case, i))
            t0 = now()
            x = p.empty(size)
            t1 = now()
            self.inbox.put(x)  # pickled and written by the Queue's feeder thread
            take(self.outbox, self.awake)
            t_end = now()
            del x
            self.after[case, i] = now() - t_end
            m = [("start", t0), ("A: allocate (torch.empty)", t1), ("end", t_end)]
        elif case == "copy":
            x = self._source(size)
            t0 = now()
            host = p.to_host(x)
            t1 = now()
            raw = ForkingPickler.dumps((case, i, host))
            t2 = now()
            self.conn.send_bytes(raw)
            receive(self.conn, self.awake)
            t_end = now()
            del host, raw
            m = [("start", t0), ("A: to host", t1), ("A: pickle", t2), ("end", t_end)]
        elif case == "pipe-ping":
            t0 = now()
            self._send((case, i))
            receive(self.conn, self.awake)
            m = [("start", t0), ("end", now())]
        elif case == "queue-ping":
            self._park((case, i))
            t0 = now()
            self.inbox.put(1)
            take(self.outbox, self.awake)
            m = [("start", t0), ("end", now())]
        self.marks[case, i] = m
        self._settle()

    def _source(self, size: int) -> Any:
        src = getattr(self, "_src", None)
        if src is None or len(src) != size:
            self._src = src = self.producer.zeros(size)
        return src

    def run(self, size: int, iterations: int, warmup: int, copy_iterations: int,
            seed: int = 1) -> Dict[str, Any]:  # fmt: skip
        """Every case once per iteration, in a shuffled order; the copy path
        (slow) on its own. Returns each case's steps per iteration."""
        rng = random.Random(seed)
        fast = [c for c in self.cases if c != "copy"]
        for i in range(warmup + iterations):
            rng.shuffle(fast)
            for case in fast:
                self.one(case, size, i)
        if "copy" in self.cases:
            for i in range(1 + copy_iterations):
                self.one("copy", size, i)
        self._send(("report",))
        b_stamps = self.conn.recv()  # outside any timed window
        out: Dict[str, Any] = {}
        for case in self.cases:
            first = 1 if case == "copy" else warmup
            last = 1 + copy_iterations if case == "copy" else warmup + iterations
            rows = [steps(case, self.marks[case, i], b_stamps[case, i],
                          self.after.get((case, i)), self.aside.get((case, i), {}), self.gpu)
                    for i in range(first, last)]  # fmt: skip
            out[case] = rows
        self.marks.clear()
        self.after.clear()
        self.aside.clear()
        return out


# B's stamps per case, in order: the step each one ends (None: a stamp that
# ends no step of the hand-over, only what follows the answer).
_SIGNAL = "signal: A's send until B has the message"
_B_STEPS = {
    "broker-cupy": [_SIGNAL, "B: unpickle the message", "B: open",
                    "B: wrap + stream wait (as_{fw})", "B: write", "B: synchronize", None,
                    "B: release (after answering)"],
    "broker-ticket-cupy": [_SIGNAL, "B: unpickle (claim)",
                           "B: wrap + stream wait (as_{fw}; the claim's answer)", "B: write",
                           "B: synchronize", None, "B: release (after answering)"],
    "broker-wait-cupy": ["wake-up: A's seal call until B's open(wait) returns",
                         "B: wrap + stream wait (as_{fw})", "B: write", "B: synchronize", None,
                         "B: release (after answering)"],
    "tmp-pipe-cupy": [_SIGNAL, "B: unpickle (torch's IPC import)", "B: wrap ({from_tensor})",
                      "B: write", "B: synchronize", None, "B: drop the tensor (after answering)"],
    "tmp-pipe-torch": [_SIGNAL, "B: unpickle (torch's IPC import)", "B: wrap (none: a tensor)",
                       "B: write", "B: synchronize", None,
                       "B: drop the tensor (after answering)"],
    "tmp-queue-torch": ["signal: A's put until B's get returns (pickle, IPC import)", "B: write",
                        "B: synchronize", None, "B: drop the tensor (after answering)"],
    "copy": [_SIGNAL, "B: unpickle", "B: to the consumer ({asarray})", "B: write",
             "B: synchronize", None, "B: drop it (after answering)"],
    "pipe-ping": ["there: A's send until B has the message", "B: unpickle"],
    "queue-ping": ["there: A's put until B's get returns"],
}  # fmt: skip
_B_STEPS["broker-torch"] = _B_STEPS["broker-cupy"]
_B_STEPS["broker-posted-cupy"] = _B_STEPS["broker-cupy"]
_B_STEPS["broker-postedopen-cupy"] = _B_STEPS["broker-cupy"]
_B_STEPS["broker-waitawake-cupy"] = _B_STEPS["broker-wait-cupy"]
_B_STEPS["broker-waitdaemon-cupy"] = _B_STEPS["broker-wait-cupy"]
_ANSWER = {"pipe": "answer: B's send until A has it",
           "wait": "answer: B's send until A has it",
           "queue": "answer: B's put until A's get returns"}  # fmt: skip
_PING_BACK = {"pipe-ping": "back: B's send until A has it",
              "queue-ping": "back: B's put until A's get returns"}  # fmt: skip


def steps(case: str, a: List[Tuple[str, int]], b: List[int], a_after: Optional[int],
          aside: Dict[str, int], gpu: bool) -> Dict[str, Any]:  # fmt: skip
    """One hand-over's steps in order (name, microseconds), which add up to
    its total; what each process did after the answer; and parts of a step
    worth seeing on their own (`aside`)."""
    kind = CASES[case][1]
    fw = "torch" if kind == "torch" else ("cupy" if gpu else "numpy")
    words = {"fw": fw, "asarray": "cupy.asarray" if gpu else "numpy",
             "from_tensor": "cupy.from_dlpack" if gpu else "tensor.numpy()"}  # fmt: skip
    names = [n.format(**words) if n else n for n in _B_STEPS[case]]
    assert len(names) == len(b), (case, len(names), len(b))
    t0, t_end = a[0][1], a[-1][1]
    timeline = list(a[1:-1])
    after: Dict[str, float] = {}
    last = None
    for n, t in zip(names, b):
        if n is None:
            last = t  # B's answer: the start of what follows it
        elif last is not None:
            after[n] = (t - last) / 1000
        else:
            timeline.append((n, t))
    timeline.append((_PING_BACK.get(case) or _ANSWER[CASES[case][2]], t_end))
    out: List[Tuple[str, float]] = []
    prev = t0
    for n, t in timeline:
        out.append((n, (t - prev) / 1000))
        prev = t
    if a_after is not None:
        after["A: release / drop (after the answer)"] = a_after / 1000
    return {"total": (t_end - t0) / 1000, "steps": out, "after": after,
            "aside": {k: v / 1000 for k, v in aside.items()}}  # fmt: skip
