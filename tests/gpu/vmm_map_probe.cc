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
//
// Last, two processes import and map the same allocation, one after the
// other and at the same moment: whether the driver maps for two processes
// at once, which is what a cold share would need to map the producer's and
// the consumer's side in parallel. Each importer is this program again
// (--importer), started before the timing: CUDA cannot be used in a child
// forked from a process that has it up.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/wait.h>
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

// The importer: up with CUDA, says so on `ready`, waits for a byte on `go`,
// imports `fd`, reserves, maps and grants access, writes its µs to `ready`,
// then waits for a byte on `go` again before it unmaps and exits.
int Importer(int fd, size_t size, int ready, int go) {
  if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) return 2;
  char c = 1;
  if (write(ready, &c, 1) != 1 || read(go, &c, 1) != 1) return 3;
  const auto t0 = Clock::now();
  CUmemGenericAllocationHandle h = 0;
  Check(api->import_fd(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
        "cuMemImportFromShareableHandle");
  CUdeviceptr base = 0;
  Check(api->reserve(&base, size, 0, 0, 0), "cuMemAddressReserve");
  Check(api->map(base, size, 0, h, 0), "cuMemMap");
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  Check(api->set_access(base, size, &access, 1), "cuMemSetAccess");
  const double us = Us(t0, Clock::now());
  if (write(ready, &us, sizeof(us)) != sizeof(us) || read(go, &c, 1) != 1) return 3;
  Check(api->unmap(base, size), "cuMemUnmap");
  Check(api->address_free(base, size), "cuMemAddressFree");
  Check(api->release(h), "cuMemRelease");
  return 0;
}

struct Child {
  pid_t pid = -1;
  int ready = -1;  // read: its "up" byte, then its µs
  int go = -1;     // write
};

Child StartImporter(const char* self, int fd, size_t size) {
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) std::exit(1);
  Child c;
  c.pid = fork();
  if (c.pid == 0) {
    close(up[0]);
    close(down[1]);
    const std::string args[] = {std::to_string(fd), std::to_string(size), std::to_string(up[1]),
                                std::to_string(down[0])};
    execl(self, self, "--importer", args[0].c_str(), args[1].c_str(), args[2].c_str(),
          args[3].c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(up[1]);
  close(down[0]);
  c.ready = up[0];
  c.go = down[1];
  char byte = 0;
  if (read(c.ready, &byte, 1) != 1) {
    std::fprintf(stderr, "an importer did not come up\n");
    std::exit(1);
  }
  return c;
}

double TakeUs(const Child& c) {
  double us = 0;
  if (read(c.ready, &us, sizeof(us)) != sizeof(us)) {
    std::fprintf(stderr, "an importer failed\n");
    std::exit(1);
  }
  return us;
}

void Finish(Child& c) {
  const char byte = 0;
  if (write(c.go, &byte, 1) != 1) std::exit(1);
  int status = 0;
  waitpid(c.pid, &status, 0);
  close(c.ready);
  close(c.go);
}

// Two importers of one allocation of `size`: one after the other, then both at once.
void TwoProcesses(const char* self, const CUmemAllocationProp& prop, size_t size, int repetitions) {
  CUmemGenericAllocationHandle made = 0;
  Check(api->create(&made, size, &prop, 0), "cuMemCreate");
  int fd = -1;
  Check(api->export_fd(&fd, made, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        "cuMemExportToShareableHandle");
  fcntl(fd, F_SETFD, 0);  // inherited by the importers
  std::printf("\n%zu GiB, one allocation, two processes import and map it; p50 of %d, us:\n",
              size / kGiB, repetitions);
  std::printf("  %-44s %10s %10s %10s\n", "way", "first", "second", "wall");
  for (const bool together : {false, true}) {
    std::vector<double> first, second, wall;
    for (int r = 0; r <= repetitions; ++r) {
      Child a = StartImporter(self, fd, size);
      Child b = StartImporter(self, fd, size);
      const char byte = 1;
      const auto t0 = Clock::now();
      double ua = 0, ub = 0;
      if (together) {
        if (write(a.go, &byte, 1) != 1 || write(b.go, &byte, 1) != 1) std::exit(1);
        ua = TakeUs(a);
        ub = TakeUs(b);
      } else {
        if (write(a.go, &byte, 1) != 1) std::exit(1);
        ua = TakeUs(a);
        if (write(b.go, &byte, 1) != 1) std::exit(1);
        ub = TakeUs(b);
      }
      const double w = Us(t0, Clock::now());
      Finish(a);
      Finish(b);
      if (r == 0) continue;
      first.push_back(ua);
      second.push_back(ub);
      wall.push_back(w);
    }
    std::printf("  %-44s %10.0f %10.0f %10.0f\n", together ? "both at once" : "one after the other",
                Median(first), Median(second), Median(wall));
    std::fflush(stdout);
  }
  close(fd);
  Check(api->release(made), "cuMemRelease");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "--importer") {
    static const Api loaded;
    api = &loaded;
    return Importer(std::atoi(argv[2]), std::strtoull(argv[3], nullptr, 10), std::atoi(argv[4]),
                    std::atoi(argv[5]));
  }
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
  TwoProcesses("/proc/self/exe", prop, size, repetitions);
  return 0;
}
