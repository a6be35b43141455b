"""A gpubroker client in plain Python: stubs generated from proto/ and the
standard library, no gpubroker library. It is what a client in any language
does (docs/grpc-clients.md):

1. connect to session.sock, send Hello, receive Welcome: the session id and
   the token (the connection *is* the session: it ends when this socket
   closes, however the process dies);
2. call gpubroker.v1.Broker on gpubroker.sock with the token in the
   "gpubroker-token" metadata;
3. fetch the descriptor of a buffer's pool (or of the buffer) on session.sock
   (FdRequest; the fd arrives by SCM_RIGHTS with the FdGrant frame) and map it.

Host buffers are mapped with mmap here; a CUDA client imports the same
descriptors with the CUDA driver API instead (the import kinds in broker.proto).

Needs the generated modules on sys.path (generate.sh writes them):
gpubroker.v1.broker_pb2, broker_pb2_grpc, session_pb2, grpc_health.v1.health_pb2.
"""

import array
import mmap
import os
import socket
import struct

import grpc
from gpubroker.v1 import broker_pb2, broker_pb2_grpc, session_pb2

PROTOCOL_VERSION = 1
MAX_FRAME_BYTES = 64 * 1024
TOKEN_METADATA_KEY = "gpubroker-token"


def default_socket_dir():
    """Where gpubrokerd listens unless told otherwise (as the C++ client decides)."""
    if os.environ.get("GPUBROKER_SOCKET_DIR"):
        return os.environ["GPUBROKER_SOCKET_DIR"]
    if os.geteuid() == 0:
        return "/run/gpubroker"
    return os.path.join(os.environ.get("XDG_RUNTIME_DIR", "/tmp"), "gpubroker")


class SessionError(Exception):
    """The daemon answered a session.sock request with an ErrorFrame."""

    def __init__(self, error_frame):
        names = {c.value[0]: c.name for c in grpc.StatusCode}
        super().__init__(f"{names.get(error_frame.code, error_frame.code)}: {error_frame.message}")
        self.code = error_frame.code  # a gRPC status code number
        self.message = error_frame.message
        self.reason = error_frame.reason  # a broker_pb2.RefusalReason


def refusal_reason(rpc_error):
    """Why a gRPC call was refused with RESOURCE_EXHAUSTED: REFUSAL_REASON_QUOTA,
    _OUT_OF_MEMORY or _LIMIT, read from the grpc-status-details-bin trailer
    (an RpcStatus, wire-compatible with google.rpc.Status, whose details hold a
    gpubroker.v1.ErrorInfo); REFUSAL_REASON_UNSPECIFIED when there is none."""
    for key, value in rpc_error.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        for detail in broker_pb2.RpcStatus.FromString(value).details:
            info = broker_pb2.ErrorInfo()
            if detail.Unpack(info):
                return info.reason
    return broker_pb2.REFUSAL_REASON_UNSPECIFIED


