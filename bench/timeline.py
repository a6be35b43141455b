#!/usr/bin/env python3
"""Reads the socket-call timelines that libgpubroker-timeline.so wrote
(bench/timeline/timeline_preload.c) and cuts gpubroker-bench's seal + wait,
its idle round trip and the hand-over's seal into hops: who slept, who woke
when, who worked how long. p50 over the iterations, in microseconds.

    GPUBROKER_TIMELINE_DIR=DIR LD_PRELOAD=build/lib/libgpubroker-timeline.so \\
        gpubroker-bench --backend host --quick
    python3 bench/timeline.py DIR [--show N]

--show N prints the N-th seal + wait's records from every process, whole.
--require-board fails unless some seal + wait shows B asleep on the wake
board (CI's check that the futex calls are recorded).
--slow-calls US lists the client calls whose answer took over US µs (any
case, the hand-overs' Publish and Open included) with the records around the
first --show of them.
"""

import argparse
import bisect
import glob
import os
import statistics
import struct
import sys

RECORD = struct.Struct("<QQihhiiq")  # the C struct Record, 40 bytes
OPS = {1: "read", 2: "write", 3: "recvmsg", 4: "sendmsg", 5: "poll", 6: "epoll_wait", 7: "mark",
       8: "futex_wait", 9: "futex_wake", 10: "futex_waitv"}
READS = {"read", "recvmsg"}
SENDS = {"write", "sendmsg"}
WAITS = {"poll", "epoll_wait"}
# A client's sleep on its tenant's wake board (common/wake_board.h): on its
# session's word and its call's word at once, or (a kernel before 5.16) on
# the session's word alone.
BOARD_SLEEPS = {"futex_wait", "futex_waitv"}

# bench/timeline/marks.h
SEAL, SEAL_POSTED, SEAL_AWAKE, SEAL_DAEMON_AWAKE, OPENED, WAITED, SYNCED, PING, PING_END = (
    10, 12, 13, 14, 20, 21, 22, 30, 31)
HANDOVER_SEAL, HANDOVER_SEALED, HANDOVER_SEAL_AFTER_WORK = 15, 16, 17
# common/trace.h
DECODED, SERVED, PARKED_ANSWER, ANSWER_TAKEN, MAPPED = 100, 101, 102, 110, 111
PUBLISH_BEGUN, PUBLISH_LOCKED, PUBLISH_STORED = 103, 104, 105
# A call that waited this long (µs) or longer was parked (an Open that waits).
PARKED_US = 1500


class Rec:
    __slots__ = ("pid", "name", "start", "end", "tid", "op", "folded", "fd", "timeout", "result")

    def __init__(self, pid, name, fields):
        self.pid, self.name = pid, name
        self.start, self.end, self.tid, op, flags, self.fd, self.timeout, self.result = fields
        self.op = OPS.get(op, str(op))
        self.folded = flags == 1

    def describe(self, t0):
        what = f"{self.op}({self.fd}"
        if self.op == "futex_waitv":
            what = f"{self.op}(words {self.fd & 0xffff}, {self.fd >> 16}"
        elif self.op.startswith("futex"):
            what = f"{self.op}(word {self.fd}"
        if self.op in WAITS or self.op in BOARD_SLEEPS:
            what += f", timeout {self.timeout}"
        what += f") = {self.result}"
        if self.folded:
            what += " (a run of empty calls)"
        if self.op == "mark":
            what = f"mark {self.fd}"
        return (f"{(self.start - t0) / 1e3:9.1f} {(self.end - t0) / 1e3:9.1f}  "
                f"{self.name}[{self.pid}/{self.tid}] {what}")


