// gpubroker-vmm-map-probe [GiB] [repetitions]: how long a consumer takes to
// import and map a large VMM allocation, and whether the virtual address's
// alignment, mapping in pieces or mapping from several threads changes it.
// A diagnostic for the GPU machine, not a test: a cold 40 GiB share is two
// such maps (the producer's own and the consumer's), and issue #11 asks for
// the whole share in 3 ms.
//
// The allocation is exported as a POSIX descriptor and imported again, as
// the broker's clients do, once per repetition; the first repetition of each
// way is not counted. Sizes are tried as given and with the broker's 2 MiB
// fence page after them (the daemon's VMM allocations are that size).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

template <typename F>
F Get(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      fn == nullptr) {
    std::fprintf(stderr, "the driver has no %s\n", name);
    std::exit(2);
  }
  return reinterpret_cast<F>(fn);
}

struct Api {
  PFN_cuMemCreate_v10020 create = Get<PFN_cuMemCreate_v10020>("cuMemCreate");
  PFN_cuMemRelease_v10020 release = Get<PFN_cuMemRelease_v10020>("cuMemRelease");
  PFN_cuMemExportToShareableHandle_v10020 export_fd =
      Get<PFN_cuMemExportToShareableHandle_v10020>("cuMemExportToShareableHandle");
  PFN_cuMemImportFromShareableHandle_v10020 import_fd =
      Get<PFN_cuMemImportFromShareableHandle_v10020>("cuMemImportFromShareableHandle");
  PFN_cuMemAddressReserve_v10020 reserve =
      Get<PFN_cuMemAddressReserve_v10020>("cuMemAddressReserve");
  PFN_cuMemAddressFree_v10020 address_free = Get<PFN_cuMemAddressFree_v10020>("cuMemAddressFree");
  PFN_cuMemMap_v10020 map = Get<PFN_cuMemMap_v10020>("cuMemMap");
  PFN_cuMemUnmap_v10020 unmap = Get<PFN_cuMemUnmap_v10020>("cuMemUnmap");
  PFN_cuMemSetAccess_v10020 set_access = Get<PFN_cuMemSetAccess_v10020>("cuMemSetAccess");
  PFN_cuMemGetAllocationGranularity_v10020 granularity =
      Get<PFN_cuMemGetAllocationGranularity_v10020>("cuMemGetAllocationGranularity");
  PFN_cuGetErrorName_v6000 error_name = Get<PFN_cuGetErrorName_v6000>("cuGetErrorName");
};

const Api* api = nullptr;

void Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = "?";
  api->error_name(r, &name);
  std::fprintf(stderr, "%s: %s\n", what, name);
  std::exit(1);
}

using Clock = std::chrono::steady_clock;
double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Way {
  std::string name;
  size_t alignment;  // of the reserved address range; 0: the driver's choice
  int pieces;        // cuMemMap + cuMemSetAccess calls
  int threads;       // that make them
};

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

