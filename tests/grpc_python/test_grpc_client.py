#!/usr/bin/python3
"""A client in another language, end to end: Python stubs generated from proto/
(examples/grpc_python/generate.sh, with the generator named by
$GPUBROKER_STUB_GENERATOR), the example client over them, a real gpubrokerd
and a real C++ client process sharing buffers with it.

  GPUBROKER_BIN_DIR=build/bin GPUBROKER_STUB_GENERATOR=protoc \\
      /usr/bin/python3 tests/grpc_python/test_grpc_client.py
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("GPUBROKER_BIN_DIR", os.path.join(ROOT, "build", "bin"))
GENERATOR = os.environ.get("GPUBROKER_STUB_GENERATOR", "protoc")

STUBS = tempfile.mkdtemp(prefix="gpubroker-stubs-")
subprocess.run([os.path.join(ROOT, "examples", "grpc_python", "generate.sh"), STUBS, GENERATOR],
               check=True)
sys.path[:0] = [STUBS, os.path.join(ROOT, "examples", "grpc_python")]

import grpc  # noqa: E402
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402
from gpubroker.v1 import broker_pb2  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

import gpubroker_grpc  # noqa: E402

MiB = 1 << 20


def pattern(n, seed):
    """The C++ helper's fill pattern (tests/integration/helper_memory.h)."""
    period = bytes(((i * 131 + seed * 7 + 1) & 0xFF) for i in range(256))
    return (period * (n // 256 + 1))[:n]


class Daemon:
    def __init__(self, *flags):
        self.dir = tempfile.mkdtemp(prefix="gpubroker-py-")
        os.chmod(self.dir, 0o755)
        self.log = open(os.path.join(self.dir, "gpubrokerd.log"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "gpubrokerd"), "--socket-dir", self.dir, "--backend", "host",
             "--host-pool-bytes", "256MiB", "--metrics-address", "127.0.0.1:0", *flags],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.start_line = self.proc.stdout.readline()
        if "sockets" not in self.start_line:
            raise RuntimeError(f"gpubrokerd did not start: {self.start_line!r}")

    def channel(self):
        return grpc.insecure_channel("unix:" + os.path.join(self.dir, "gpubroker.sock"))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=20)
        self.proc.stdout.close()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return code


class Helper:
    """gpubroker-test-helper: the C++ client library in a process of its own."""

    def __init__(self, socket_dir):
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "gpubroker-test-helper"), "--socket-dir", socket_dir],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self.proc.stdout.readline()
        assert ready.startswith("ok ready"), ready

    def send(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self):
        self.send("exit")
        self.proc.wait(timeout=20)
        self.proc.stdin.close()
        self.proc.stdout.close()


def reflection_messages():
    """grpc.reflection.v1alpha's messages, declared here (proto/ does not
    carry them): the fields that list services and fetch descriptors."""
    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="test/reflection.proto",
                                           package="grpc.reflection.v1alpha", syntax="proto3")

    def message(name, *fields, oneof=None):
        m = f.message_type.add(name=name)
        if oneof:
            m.oneof_decl.add(name=oneof)
        for number, field, kind, extra in fields:
            d = m.field.add(name=field, number=number, type=kind, label=F.LABEL_OPTIONAL)
            if extra == "repeated":
                d.label = F.LABEL_REPEATED
            elif extra == "oneof":
                d.oneof_index = 0
            if isinstance(extra, str) and extra.startswith("."):
                d.type_name = extra
        return m

    message("ServerReflectionRequest", (1, "host", F.TYPE_STRING, None),
            (4, "file_containing_symbol", F.TYPE_STRING, "oneof"),
            (7, "list_services", F.TYPE_STRING, "oneof"), oneof="message_request")
    message("FileDescriptorResponse", (1, "file_descriptor_proto", F.TYPE_BYTES, "repeated"))
    message("ServiceResponse", (1, "name", F.TYPE_STRING, None))
    services = message("ListServiceResponse",
                       (1, "service", F.TYPE_MESSAGE, ".grpc.reflection.v1alpha.ServiceResponse"))
    services.field[0].label = F.LABEL_REPEATED
    message("ErrorResponse", (1, "error_code", F.TYPE_INT32, None),
            (2, "error_message", F.TYPE_STRING, None))
    response = message(
        "ServerReflectionResponse",
        (4, "file_descriptor_response", F.TYPE_MESSAGE,
         ".grpc.reflection.v1alpha.FileDescriptorResponse"),
        (6, "list_services_response", F.TYPE_MESSAGE,
         ".grpc.reflection.v1alpha.ListServiceResponse"),
        (7, "error_response", F.TYPE_MESSAGE, ".grpc.reflection.v1alpha.ErrorResponse"),
        oneof="message_response")
    for field in response.field:
        field.oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_classes(pool, "grpc.reflection.v1alpha.ServerReflectionRequest",
                           "grpc.reflection.v1alpha.ServerReflectionResponse")