def load(folder):
    processes = {}
    for path in glob.glob(os.path.join(folder, "timeline.*.bin")):
        with open(path, "rb") as f:
            header = f.read(64)
            if header[:4] != b"GBTL":
                continue
            (count,) = struct.unpack_from("<I", header, 8)
            (lost,) = struct.unpack_from("<i", header, 12)
            name = header[16:].split(b"\0", 1)[0].decode(errors="replace")
            pid = int(path.rsplit(".", 2)[1])
            body = f.read(count * RECORD.size)
        recs = [Rec(pid, name, RECORD.unpack_from(body, i * RECORD.size))
                for i in range(len(body) // RECORD.size)]
        if lost:
            print(f"{name}[{pid}]: {lost} records lost (buffer full)", file=sys.stderr)
        processes[pid] = Process(recs)
    return processes


def marks(processes, code):
    found = [r for recs in processes.values() for r in recs if r.op == "mark" and r.fd == code]
    return sorted(found, key=lambda r: r.start)


class Process(list):
    """One process's records, in the order their calls ended."""

    def __init__(self, recs):
        super().__init__(sorted(recs, key=lambda r: r.end))
        self.ends = [r.end for r in self]


def first(recs, after, pred):
    """The first record that ended at or after `after` and matches."""
    for i in range(bisect.bisect_left(recs.ends, after), len(recs)):
        if pred(recs[i]):
            return recs[i]
    return None


def last_before(recs, before, pred):
    """The last record that ended at or before `before` and matches."""
    for i in range(bisect.bisect_right(recs.ends, before) - 1, -1, -1):
        if pred(recs[i]):
            return recs[i]
    return None


def daemon_pid(processes):
    for pid, recs in processes.items():
        if recs and recs[0].name == "gpubrokerd":
            return pid
    return None


def got(r):
    return r.result > 0 and not r.folded


class Rows(dict):
    """A cut's samples by row, in µs, the rows in the order first added."""

    def add(self, key, ns):
        self.setdefault(key, []).append(ns / 1e3)


def seal_wait(processes, code, show=None):
    """Cuts each seal + wait (A's mark `code` .. B's OPENED mark) into hops."""
    daemon = daemon_pid(processes)
    if daemon is None:
        print("no gpubrokerd timeline: was the daemon started by the benchmark?")
        return {}
    dmn = processes[daemon]
    opened = marks(processes, OPENED)
    rows = Rows()
    add = rows.add

    for n, start in enumerate(marks(processes, code)):
        a = processes[start.pid]
        done = next((m for m in opened if m.start > start.start), None)
        if done is None:
            continue
        b = processes[done.pid]
        # A's frame to the daemon: its first send after the mark.
        sent = first(a, start.start, lambda r: r.op in SENDS and r.result > 0
                     and r.tid == start.tid and r.start >= start.start)
        # The daemon's wake: its first wait call that returned something
        # after A's frame went.
        woke = first(dmn, sent.start, lambda r: r.op in WAITS and got(r)) if sent else None
        # B's wake: the last wait call of B's (before its Open returned) that
        # returned something, and the daemon's last send before it.
        b_read = last_before(b, done.start, lambda r: r.op in READS and got(r)
                             and r.tid == done.tid)
        answer = last_before(dmn, (b_read or done).end, lambda r: r.op in SENDS and r.result > 0)
        b_woke = None
        if answer is not None and b_read is not None:
            b_woke = first(b, answer.start, lambda r: r.op in WAITS and got(r)
                           and r.tid == done.tid)
            if b_woke is not None and b_woke.end > b_read.end:
                b_woke = None
        frame = first(dmn, woke.end, lambda r: r.op in READS and got(r)) if woke else None
        if None in (sent, woke, answer, b_read, frame):
            continue
        if show is not None and n == show:
            print(f"seal + wait #{n}, mark {code}; µs from A's mark:")
            for recs in processes.values():
                for r in recs:
                    if r.end >= start.start - 5_000 and r.start <= done.end + 5_000:
                        print("  " + r.describe(start.start))
        add("A: mark -> its send call starts (fence, frame)", sent.start - start.start)
        add("A: its send call (waking the daemon)", sent.end - sent.start)
        add("daemon: slept in epoll_wait (1 = yes)",
            1e3 if woke.timeout != 0 and woke.start < sent.start else 0)
        add("daemon: A's send starts -> its epoll_wait returned", woke.end - sent.start)
        add("daemon: epoll_wait returned -> A's frame read", frame.end - woke.end)
        add("daemon: A's frame read -> its answer to B starts", answer.start - frame.end)
        # The daemon's own trace marks (common/trace.h), where it has them.
        steps = [frame]
        for code in (DECODED, SERVED, PARKED_ANSWER):
            m = first(dmn, steps[-1].end, lambda r, c=code: r.op == "mark" and r.fd == c
                      and r.tid == frame.tid)
            if m is None or m.end > answer.start:
                break
            steps.append(m)
        if len(steps) == 4:
            add("  of which: the frame decoded", steps[1].end - frame.end)
            add("  of which: the Publish served (registry, parked Open answered)",
                steps[2].end - steps[1].end)
            inside = [steps[1]]
            for code in (PUBLISH_BEGUN, PUBLISH_LOCKED, PUBLISH_STORED):
                m = first(dmn, inside[-1].end, lambda r, c=code: r.op == "mark" and r.fd == c
                          and r.tid == frame.tid)
                if m is None or m.end > steps[2].end:
                    break
                inside.append(m)
            if len(inside) == 4:
                add("    of which: to the registry (dispatch, the call's params)",
                    inside[1].end - inside[0].end)
                add("    of which: the lock, the session and the range found",
                    inside[2].end - inside[1].end)
                add("    of which: named, counted, carved, stored, leased",
                    inside[3].end - inside[2].end)
                add("    of which: the parked Open's grant, and back",
                    steps[2].end - inside[3].end)
            add("  of which: to the parked answer's frame", steps[3].end - steps[2].end)
            add("  of which: encoding it", answer.start - steps[3].end)
        add("daemon: its send call to B (waking B)", answer.end - answer.start)
        b_slept = b_woke is not None and b_woke.timeout != 0 and b_woke.start < answer.start
        add("B: slept in poll (1 = yes)", 1e3 if b_slept else 0)
        board_cut(a, b, start, sent, b_read, done, add)
        add("B: the daemon's send starts -> B's poll returned",
            (b_woke.end if b_slept else b_read.start) - answer.start)
        add("B: the daemon's send starts -> B read the answer", b_read.end - answer.start)
        add("B: read -> its Open returned (parse, map)", done.start - b_read.end)
        taken = first(b, b_read.end, lambda r: r.op == "mark" and r.fd == ANSWER_TAKEN
                      and r.tid == done.tid)
        mapped = first(b, b_read.end, lambda r: r.op == "mark" and r.fd == MAPPED
                       and r.tid == done.tid)
        if taken is not None and mapped is not None and mapped.end <= done.start:
            add("  of which: the answer taken in (parse, the call's return)",
                taken.end - b_read.end)
            add("  of which: the map", mapped.end - taken.end)
            add("  of which: the rest of Open", done.start - mapped.end)
        add("total: A's mark -> B's Open returned", done.start - start.start)
    return rows


def board_cut(a, b, start, sent, b_read, done, add):
    """The wake board's part of one seal + wait: did B sleep on the board
    rather than in poll, which word woke it and when, against A's seal; and
    A's look at the board (its wake of B, its Ahead frame to the daemon)."""
    # B's last sleep on the board before it read its answer. It belongs to
    # this seal + wait when it ended after A's mark (the sleep was on when A
    # sealed); one that ended before was another frame's wake.
    slept = last_before(b, b_read.end, lambda r: r.op in BOARD_SLEEPS and r.tid == done.tid
                        and r.result >= 0 and not r.folded)
    if slept is not None and slept.end < start.start:
        slept = None
    add("B: slept on the wake board (1 = yes)", 1e3 if slept else 0)
    if slept is None:
        return
    # futex_waitv returns the index of the word that woke it: 1 is the
    # call's (A's early wake), 0 the session's (the daemon wrote to B).
    by_call = slept.op == "futex_waitv" and slept.result == 1
    add("B: woken by its name's word, A's early wake (1 = yes)", 1e3 if by_call else 0)
    add("B: A's mark -> B's sleep on the board returned", slept.end - start.start)
    add("B: its sleep returned -> it read the answer", b_read.end - slept.end)
    woke = first(a, start.start, lambda r: r.op == "futex_wake" and r.tid == start.tid)
    if woke is not None and woke.end <= done.start:
        add("A: mark -> its wake of B returned (after its Ahead frame)", woke.end - start.start)
    if by_call and sent is not None:
        # With B asleep on the name, A's first frame after the mark is Ahead
        # and the seal's is the next one.
        seal = first(a, sent.end, lambda r: r.op in SENDS and r.result > 0 and r.tid == start.tid
                     and r.start >= sent.end)
        if seal is not None and seal.end <= done.start:
            add("A: mark -> the seal's frame sent (after Ahead)", seal.end - start.start)


def handover_seal(processes, code=HANDOVER_SEAL):
    """Cuts A's confirmed seal in the hand-over (mark `code` .. 16): whether it
    woke the daemon ahead of the seal's frame, and whether the daemon was
    awake by the time the frame went."""
    daemon = daemon_pid(processes)
    if daemon is None:
        return {}
    dmn = processes[daemon]
    ends = marks(processes, HANDOVER_SEALED)
    rows = Rows()
    add = rows.add

    for start in marks(processes, code):
        a = processes[start.pid]
        end = next((m for m in ends if m.start > start.start and m.pid == start.pid
                    and m.tid == start.tid), None)
        if end is None:
            continue
        sends = [r for r in a[bisect.bisect_left(a.ends, start.start):]
                 if r.end <= end.start and r.op in SENDS and r.result > 0 and r.tid == start.tid
                 and r.start >= start.start]
        if not sends:
            continue
        frame = sends[-1]  # the seal's; an Ahead before it
        woke = first(dmn, sends[0].start, lambda r: r.op in WAITS and got(r))
        read = first(dmn, frame.start, lambda r: r.op in READS and got(r))
        back = last_before(a, end.start, lambda r: r.op in READS and got(r) and r.tid == start.tid)
        answer = last_before(dmn, back.end, lambda r: r.op in SENDS and r.result > 0) if back \
            else None
        if None in (woke, read, back, answer) or answer.start < read.end:
            continue
        add("A: an Ahead frame before the seal's (1 = yes)", 1e3 if len(sends) > 1 else 0)
        add("A: mark -> its first send starts (the Ahead, or the seal's frame)",
            sends[0].start - start.start)
        add("A: mark -> the seal's frame sent", frame.end - start.start)
        add("daemon: slept in epoll_wait (1 = yes)",
            1e3 if woke.timeout != 0 and woke.start < sends[0].start else 0)
        add("daemon: A's first send starts -> its epoll_wait returned", woke.end - sends[0].start)
        add("daemon: awake when the seal's frame was sent (1 = yes)",
            1e3 if woke.end <= frame.end else 0)
        add("daemon: the seal's frame sent -> read", read.end - frame.end)
        add("daemon: read -> its answer to A starts", answer.start - read.end)
        add("A: the daemon's send starts -> A read the answer", back.end - answer.start)
        add("total: A's mark -> its seal returned", end.start - start.start)
    return rows


def ping(processes):
    rows = Rows()
    ends = marks(processes, PING_END)
    peer = next(iter(marks(processes, OPENED)), None)
    for start in marks(processes, PING):
        a = processes[start.pid]
        end = next((m for m in ends if m.start > start.start and m.pid == start.pid), None)
        if end is None:
            continue
        sent = first(a, start.start, lambda r: r.op in SENDS and r.result > 0
                     and r.tid == start.tid)
        back = last_before(a, end.start, lambda r: r.op in READS and got(r) and r.tid == start.tid)
        # B: the benchmark's peer, whose thread marks its opens.
        b_read = b_sent = None
        if peer is not None and sent is not None and back is not None:
            recs = processes[peer.pid]
            b_read = first(recs, sent.start, lambda r: r.op in READS and got(r)
                           and r.tid == peer.tid)
            if b_read is not None:
                b_sent = first(recs, b_read.end, lambda x: x.op in SENDS and x.result > 0
                               and x.tid == peer.tid)
        if b_read is None or b_sent is None or b_sent.end > back.end:
            continue
        for key, v in (("A: mark -> its send call starts", sent.start - start.start),
                       ("A: its send call (waking B)", sent.end - sent.start),
                       ("B: A's send starts -> B read it", b_read.end - sent.start),
                       ("B: read -> its send call starts", b_sent.start - b_read.end),
                       ("B: its send call (waking A)", b_sent.end - b_sent.start),
                       ("A: B's send starts -> A read it", back.end - b_sent.start),
                       ("total", end.start - start.start)):
            rows.add(key, v)
    return rows


def slow_calls(processes, over_us, show):
    """Every client call (a send, then its answer taken in: mark 110, on the
    same thread) that waited more than `over_us` for its answer, and under
    PARKED_US (longer ones are parked waits); the first `show` of them printed
    with every process's records around them. Returns the waits, in µs."""
    daemon = daemon_pid(processes)
    everything = sorted((r for recs in processes.values() for r in recs), key=lambda r: r.start)
    waits, shown = [], 0
    for pid, recs in processes.items():
        if pid == daemon:
            continue
        sent = {}  # by thread: its last send not answered yet
        for r in sorted(recs, key=lambda r: r.start):
            if r.op in SENDS and r.result > 0:
                sent[r.tid] = r  # a send before the answer replaces the one before it
                continue
            if r.op != "mark" or r.fd != ANSWER_TAKEN or r.tid not in sent:
                continue
            call = sent.pop(r.tid)
            wait = (r.start - call.end) / 1e3
            waits.append(wait)
            if over_us < wait < PARKED_US and shown < show:
                shown += 1
                print(f"--- a call of {call.name}[{pid}/{call.tid}] waited {wait:.1f} µs for its "
                      "answer; every process's records from 20 ms before (µs from its send):")
                for x in everything:
                    if call.start - 20_000_000 <= x.start <= r.end + 5_000_000 or (
                            x.start < call.start < x.end):  # fmt: skip
                        print(x.describe(call.start))
    return waits

def report(title, rows):
    if not rows:
        return
    n = len(next(iter(rows.values())))
    print(f"{title} ({n} iterations), p50 / p90 µs")
    for key, values in rows.items():
        values = sorted(values)
        p90 = values[min(len(values) - 1, int(len(values) * 0.9))]
        if "(1 = yes)" in key:
            print(f"  {key.replace(' (1 = yes)', '')}: {sum(1 for v in values if v) / len(values):.0%}")
        else:
            print(f"  {key:58s} {statistics.median(values):8.1f} {p90:8.1f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--show", type=int, help="print the records of this seal + wait")
    parser.add_argument("--require-board", action="store_true",
                        help="fail unless some seal + wait shows B asleep on the wake board "
                        "(that the library records the futex calls)")
    parser.add_argument("--slow-calls", type=float, metavar="US",
                        help="instead: the client calls whose answer took over US µs, the "
                        "first --show (default 3) of them with every process's records around")
    args = parser.parse_args()
    processes = load(args.folder)
    if not processes:
        sys.exit(f"no timeline.*.bin in {args.folder}")
    if args.slow_calls is not None:
        waits = slow_calls(processes, args.slow_calls, 3 if args.show is None else args.show)
        if not waits:
            sys.exit("no client call with its answer taken in: was the library loaded?")
        slow = sum(args.slow_calls < w < PARKED_US for w in waits)
        parked = sum(w >= PARKED_US for w in waits)
        print(f"{len(waits)} calls, p50 {statistics.median(waits):.1f} µs; {slow} over "
              f"{args.slow_calls:g} µs, {parked} parked ({PARKED_US:g} µs or more)")
        return
    cut = [seal_wait(processes, SEAL, args.show), seal_wait(processes, SEAL_POSTED, args.show),
           ping(processes)]
    report("seal + wait, A's seal confirmed", cut[0])
    report("seal + wait, A's seal posted", cut[1])
    report("round trip after 2 ms idle", cut[2])
    # B waiting awake: the CUDA benchmark's case (the host one has none).
    awake = seal_wait(processes, SEAL_AWAKE, args.show)
    if awake:
        report("seal + wait, B waiting awake (Open(wait) with awake)", awake)
    daemon_awake = seal_wait(processes, SEAL_DAEMON_AWAKE, args.show)
    if daemon_awake:
        report("seal + wait, the daemon awake for B, B asleep (daemon_awake)", daemon_awake)
    report("the hand-over's confirmed seal, B opening after it", handover_seal(processes))
    report("the same, A working 2 ms between its Allocate and its seal",
           handover_seal(processes, HANDOVER_SEAL_AFTER_WORK))
    if not all(cut):
        sys.exit("some cases had no iteration to cut: was this a gpubroker-bench run, "
                 "with the library loaded in every process?")
    if args.require_board and not any(
            cut[0].get("B: slept on the wake board (1 = yes)", [])):
        sys.exit("no seal + wait shows B asleep on the wake board: were its futex calls "
                 "recorded, and GPUBROKER_WAKE_BOARD not 0?")


if __name__ == "__main__":
    main()