// Imports `fd`, reserves, maps and grants access the `way` says; unmaps.
// The times of each step, µs.
struct Times {
  double import = 0, reserve = 0, map = 0, unmap = 0;
};
Times MapOnce(int fd, size_t size, size_t granularity, const Way& way) {
  Times t;
  const auto t0 = Clock::now();
  CUmemGenericAllocationHandle h = 0;
  Check(api->import_fd(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
        "cuMemImportFromShareableHandle");
  const auto t1 = Clock::now();
  CUdeviceptr base = 0;
  Check(api->reserve(&base, size, way.alignment, 0, 0), "cuMemAddressReserve");
  const auto t2 = Clock::now();
  const size_t step =
      (size / static_cast<size_t>(way.pieces) + granularity - 1) / granularity * granularity;
  std::vector<std::pair<size_t, size_t>> pieces;
  for (size_t at = 0; at < size; at += step) pieces.emplace_back(at, std::min(step, size - at));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  auto work = [&](size_t first) {
    for (size_t i = first; i < pieces.size(); i += static_cast<size_t>(way.threads)) {
      Check(api->map(base + pieces[i].first, pieces[i].second, 0, h, pieces[i].first), "cuMemMap");
      Check(api->set_access(base + pieces[i].first, pieces[i].second, &access, 1),
            "cuMemSetAccess");
    }
  };
  if (way.threads == 1) {
    work(0);
  } else {
    std::vector<std::thread> threads;
    for (int i = 0; i < way.threads; ++i) {
      threads.emplace_back([&, i] {
        if (cudaSetDevice(0) != cudaSuccess) std::exit(1);
        work(static_cast<size_t>(i));
      });
    }
    for (auto& th : threads) th.join();
  }
  const auto t3 = Clock::now();
  Check(api->release(h), "cuMemRelease");
  // The mapping works: a word at each end.
  for (CUdeviceptr p : {base, base + size - 8}) {
    if (cudaMemset(reinterpret_cast<void*>(p), 1, 8) != cudaSuccess) std::exit(1);
  }
  if (cudaDeviceSynchronize() != cudaSuccess) std::exit(1);
  const auto t4 = Clock::now();
  Check(api->unmap(base, size), "cuMemUnmap");
  Check(api->address_free(base, size), "cuMemAddressFree");
  const auto t5 = Clock::now();
  t.import = Us(t0, t1);
  t.reserve = Us(t1, t2);
  t.map = Us(t2, t3);
  t.unmap = Us(t4, t5);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t gib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 40;
  const int repetitions = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
    std::fprintf(stderr, "no usable GPU\n");
    return 2;
  }
  static const Api loaded;
  api = &loaded;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t minimum = 0, recommended = 0;
  Check(api->granularity(&minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity");
  Check(api->granularity(&recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "granularity");
  std::printf("allocation granularity: minimum %zu KiB, recommended %zu KiB\n", minimum >> 10,
              recommended >> 10);
  const std::vector<Way> ways = {
      {"one piece, the driver's alignment", 0, 1, 1},
      {"one piece, aligned to 2 MiB", 2 * kMiB, 1, 1},
      {"one piece, aligned to 512 MiB", 512 * kMiB, 1, 1},
      {"one piece, aligned to 1 GiB", kGiB, 1, 1},
      {"8 pieces, 1 thread", 0, 8, 1},
      {"8 pieces, 4 threads", 0, 8, 4},
      {"8 pieces, 8 threads", 0, 8, 8},
      {"8 pieces, 8 threads, aligned to 1 GiB", kGiB, 8, 8},
      {"32 pieces, 8 threads", 0, 32, 8},
  };
  for (const size_t tail : {size_t{0}, 2 * kMiB}) {
    const size_t size = gib * kGiB + tail;
    CUmemGenericAllocationHandle h = 0;
    const auto c0 = Clock::now();
    Check(api->create(&h, size, &prop, 0), "cuMemCreate");
    const double create_us = Us(c0, Clock::now());
    int fd = -1;
    Check(api->export_fd(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
          "cuMemExportToShareableHandle");
    std::printf("\n%zu GiB%s: cuMemCreate %.0f us; p50 of %d, us:\n", gib,
                tail != 0 ? " + 2 MiB" : "", create_us, repetitions);
    std::printf("  %-40s %8s %8s %10s %10s %10s\n", "way", "import", "reserve", "map+access", "all",
                "unmap");
    for (const Way& way : ways) {
      std::vector<double> import, reserve, map, all, unmap;
      for (int r = 0; r <= repetitions; ++r) {
        const Times t = MapOnce(fd, size, minimum, way);
        if (r == 0) continue;
        import.push_back(t.import);
        reserve.push_back(t.reserve);
        map.push_back(t.map);
        all.push_back(t.import + t.reserve + t.map);
        unmap.push_back(t.unmap);
      }
      std::printf("  %-40s %8.0f %8.0f %10.0f %10.0f %10.0f\n", way.name.c_str(), Median(import),
                  Median(reserve), Median(map), Median(all), Median(unmap));
    }
    close(fd);
    Check(api->release(h), "cuMemRelease");
  }
  return 0;
}
