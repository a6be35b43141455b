"""python -m gpubroker: ls, status, cat NAME."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import List, Optional

from . import Buffer, Client, Error, connect


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _ls(client: Client, args: argparse.Namespace) -> None:
    buffers = client.list()
    if args.json:
        print(json.dumps([asdict(b) for b in buffers], indent=2))
        return
    print(f"{'ID':>6}  {'NAME':<28} {'SIZE':>10}  {'TENSOR':<24} {'STATE':<9} {'LEASES':>6}  BACKING")
    for b in buffers:
        tensor = f"{b.dtype}{list(b.shape)}" if b.shape is not None else "-"
        print(f"{b.id:>6}  {b.name or '-':<28} {_size(b.size):>10}  {tensor:<24} "
              f"{b.state:<9} {b.leases:>6}  {b.backing}")  # fmt: skip


def _status(client: Client, args: argparse.Namespace) -> None:
    s = client.status()
    if args.json:
        print(json.dumps(s.raw, indent=2))
        return
    print(f"gpubrokerd {s.version}, backend {s.backend}, {s.sessions} sessions, "
          f"{s.buffers} buffers; this session {s.session_id} (tenant {s.tenant})")  # fmt: skip
    for d in s.devices:
        print(f"  device {d.ordinal} {d.uuid} ({d.name}): {_size(d.used_bytes)} used of "
              f"{_size(d.capacity_bytes)}, {d.buffers} buffers")  # fmt: skip
    for t in s.tenants:
        quota = _size(t.quota_bytes) if t.quota_bytes else "unlimited"
        print(f"  tenant {t.name}: {_size(t.used_bytes)} of {quota}, {t.buffers} buffers, "
              f"{t.sessions} sessions")  # fmt: skip


def _first_values(buf: Buffer, count: int) -> Optional[List[object]]:
    """The first `count` elements in memory order, or None when no framework can read them."""
    try:
        import numpy
    except ImportError:
        return None
    if buf.is_cuda:
        try:
            import cupy

            a = buf.as_cupy()
            flat = a.reshape(-1)[:count] if a.flags.c_contiguous else a.ravel()[:count]
            values: List[object] = cupy.asnumpy(flat).tolist()
            return values
        except ImportError:
            pass
        try:
            a = buf.as_torch()
            values = a.reshape(-1)[:count].cpu().tolist()
            return values
        except ImportError:
            return None
    try:
        a = buf.as_numpy()
    except TypeError:  # bfloat16 without ml_dtypes
        a = numpy.asarray(buf).view(numpy.uint16)
    values = numpy.asarray(a).reshape(-1)[:count].tolist()
    return values


def _cat(client: Client, args: argparse.Namespace) -> None:
    key = int(args.name) if args.name.isdigit() else args.name
    with client.open(key, wait=args.wait is not None, timeout=args.wait) as buf:
        desc = {
            "name": buf.name, "id": buf.id, "nbytes": buf.nbytes, "device": buf.device,
            "dtype": buf.dtype, "shape": buf.shape, "strides": buf.strides,
            "byte_offset": buf.byte_offset, "sealed": buf.is_sealed,
        }  # fmt: skip
        values = _first_values(buf, args.count)
        if args.json:
            print(json.dumps({**desc, "values": values}))
            return
        tensor = f"{buf.dtype}{list(buf.shape)}" if buf.shape is not None else "bytes"
        print(f"{buf.name or '(unnamed)'} (id {buf.id}): {tensor}, {_size(buf.nbytes)} on "
              f"{buf.device}, strides {buf.strides}, byte offset {buf.byte_offset}, "
              f"{'sealed' if buf.is_sealed else 'not sealed'}")  # fmt: skip
        if values is None:
            print("  (reading the values needs numpy, and cupy or torch for GPU memory)")
        else:
            print(f"  first {len(values)}: {values}")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpubroker", description=__doc__)
    p.add_argument("--socket-dir", help="the daemon's socket directory "
                   "(default: $GPUBROKER_SOCKET_DIR, else the daemon's default)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("ls", help="the buffers this tenant may see")
    sub.add_parser("status", help="version, devices, pools, tenants, sessions")
    c = sub.add_parser("cat", help="a buffer's descriptor and first values")
    c.add_argument("name", help="name (tenant/name for another tenant's share) or id")
    c.add_argument("-n", "--count", type=int, default=16, help="values to print (16)")
    c.add_argument("--wait", type=float, metavar="SECONDS", help="wait for it to be sealed")
    args = p.parse_args(argv)
    try:
        with connect(args.socket_dir) as client:
            {"ls": _ls, "status": _status, "cat": _cat}[args.command](client, args)
    except Error as e:
        print(f"gpubroker: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
