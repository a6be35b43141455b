"""Code as a user writes it, with the package's hints: mypy --strict must
find nothing here (test_typing.py). Never run, only checked."""

from datetime import timedelta
from typing import Dict, List, Optional, Tuple

import gpubroker


def producer(socket_dir: str) -> int:
    with gpubroker.connect(socket_dir, client_name="producer") as client:
        buf: gpubroker.Buffer = client.allocate(shape=(4, 4), dtype="float32", name="x",
                                                ttl=timedelta(seconds=5))  # fmt: skip
        raw = client.allocate(1 << 20, keep=True, share_with=("blue",))
        shape: Optional[Tuple[int, ...]] = buf.shape
        dtype: Optional[str] = buf.dtype
        strides: Optional[Tuple[int, ...]] = buf.strides
        name: str = buf.name
        nbytes: int = buf.nbytes + raw.nbytes
        ordinal: int = buf.device_id
        address: int = buf.data_ptr
        sealed: bool = buf.is_sealed and buf.is_owner and buf.is_cuda
        published: int = buf.publish()
        buf.seal(posted=True)
        ticket: bytes = raw.ticket(ttl=10.0)
        info: gpubroker.BufferInfo = buf.info()
        tenant: str = info.tenant
        raw.release()
        del shape, dtype, strides, name, ordinal, address, sealed, published, ticket, tenant
        return nbytes + buf.id


def consumer(socket_dir: Optional[str] = None) -> List[str]:
    client = gpubroker.connect(socket_dir)
    try:
        buf = client.open("x", wait=True, timeout=1.5, awake=0.005)
        buf = client.open("x", wait=True, daemon_awake=timedelta(milliseconds=5))
        early = client.open(7, posted=True, allow_unsealed=True)
        early.wait_sealed(timeout=timedelta(seconds=1), awake=0.001)
        device: Tuple[int, int] = buf.__dlpack_device__()
        with buf:
            pass
        status: gpubroker.Status = client.status()
        tenants: Optional[gpubroker.TenantStatus] = status.tenant_status()
        devices: Tuple[gpubroker.DeviceStatus, ...] = status.devices
        stats: Dict[str, object] = client.stats()
        names = [b.name for b in client.list()]
        client.free("x")
        client.trim()
        del device, tenants, devices, stats
        return names + [gpubroker.library_version()]
    except gpubroker.NotFound as e:
        code: int = e.code
        message: str = e.message
        return [str(code), message]
    except (gpubroker.Timeout, gpubroker.QuotaExceeded, gpubroker.Unavailable):
        return []
    finally:
        client.close()
