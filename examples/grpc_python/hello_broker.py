#!/usr/bin/python3
"""A gpubroker client from stubs generated out of proto/ (generate.sh) and the
standard library: `hello_broker.py` leaves a sealed host buffer named
"greeting", `hello_broker.py read` waits for it and prints it. Walked through
in docs/grpc-clients.md."""
import mmap
import os
import socket
import sys

import grpc
from gpubroker.v1 import broker_pb2, broker_pb2_grpc, session_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

SOCKET_DIR = os.environ.get("GPUBROKER_SOCKET_DIR", "/run/gpubroker")
READER = sys.argv[1:] == ["read"]


def send(sock, **frame):
    body = session_pb2.SessionFrame(**frame).SerializeToString()
    sock.sendall(len(body).to_bytes(4, "little") + body)


def receive(sock):
    """One frame (4-byte little-endian length, then a SessionFrame) and the
    descriptors that came with it (SCM_RIGHTS)."""
    data, fds = b"", []
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "little"):
        chunk, more_fds, _, _ = socket.recv_fds(sock, 65536, 1)
        if not chunk:
            raise ConnectionError("gpubrokerd ended the session")
        data, fds = data + chunk, fds + more_fds
    frame = session_pb2.SessionFrame.FromString(data[4:4 + int.from_bytes(data[:4], "little")])
    if frame.HasField("error"):
        raise RuntimeError(f"gpubrokerd: {frame.error.message} (gRPC code {frame.error.code})")
    return frame, fds


# Without a session: health and the node's totals.
channel = grpc.insecure_channel(f"unix:{SOCKET_DIR}/gpubroker.sock")
health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
broker = broker_pb2_grpc.BrokerStub(channel)
node = broker.Status(broker_pb2.StatusRequest(), timeout=5)
print(health_pb2.HealthCheckResponse.ServingStatus.Name(health.status), node.backend,
      f"{node.sessions} sessions")

# A session: Hello on session.sock, Welcome with the token. The connection is
# the session: when it closes, however this process ends, the daemon reclaims.
session = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
session.connect(f"{SOCKET_DIR}/session.sock")
send(session, hello=session_pb2.Hello(protocol_version=1, client_name="hello_broker.py"))
welcome = receive(session)[0].welcome
token = (("gpubroker-token", welcome.token.hex()),)  # 32 lowercase hex digits
print(f"session {welcome.session_id}, tenant {welcome.tenant}")

# Every Broker call of the session carries the token. A reader's Open waits
# on gRPC (session.sock serves only calls that never block).
if READER:
    r = broker.Open(broker_pb2.OpenRequest(ref=broker_pb2.BufferRef(name="greeting"), wait=True,
                                           timeout_ms=30000), metadata=token, timeout=40)
else:
    r = broker.Allocate(broker_pb2.AllocateRequest(size=4096, name="greeting", keep=True),
                        metadata=token, timeout=10)
where = getattr(r, "import")  # "import" is a keyword in Python
assert where.kind == broker_pb2.IMPORT_KIND_HOST_ARENA, "a GPU buffer: see docs/grpc-clients.md"

# The memory: the arena's descriptor, asked for on session.sock.
send(session, fd_request=session_pb2.FdRequest(request_id=1, region_id=where.region_id))
reply, (fd,) = receive(session)  # reply.fd_grant: its kind, size, device
memory = mmap.mmap(fd, where.mapped_size, offset=where.offset)
os.close(fd)  # the mapping holds the memory
if READER:
    print(f"buffer {r.buffer.id} says: {memory[:17].decode()}")
else:
    memory[:17] = b"hello from Python"
    broker.Seal(broker_pb2.SealRequest(id=r.buffer.id), metadata=token, timeout=10)
    print(f"buffer {r.buffer.id} '{r.buffer.name}' sealed on {reply.fd_grant.device_uuid}")

# Unmap before the lease goes. keep=True leaves the buffer for its readers.
memory.close()
broker.Release(broker_pb2.ReleaseRequest(id=r.buffer.id), metadata=token, timeout=10)
send(session, goodbye=session_pb2.Goodbye(reason="done"))
session.close()
