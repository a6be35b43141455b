#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gpubroker {

/// Parses a byte count: "4096", "64MiB", "1G", "1.5GiB", "512k". Binary units
/// (Ki/Mi/Gi/Ti) and, as tools like docker and kubectl read them, single
/// letters K/M/G/T as binary too; "kB"/"MB"/"GB"/"TB" are decimal.
absl::StatusOr<uint64_t> ParseBytes(std::string_view text);

/// Formats bytes for people: "64 MiB", "1.50 GiB", "512 B".
std::string FormatBytes(uint64_t bytes);

/// Parses a duration: "500ms", "30s", "5m", "2h", "1d"; a bare number is seconds.
absl::StatusOr<uint64_t> ParseDurationMs(std::string_view text);

}  // namespace gpubroker
