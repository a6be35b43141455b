// gpubroker-vmm-map-probe [GiB] [repetitions]: how long a consumer takes to
// import and map a large VMM allocation, and whether the virtual address's
// alignment, or the memory made as several allocations mapped from several
// threads, changes it. A diagnostic for the GPU machine, not a test: a cold
// 40 GiB share is two such maps (the producer's own and the consumer's), and
// issue #11 asks for the whole share in 3 ms.
//
// Each allocation is exported as a POSIX descriptor and imported again, as
// the broker's clients do, once per repetition; the first repetition of each
// way is not counted. One allocation is tried as given and with the broker's
// 2 MiB fence page after it (the daemon's VMM allocations are that size).
// cuMemMap maps a handle from its start only (its offset must be 0), so
// memory mapped in pieces is memory made as that many allocations.
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
std::string StrThreads(int threads) {
  return "mapped from " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
}
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Way {
  std::string name;
  size_t alignment;  // of the reserved address range; 0: the driver's choice
  int threads;       // that map the allocations (one cuMemMap + cuMemSetAccess each)
};

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

// Imports `fd`, reserves, maps and grants access the `way` says; unmaps.
// The times of each step, µs.
struct Times {
  double import = 0, reserve = 0, map = 0, unmap = 0;
};
Times MapOnce(const std::vector<int>& fds, size_t piece, const Way& way) {
  Times t;
  const size_t size = piece * fds.size();
  const auto t0 = Clock::now();
  std::vector<CUmemGenericAllocationHandle> handles(fds.size());
  for (size_t i = 0; i < fds.size(); ++i) {
    Check(api->import_fd(&handles[i], reinterpret_cast<void*>(static_cast<intptr_t>(fds[i])),
                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
          "cuMemImportFromShareableHandle");
  }
  const auto t1 = Clock::now();
  CUdeviceptr base = 0;
  Check(api->reserve(&base, size, way.alignment, 0, 0), "cuMemAddressReserve");
  const auto t2 = Clock::now();
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  auto work = [&](size_t first) {
    for (size_t i = first; i < handles.size(); i += static_cast<size_t>(way.threads)) {
      Check(api->map(base + i * piece, piece, 0, handles[i], 0), "cuMemMap");
      Check(api->set_access(base + i * piece, piece, &access, 1), "cuMemSetAccess");
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
  for (CUmemGenericAllocationHandle h : handles) Check(api->release(h), "cuMemRelease");
  // The mapping works: a word at each end.
  for (CUdeviceptr p : {base, base + size - 8}) {
    if (cudaMemset(reinterpret_cast<void*>(p), 1, 8) != cudaSuccess) std::exit(1);
  }
  if (cudaDeviceSynchronize() != cudaSuccess) std::exit(1);
  const auto t4 = Clock::now();
  for (size_t i = 0; i < handles.size(); ++i)
    Check(api->unmap(base + i * piece, piece), "cuMemUnmap");
  Check(api->address_free(base, size), "cuMemAddressFree");
  const auto t5 = Clock::now();
  t.import = Us(t0, t1);
  t.reserve = Us(t1, t2);
  t.map = Us(t2, t3);
  t.unmap = Us(t4, t5);
  return t;
}

// Makes `count` allocations of `piece` bytes, exported; runs `ways` on them.
void Run(const CUmemAllocationProp& prop, size_t count, size_t piece, int repetitions,
         const std::vector<Way>& ways, const char* title) {
  std::vector<CUmemGenericAllocationHandle> made(count);
  std::vector<int> fds(count, -1);
  const auto c0 = Clock::now();
  for (size_t i = 0; i < count; ++i) Check(api->create(&made[i], piece, &prop, 0), "cuMemCreate");
  const double create_us = Us(c0, Clock::now());
  for (size_t i = 0; i < count; ++i) {
    Check(api->export_fd(&fds[i], made[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
          "cuMemExportToShareableHandle");
  }
  std::printf("\n%s: cuMemCreate %.0f us; p50 of %d, us:\n", title, create_us, repetitions);
  std::printf("  %-44s %8s %8s %10s %10s %10s\n", "way", "import", "reserve", "map+access", "all",
              "unmap");
  for (const Way& way : ways) {
    std::vector<double> import, reserve, map, all, unmap;
    for (int r = 0; r <= repetitions; ++r) {
      const Times t = MapOnce(fds, piece, way);
      if (r == 0) continue;
      import.push_back(t.import);
      reserve.push_back(t.reserve);
      map.push_back(t.map);
      all.push_back(t.import + t.reserve + t.map);
      unmap.push_back(t.unmap);
    }
    std::printf("  %-44s %8.0f %8.0f %10.0f %10.0f %10.0f\n", way.name.c_str(), Median(import),
                Median(reserve), Median(map), Median(all), Median(unmap));
    std::fflush(stdout);
  }
  for (size_t i = 0; i < count; ++i) {
    close(fds[i]);
    Check(api->release(made[i]), "cuMemRelease");
  }
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
  const std::vector<Way> one = {
      {"the driver's alignment", 0, 1},
      {"aligned to 2 MiB", 2 * kMiB, 1},
      {"aligned to 512 MiB", 512 * kMiB, 1},
      {"aligned to 1 GiB", kGiB, 1},
  };
  const size_t size = gib * kGiB;
  Run(prop, 1, size, repetitions, one, (std::to_string(gib) + " GiB, one allocation").c_str());
  Run(prop, 1, size + 2 * kMiB, repetitions, one,
      (std::to_string(gib) + " GiB + 2 MiB, one allocation").c_str());
  for (const size_t count : {size_t{8}, size_t{32}}) {
    const size_t piece = (size / count + minimum - 1) / minimum * minimum;
    std::vector<Way> ways;
    for (const int threads : {1, 4, 8}) {
      ways.push_back({StrThreads(threads), 0, threads});
    }
    Run(prop, count, piece, repetitions, ways,
        (std::to_string(gib) + " GiB as " + std::to_string(count) + " allocations").c_str());
  }
  return 0;
}
