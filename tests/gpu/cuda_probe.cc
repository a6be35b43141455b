// gpubroker-cuda-probe: what this GPU and driver allow, printed one line per
// check. A diagnostic for the GPU machine, not a test.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <utility>

#define RT(call)                                                                     \
  do {                                                                               \
    cudaError_t e = (call);                                                          \
    std::printf("%-70s %s\n", #call, e == cudaSuccess ? "ok" : cudaGetErrorName(e)); \
  } while (0)

template <typename F>
F Get(const char* name, unsigned version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &q);
  std::printf("entry %-32s v%-6u %s found=%d fn=%p\n", name, version, cudaGetErrorName(e),
              static_cast<int>(q), fn);
  return reinterpret_cast<F>(fn);
}

const char* Name(CUresult r) {
  static PFN_cuGetErrorName_v6000 name = Get<PFN_cuGetErrorName_v6000>("cuGetErrorName", 12000);
  const char* s = "?";
  name(r, &s);
  return s;
}

int main() {
  RT(cudaSetDevice(0));
  RT(cudaFree(nullptr));
  auto ctx_get = Get<PFN_cuCtxGetCurrent_v4000>("cuCtxGetCurrent", 12000);
  CUcontext ctx = nullptr;
  ctx_get(&ctx);
  std::printf("current context %p\n", static_cast<void*>(ctx));
  auto attr = Get<PFN_cuDeviceGetAttribute_v2000>("cuDeviceGetAttribute", 12000);
  int v = -1;
  attr(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0);
  std::printf("CAN_USE_64_BIT_STREAM_MEM_OPS %d\n", v);
  attr(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1, 0);
  std::printf("CAN_USE_64_BIT_STREAM_MEM_OPS_V1 %d\n", v);
  attr(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 0);
  std::printf("CAN_USE_STREAM_WAIT_VALUE_NOR %d\n", v);

  cudaStream_t stream = nullptr;
  RT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* plain = nullptr;
  RT(cudaMalloc(&plain, 1 << 20));
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool = nullptr;
  RT(cudaMemPoolCreate(&pool, &props));
  void* pooled = nullptr;
  RT(cudaMallocFromPoolAsync(&pooled, 1 << 20, pool, stream));
  RT(cudaStreamSynchronize(stream));

  // A VMM allocation mapped here.
  auto mem_create = Get<PFN_cuMemCreate_v10020>("cuMemCreate", 12000);
  auto reserve = Get<PFN_cuMemAddressReserve_v10020>("cuMemAddressReserve", 12000);
  auto map = Get<PFN_cuMemMap_v10020>("cuMemMap", 12000);
  auto set_access = Get<PFN_cuMemSetAccess_v10020>("cuMemSetAccess", 12000);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr vmm = 0;
  std::printf("cuMemCreate %s\n", Name(mem_create(&h, 2 << 20, &prop, 0)));
  std::printf("reserve %s\n", Name(reserve(&vmm, 2 << 20, 0, 0, 0)));
  std::printf("map %s\n", Name(map(vmm, 2 << 20, 0, h, 0)));
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  std::printf("access %s\n", Name(set_access(vmm, 2 << 20, &access, 1)));

  // The same checks through a kernel (PTX, JIT-compiled by the driver).
  static const char kPtx[] = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry fence_write(.param .u64 addr, .param .u64 value) {
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [addr];
  ld.param.u64 %rd2, [value];
  fence.sc.sys;
  st.relaxed.sys.global.u64 [%rd1], %rd2;
  ret;
}
.visible .entry fence_wait(.param .u64 addr, .param .u64 value) {
  .reg .b64 %rd<4>;
  .reg .pred %p;
  ld.param.u64 %rd1, [addr];
  ld.param.u64 %rd2, [value];
SPIN:
  ld.relaxed.sys.global.u64 %rd3, [%rd1];
  setp.ne.u64 %p, %rd3, %rd2;
  @%p nanosleep.u32 1000;
  @%p bra SPIN;
  fence.sc.sys;
  ret;
}
)";
  auto load = Get<PFN_cuModuleLoadData_v2000>("cuModuleLoadData", 12000);
  auto getfn = Get<PFN_cuModuleGetFunction_v2000>("cuModuleGetFunction", 12000);
  auto launch = Get<PFN_cuLaunchKernel_v4000>("cuLaunchKernel", 12000);
  CUmodule mod = nullptr;
  std::printf("cuModuleLoadData %s\n", Name(load(&mod, kPtx)));
  CUfunction fw = nullptr, fwait = nullptr;
  if (mod != nullptr) {
    std::printf("get write %s\n", Name(getfn(&fw, mod, "fence_write")));
    std::printf("get wait %s\n", Name(getfn(&fwait, mod, "fence_wait")));
    for (auto [what, p] : {std::pair{"cudaMalloc", plain},
                           {"pool", pooled},
                           {"vmm", reinterpret_cast<void*>(vmm)}}) {
      CUdeviceptr addr = reinterpret_cast<CUdeviceptr>(p) + 1024;
      unsigned long long value = 77;
      void* args[] = {&addr, &value};
      CUresult r1 = launch(fw, 1, 1, 1, 1, 1, 1, 0, (CUstream)stream, args, nullptr);
      CUresult r2 = launch(fwait, 1, 1, 1, 1, 1, 1, 0, (CUstream)stream, args, nullptr);
      cudaError_t r3 = cudaStreamSynchronize(stream);
      uint64_t back = 0;
      cudaMemcpy(&back, reinterpret_cast<void*>(addr), 8, cudaMemcpyDeviceToHost);
      std::printf("kernel %-10s write=%s wait=%s sync=%s value=%llu\n", what, Name(r1), Name(r2),
                  cudaGetErrorName(r3), static_cast<unsigned long long>(back));
    }
  }

  for (unsigned version : {11070u, 12000u, 13000u}) {
    auto write = Get<PFN_cuStreamWriteValue64_v11070>("cuStreamWriteValue64", version);
    auto wait = Get<PFN_cuStreamWaitValue64_v11070>("cuStreamWaitValue64", version);
    if (write == nullptr) continue;
    for (auto [what, p] : {std::pair{"cudaMalloc", plain},
                           {"pool", pooled},
                           {"vmm", reinterpret_cast<void*>(vmm)}}) {
      for (auto [sname, s] :
           {std::pair{"null stream", (CUstream) nullptr}, {"created stream", (CUstream)stream}}) {
        const auto addr = reinterpret_cast<CUdeviceptr>(p) + 4096;
        CUresult r1 = write(s, addr, 42, CU_STREAM_WRITE_VALUE_DEFAULT);
        CUresult r2 = wait(s, addr, 42, CU_STREAM_WAIT_VALUE_EQ);
        cudaError_t r3 = cudaStreamSynchronize(s == nullptr ? nullptr : stream);
        cudaDeviceSynchronize();
        uint64_t back = 0;
        cudaMemcpy(&back, reinterpret_cast<void*>(addr), 8, cudaMemcpyDeviceToHost);
        std::printf("memop v%u %-10s %-14s write=%s wait=%s sync=%s value=%llu\n", version, what,
                    sname, Name(r1), Name(r2), cudaGetErrorName(r3),
                    static_cast<unsigned long long>(back));
        cudaGetLastError();
      }
    }
  }
  return 0;
}
