"""Buffers pickled across processes: the ticket's claim on the receiving
side, and this process's clients by the daemon they reach."""

from __future__ import annotations

import os
import stat
import threading
import weakref
from ctypes import byref, c_void_p, string_at
from typing import TYPE_CHECKING, Dict, List, Optional

from . import _fork, _lib

if TYPE_CHECKING:
    from ._buffer import Buffer
    from ._client import Client

_SYSTEM_SOCKET_DIR = "/run/gpubroker"

# This process's live Clients by the socket directory they reach (resolved:
# symlinks and spellings of one directory are one key), the latest last.
_clients: Dict[str, List["weakref.ref[Client]"]] = {}
_lock = threading.Lock()
_connecting = threading.Lock()  # one Client made for tickets per process at a time
# A ticket's socket directory (as its producer's library wrote it) -> key.
_keys: Dict[bytes, str] = {}
_KEYS_MAX = 64


def _serves(socket_dir: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(os.path.join(socket_dir, "session.sock")).st_mode)
    except OSError:
        return False


def resolve(socket_dir: Optional[str]) -> str:
    """The directory a Client connected with `socket_dir` reaches, as
    libgpubroker picks it (common/paths.cc, ClientSocketDir), symlinks resolved."""
    d = socket_dir or os.environ.get("GPUBROKER_SOCKET_DIR")
    if not d:
        if os.geteuid() == 0:
            d = _SYSTEM_SOCKET_DIR
        else:
            xdg = os.environ.get("XDG_RUNTIME_DIR")
            d = f"{xdg}/gpubroker" if xdg else f"/tmp/gpubroker-{os.geteuid()}"
            if not _serves(d) and _serves(_SYSTEM_SOCKET_DIR):
                d = _SYSTEM_SOCKET_DIR
    return os.path.realpath(d)


def register(client: "Client", key: str) -> None:
    """Makes `client` the one that claims this process's pickled Buffers of
    its daemon (until it is closed or gone)."""
    with _lock:
        refs = [r for r in _clients.get(key, ()) if r() is not None]
        refs.append(weakref.ref(client))
        _clients[key] = refs


def _usable(c: Optional["Client"]) -> bool:
    # A Client connected before fork() is the parent's; a closed one serves no call.
    return (c is not None and c._generation == _fork.generation and not c._closing
            and c._h is not None)  # fmt: skip


def _find(key: str) -> Optional["Client"]:
    with _lock:
        for r in reversed(_clients.get(key, ())):
            c = r()
            if _usable(c):
                return c
    return None


def socket_dir(ticket: bytes) -> bytes:
    """The socket directory of the daemon that made the ticket."""
    lib = _lib.load()
    if not lib.has_tickets:
        from ._buffer import _no_tickets

        raise _no_tickets(lib)
    out = c_void_p()
    rc = lib.ticket_socket_dir(ticket, len(ticket), byref(out))
    if rc:
        raise lib.error(rc)
    try:
        return string_at(_lib.written(out))
    finally:
        lib.string_free(out)


def client_for(ticket: bytes) -> "Client":
    """This process's Client of the ticket's daemon: a live one made here,
    else a new one (kept alive by the Buffers claimed on it)."""
    raw = socket_dir(ticket)
    key = _keys.get(raw)
    if key is None:
        if len(_keys) >= _KEYS_MAX:
            _keys.clear()
        key = _keys[raw] = resolve(raw.decode())
    c = _find(key)
    if c is not None:
        return c
    with _connecting:
        c = _find(key)
        if c is None:
            from ._client import Client

            c = Client(raw.decode())  # registers itself
        return c


def claim_pickled(ticket: bytes) -> "Buffer":
    """Unpickles a Buffer: claims its ticket, posted (the answer is taken at
    the Buffer's first use, which raises a refusal), on this process's client
    of the ticket's daemon."""
    client = client_for(ticket)
    buf = client.claim(ticket, posted=True)
    buf._client = client  # keeps a Client made for it alive as long as the buffer
    return buf


def _after_fork_in_child() -> None:
    # The parent's Clients serve no call here, and a lock held by another
    # thread at fork() would never be let go.
    global _lock, _connecting
    _lock, _connecting = threading.Lock(), threading.Lock()
    _clients.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