class Session:
    """One session: the session.sock connection, its token and a gRPC channel."""

    def __init__(self, socket_dir=None, client_name="python-grpc", timeout=10.0):
        self.socket_dir = socket_dir or default_socket_dir()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        self._sock.connect(os.path.join(self.socket_dir, "session.sock"))
        self._buffer = b""
        self._fds = []  # descriptors received, in order; each belongs to one FdGrant
        self._next_request = 1
        hello = session_pb2.SessionFrame()
        hello.hello.protocol_version = PROTOCOL_VERSION
        hello.hello.client_name = client_name
        self._send(hello)
        reply = self._receive()
        if reply.HasField("error"):
            raise SessionError(reply.error)
        if not reply.HasField("welcome"):
            raise RuntimeError(f"the daemon answered Hello with {reply.WhichOneof('body')}")
        self.welcome = reply.welcome
        self.token = reply.welcome.token.hex()  # 32 lowercase hex digits
        self.channel = grpc.insecure_channel("unix:" + os.path.join(self.socket_dir,
                                                                    "gpubroker.sock"))
        self.broker = broker_pb2_grpc.BrokerStub(self.channel)

    @property
    def metadata(self):
        """What every Broker call carries."""
        return ((TOKEN_METADATA_KEY, self.token),)

    def call(self, method, request, timeout=30.0):
        """self.call("Allocate", broker_pb2.AllocateRequest(size=4096))."""
        return getattr(self.broker, method)(request, metadata=self.metadata, timeout=timeout)

    def call_on_socket(self, method, request):
        """A data-path call on session.sock instead of gRPC (the same messages,
        answered by the same code, without gRPC's per-call cost): method is
        "allocate" (below Welcome.quick_allocation_limit, no share_with), "open"
        (without wait), "seal" or "release". Raises SessionError on refusal."""
        frame = session_pb2.SessionFrame()
        frame.call.request_id = self._next_request
        self._next_request += 1
        getattr(frame.call, method).CopyFrom(request)
        self._send(frame)
        reply = self._receive()
        if reply.HasField("error"):
            raise SessionError(reply.error)
        if not reply.HasField("reply"):
            raise RuntimeError(f"the daemon answered a Call with {reply.WhichOneof('body')}")
        return getattr(reply.reply, method)

    def request_fd(self, region_id=0, buffer_id=0):
        """The descriptor of a region of this tenant (a host arena, a GPU slab,
        pool or fence page) or of a leased buffer: (FdGrant, fd). The caller
        owns the fd (close it once it is mapped)."""
        frame = session_pb2.SessionFrame()
        frame.fd_request.request_id = self._next_request
        self._next_request += 1
        if region_id:
            frame.fd_request.region_id = region_id
        else:
            frame.fd_request.buffer_id = buffer_id
        self._send(frame)
        reply = self._receive()
        if reply.HasField("error"):
            raise SessionError(reply.error)
        if not reply.HasField("fd_grant"):
            raise RuntimeError(f"the daemon answered FdRequest with {reply.WhichOneof('body')}")
        return reply.fd_grant, self._fds.pop(0)

    def map(self, import_descriptor, buffer_id):
        """A host buffer's memory as a writable memoryview (mmap of the pool or
        buffer fd). The mapping stays valid after the fd is closed."""
        kind = import_descriptor.kind
        if kind == broker_pb2.IMPORT_KIND_HOST_ARENA:
            grant, fd = self.request_fd(region_id=import_descriptor.region_id)
            offset = import_descriptor.offset
        elif kind == broker_pb2.IMPORT_KIND_HOST_FD:
            grant, fd = self.request_fd(buffer_id=buffer_id)
            offset = 0
        else:
            raise NotImplementedError(
                f"import kind {broker_pb2.ImportKind.Name(kind)} is a CUDA buffer: import it "
                "with the CUDA driver API (docs/grpc-clients.md)")
        try:
            if offset + import_descriptor.mapped_size > grant.size:
                raise RuntimeError("the buffer lies outside its pool")
            # mmap wants a page-aligned offset; arena offsets are.
            m = mmap.mmap(fd, import_descriptor.mapped_size, mmap.MAP_SHARED,
                          mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
        finally:
            os.close(fd)
        return m

    def close(self):
        """Ends the session on purpose (counted as "closed", not "died")."""
        if self._sock is None:
            return
        bye = session_pb2.SessionFrame()
        bye.goodbye.reason = "done"
        try:
            self._send(bye)
        except OSError:
            pass
        self._sock.close()
        self._sock = None
        self.channel.close()
        for fd in self._fds:
            os.close(fd)
        self._fds = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # Frames: a 4-byte little-endian length, then one serialized SessionFrame.
    def _send(self, frame):
        body = frame.SerializeToString()
        self._sock.sendall(struct.pack("<I", len(body)) + body)

    def _receive(self):
        while True:
            if len(self._buffer) >= 4:
                (length,) = struct.unpack_from("<I", self._buffer)
                if length > MAX_FRAME_BYTES:
                    raise RuntimeError(f"frame of {length} bytes from the daemon")
                if len(self._buffer) >= 4 + length:
                    frame = session_pb2.SessionFrame.FromString(self._buffer[4:4 + length])
                    self._buffer = self._buffer[4 + length:]
                    return frame
            fds = array.array("i")
            data, ancdata, _, _ = self._sock.recvmsg(65536, socket.CMSG_SPACE(4 * fds.itemsize))
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
            self._fds.extend(fds)
            if not data:
                raise ConnectionError("gpubrokerd closed the session")
            self._buffer += data