def message_classes(pool, *names):
    factory = message_factory.MessageFactory(pool)
    get = getattr(message_factory, "GetMessageClass", None)
    return [get(pool.FindMessageTypeByName(n)) if get else
            factory.GetPrototype(pool.FindMessageTypeByName(n)) for n in names]


def reflect(channel, *requests):
    Request, Response = reflection_messages()
    call = channel.stream_stream(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        request_serializer=Request.SerializeToString, response_deserializer=Response.FromString)
    return list(call(iter([Request(**r) for r in requests]), timeout=10))


class GrpcClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon("--grpc-reflection", "--default-quota", "64MiB")

    @classmethod
    def tearDownClass(cls):
        assert cls.daemon.stop() == 0

    def node_used_bytes(self):
        with self.daemon.channel() as ch:
            s = gpubroker_grpc.broker_pb2_grpc.BrokerStub(ch).Status(broker_pb2.StatusRequest(),
                                                                     timeout=10)
            return s.devices[0].used_bytes

    def test_health_needs_no_token_and_comes_from_an_importable_module(self):
        with self.daemon.channel() as ch:
            health = health_pb2_grpc.HealthStub(ch)
            for service in ("", "gpubroker.v1.Broker"):
                r = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
                self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING, service)

    def test_status_without_a_token_is_the_node_totals(self):
        with self.daemon.channel() as ch:
            stub = gpubroker_grpc.broker_pb2_grpc.BrokerStub(ch)
            s = stub.Status(broker_pb2.StatusRequest(), timeout=10)
            self.assertEqual(s.backend, "host")
            self.assertEqual(len(s.devices), 1)
            self.assertEqual(len(s.tenants), 0)
            self.assertFalse(s.HasField("self"))
            with self.assertRaises(grpc.RpcError) as e:
                stub.List(broker_pb2.ListRequest(), timeout=10)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
            with self.assertRaises(grpc.RpcError) as e:
                stub.Status(broker_pb2.StatusRequest(), timeout=10,
                            metadata=(("gpubroker-token", "0" * 32),))
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)

    def test_a_session_gets_its_token_and_sees_itself(self):
        with gpubroker_grpc.Session(self.daemon.dir) as session:
            self.assertRegex(session.token, "^[0-9a-f]{32}$")
            s = session.call("Status", broker_pb2.StatusRequest())
            self.assertEqual(s.self.session_id, session.welcome.session_id)
            self.assertEqual(s.self.pid, os.getpid())
            self.assertEqual(s.self.tenant, session.welcome.tenant)
            self.assertIn(session.welcome.tenant, [t.name for t in s.tenants])

    def test_python_writes_cpp_reads_and_its_write_back_is_seen_here(self):
        helper = Helper(self.daemon.dir)
        with gpubroker_grpc.Session(self.daemon.dir) as session:
            req = broker_pb2.AllocateRequest(size=MiB, name="py.frame")
            req.tensor.dtype = broker_pb2.DTYPE_FLOAT32
            req.tensor.shape.extend([512, 512])
            r = session.call("Allocate", req)
            self.assertEqual(r.buffer.name, "py.frame")
            descriptor = getattr(r, "import")  # a keyword in Python
            self.assertEqual(descriptor.kind, broker_pb2.IMPORT_KIND_HOST_ARENA)
            memory = session.map(descriptor, r.buffer.id)
            memory[:MiB] = pattern(MiB, 5)
            sealed = session.call("Seal", broker_pb2.SealRequest(id=r.buffer.id))
            self.assertEqual(sealed.buffer.state, broker_pb2.BUFFER_STATE_SEALED)

            opened = helper.send("open y py.frame")
            self.assertTrue(opened.startswith("ok"), opened)
            self.assertIn("float32:512x512", opened)
            self.assertEqual(helper.send("check y 5"), "ok")
            self.assertEqual(helper.send("poke y 4097 201"), "ok")
            self.assertEqual(memory[4097], 201, "the C++ process's write is not seen here")

            session.call("Release", broker_pb2.ReleaseRequest(id=r.buffer.id, free=True))
            memory.close()
            # The C++ reader's lease keeps the memory until it lets go.
            self.assertEqual(helper.send("peek y 4097"), "ok 201")
            self.assertEqual(helper.send("release y"), "ok")
        helper.close()

    def test_python_opens_by_name_what_cpp_made(self):
        helper = Helper(self.daemon.dir)
        result = {}

        def wait_for_it():
            with gpubroker_grpc.Session(self.daemon.dir) as session:
                r = session.call("Open", broker_pb2.OpenRequest(
                    ref=broker_pb2.BufferRef(name="cpp.made"), wait=True, timeout_ms=20000))
                m = session.map(getattr(r, "import"), r.buffer.id)
                result["same"] = bytes(m[:r.buffer.size]) == pattern(r.buffer.size, 9)
                result["size"] = r.buffer.size
                m.close()
                session.call("Release", broker_pb2.ReleaseRequest(id=r.buffer.id))

        waiter = threading.Thread(target=wait_for_it)
        waiter.start()
        time.sleep(0.3)
        self.assertTrue(waiter.is_alive(), "Open(wait) returned before the buffer existed")
        self.assertTrue(helper.send("alloc x 200000 name=cpp.made").startswith("ok"))
        self.assertEqual(helper.send("fill x 9"), "ok")
        self.assertEqual(helper.send("seal x"), "ok")
        waiter.join(timeout=20)
        self.assertEqual(result, {"same": True, "size": 200000})
        helper.close()

    def test_the_documented_listing_is_the_example_and_it_runs(self):
        listing = os.path.join(ROOT, "examples", "grpc_python", "hello_broker.py")
        with open(listing) as f:
            code = f.read()
        with open(os.path.join(ROOT, "docs", "grpc-clients.md")) as f:
            doc = f.read()
        self.assertTrue("```python\n" + code + "```\n" in doc,
                        "docs/grpc-clients.md must show examples/grpc_python/hello_broker.py as is")

        env = dict(os.environ, GPUBROKER_SOCKET_DIR=self.daemon.dir,
                   PYTHONPATH=os.pathsep.join([STUBS, os.environ.get("PYTHONPATH", "")]))
        reader = subprocess.Popen(["/usr/bin/python3", listing, "read"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(0.5)
        self.assertIsNone(reader.poll(), "the reader did not wait for the buffer")
        writer = subprocess.run(["/usr/bin/python3", listing], env=env, capture_output=True,
                                text=True, timeout=60)
        self.assertEqual(writer.returncode, 0, writer.stderr)
        lines = writer.stdout.splitlines()
        self.assertRegex(lines[0], r"^SERVING host \d+ sessions$")
        self.assertRegex(lines[1], r"^session \d+, tenant \S+$")
        self.assertRegex(lines[2], r"^buffer \d+ 'greeting' sealed on host$")
        out, _ = reader.communicate(timeout=60)
        self.assertEqual(reader.returncode, 0, out)
        self.assertIn("says: hello from Python", out)

        # Both sessions said goodbye; the kept buffer stays, and a C++ reader sees the bytes.
        helper = Helper(self.daemon.dir)
        self.assertTrue(helper.send("open g greeting").startswith("ok"))
        self.assertEqual(helper.send("peek g 0"), f"ok {ord('h')}")
        self.assertEqual(helper.send("peek g 16"), f"ok {ord('n')}")
        self.assertEqual(helper.send("release g"), "ok")
        self.assertTrue(helper.send("free greeting").startswith("ok"))
        helper.close()

    def test_refusals_carry_grpc_codes(self):
        with gpubroker_grpc.Session(self.daemon.dir) as session:
            for size, code, reason in (
                    (0, grpc.StatusCode.INVALID_ARGUMENT, broker_pb2.REFUSAL_REASON_UNSPECIFIED),
                    (128 * MiB, grpc.StatusCode.RESOURCE_EXHAUSTED, broker_pb2.REFUSAL_REASON_QUOTA)):
                with self.assertRaises(grpc.RpcError) as e:
                    session.call("Allocate", broker_pb2.AllocateRequest(size=size))
                self.assertEqual(e.exception.code(), code, size)
                self.assertEqual(gpubroker_grpc.refusal_reason(e.exception), reason, size)
            with self.assertRaises(grpc.RpcError) as e:
                session.call("Open", broker_pb2.OpenRequest(
                    ref=broker_pb2.BufferRef(name="no.such.buffer")))
            self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
            with self.assertRaises(gpubroker_grpc.SessionError) as e:
                session.request_fd(buffer_id=987654321)
            self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND.value[0])
            # The session survives its refusals, and none of them left a buffer behind.
            listed = session.call("List", broker_pb2.ListRequest()).buffers
            self.assertEqual([b.owner_session for b in listed
                              if b.owner_session == session.welcome.session_id], [])

    def test_the_data_path_on_session_sock_says_why_it_refuses(self):
        small = Daemon("--host-pool-bytes", "8MiB")
        try:
            with gpubroker_grpc.Session(small.dir) as session:
                held = session.call_on_socket("allocate", broker_pb2.AllocateRequest(size=5 * MiB))
                self.assertEqual(held.buffer.size, 5 * MiB)
                with self.assertRaises(gpubroker_grpc.SessionError) as e:
                    session.call_on_socket("allocate", broker_pb2.AllocateRequest(size=4 * MiB))
                self.assertEqual(e.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
                self.assertEqual(e.exception.reason, broker_pb2.REFUSAL_REASON_OUT_OF_MEMORY)
                # The same refusal through gRPC carries the same reason.
                with self.assertRaises(grpc.RpcError) as g:
                    session.call("Allocate", broker_pb2.AllocateRequest(size=4 * MiB))
                self.assertEqual(gpubroker_grpc.refusal_reason(g.exception),
                                 broker_pb2.REFUSAL_REASON_OUT_OF_MEMORY)
                session.call_on_socket("release",
                                       broker_pb2.ReleaseRequest(id=held.buffer.id, free=True))
                session.call_on_socket("allocate", broker_pb2.AllocateRequest(size=4 * MiB))
        finally:
            self.assertEqual(small.stop(), 0)

    def test_a_session_that_dies_gives_its_memory_back(self):
        before = self.node_used_bytes()
        session = gpubroker_grpc.Session(self.daemon.dir)
        session.call("Allocate", broker_pb2.AllocateRequest(size=4 * MiB))
        self.assertEqual(self.node_used_bytes() - before, 4 * MiB)
        session._sock.close()  # no goodbye: as if the process had died
        deadline = time.monotonic() + 10
        while self.node_used_bytes() != before and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(self.node_used_bytes(), before)
        session.channel.close()

    def test_reflection_lists_the_services_and_describes_them(self):
        with self.daemon.channel() as ch:
            (listing,) = reflect(ch, {"list_services": "*"})
            names = {s.name for s in listing.list_services_response.service}
            self.assertLessEqual({"gpubroker.v1.Broker", "grpc.health.v1.Health"}, names)
            (files,) = reflect(ch, {"file_containing_symbol": "gpubroker.v1.Broker"})
            pool = descriptor_pool.DescriptorPool()
            pending = [descriptor_pb2.FileDescriptorProto.FromString(raw)
                       for raw in files.file_descriptor_response.file_descriptor_proto]
            self.assertIn("google/protobuf/any.proto", [f.name for f in pending],
                          "the server sends the file's dependencies too")
            loaded = set()
            while pending:  # a file after the files it imports
                ready = [f for f in pending if set(f.dependency) <= loaded]
                self.assertTrue(ready, [f.name for f in pending])
                for f in ready:
                    pool.Add(f)
                    loaded.add(f.name)
                    pending.remove(f)
            service = pool.FindServiceByName("gpubroker.v1.Broker")
            self.assertLessEqual({"Allocate", "Open", "Seal", "Release", "Free", "List", "Status"},
                                 {m.name for m in service.methods})
            # A call made from the served schema alone, as grpcurl makes it.
            method = service.methods_by_name["Status"]
            Request, Response = message_classes(pool, method.input_type.full_name,
                                                method.output_type.full_name)
            status = ch.unary_unary("/gpubroker.v1.Broker/Status",
                                    request_serializer=Request.SerializeToString,
                                    response_deserializer=Response.FromString)(Request(),
                                                                               timeout=10)
            self.assertEqual(status.backend, "host")

    def test_reflection_is_off_unless_asked_for(self):
        plain = Daemon()
        try:
            with plain.channel() as ch:
                with self.assertRaises(grpc.RpcError) as e:
                    reflect(ch, {"list_services": "*"})
                self.assertEqual(e.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        finally:
            self.assertEqual(plain.stop(), 0)


if __name__ == "__main__":
    try:
        unittest.main(verbosity=2)
    finally:
        shutil.rmtree(STUBS, ignore_errors=True)
