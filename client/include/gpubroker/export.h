#pragma once

/// Marks the symbols that libgpubroker exports; everything else is hidden.
#if defined(GPUBROKER_BUILDING_LIBRARY)
#define GPUBROKER_API __attribute__((visibility("default")))
#else
#define GPUBROKER_API
#endif
