"""Misuses of the package that its hints must make mypy refuse: each line
marked ``# error`` must be reported, and no other (test_typing.py). A hint
that fell back to Any would let its line pass. Never run, only checked."""

import gpubroker


def misuse(client: gpubroker.Client, buf: gpubroker.Buffer) -> None:
    client.allocate("64")  # error
    client.allocate(64, keep="yes")  # error
    client.allocate(64, name=5)  # error
    client.open(1.5)  # error
    client.open("x", wait=1.0, timeout="soon")  # error
    client.claim("not bytes")  # error
    client.free(None)  # error
    size: str = buf.nbytes  # error
    name: int = buf.name  # error
    shape: tuple[str, ...] = buf.shape  # error
    sealed: str = buf.is_sealed  # error
    ticket: str = buf.ticket()  # error
    published: str = buf.publish()  # error
    tenant: int = buf.info().tenant  # error
    sessions: str = client.status().sessions  # error
    listed: int = client.list()  # error
    buf.seal(posted=1.0)  # error
    buf.wait_sealed(awake="now")  # error
    gpubroker.connect(3)  # error
    gpubroker.nonexistent()  # error
    del size, name, shape, sealed, ticket, published, tenant, sessions, listed
