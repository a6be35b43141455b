"""The few C ABI calls of libgpubroker.so that the Python baselines time.

A minimal ctypes binding, so that the benchmark needs no Python package of
its own: what it measures is the C ABI as any binding would call it.
"""
import ctypes


class Broker:
    def __init__(self, lib_path, socket_dir):
        lib = ctypes.CDLL(lib_path)
        vp = ctypes.c_void_p
        pp = ctypes.POINTER(ctypes.c_void_p)
        for name, args in {
            "gpubroker_connect": [ctypes.c_char_p, pp],
            "gpubroker_allocate": [vp, ctypes.c_uint64, vp, pp],
            "gpubroker_open_id": [vp, ctypes.c_uint64, vp, pp],
            "gpubroker_buffer_seal_on": [vp, vp],
            "gpubroker_buffer_wait_ready": [vp, vp],
            "gpubroker_buffer_release": [vp],
        }.items():
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = ctypes.c_int
        for name, res in {
            "gpubroker_buffer_id": ctypes.c_uint64,
            "gpubroker_buffer_data": vp,
            "gpubroker_buffer_size": ctypes.c_uint64,
        }.items():
            fn = getattr(lib, name)
            fn.argtypes = [vp]
            fn.restype = res
        lib.gpubroker_last_error.restype = ctypes.c_char_p
        self.lib = lib
        self.client = ctypes.c_void_p()
        self._check(lib.gpubroker_connect(socket_dir.encode(), ctypes.byref(self.client)))

    def _check(self, status):
        if status != 0:
            raise RuntimeError("gpubroker: %d %s" % (status, self.lib.gpubroker_last_error().decode()))

    def allocate(self, size):
        buf = ctypes.c_void_p()
        self._check(self.lib.gpubroker_allocate(self.client, size, None, ctypes.byref(buf)))
        return buf

    def open_id(self, buffer_id):
        buf = ctypes.c_void_p()
        self._check(self.lib.gpubroker_open_id(self.client, buffer_id, None, ctypes.byref(buf)))
        return buf

    def seal(self, buf, stream):
        self._check(self.lib.gpubroker_buffer_seal_on(buf, stream))

    def wait_ready(self, buf, stream):
        self._check(self.lib.gpubroker_buffer_wait_ready(buf, stream))

    def release(self, buf):
        self._check(self.lib.gpubroker_buffer_release(buf))

    def id(self, buf):
        return self.lib.gpubroker_buffer_id(buf)

    def data(self, buf):
        return self.lib.gpubroker_buffer_data(buf)


class CudaArray:
    """A device pointer as __cuda_array_interface__ (v2), for torch.as_tensor."""

    def __init__(self, ptr, size):
        self.__cuda_array_interface__ = {
            "shape": (size,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 2,
        }
