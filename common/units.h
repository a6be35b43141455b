#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gpubroker {

/// Parses a byte count: "4096", "64MiB", "1G", "1.5GiB", "512k". Binary units
/// (Ki/Mi/Gi/Ti) and, as tools like docker and kubectl read them, single
/// letters K/M/G/T as binary too; "kB"/"MB"/"GB"/"TB" are decimal.
absl::StatusOr<uint64_t> ParseBytes(std::string_view text);

/// A size given either as bytes ("64GiB") or as a share of something ("90%").
struct SizeOrShare {
  uint64_t bytes = 0;  // when not a share
  double share = 0;    // in (0, 1] when a share
  bool is_share() const { return share > 0; }
  /// The bytes it names out of `whole`.
  uint64_t Of(uint64_t whole) const {
    return is_share() ? static_cast<uint64_t>(static_cast<double>(whole) * share) : bytes;
  }
};

/// Parses "64GiB" or "90%" (a share in (0%, 100%]); zero bytes is refused too.
absl::StatusOr<SizeOrShare> ParseSizeOrShare(std::string_view text);

/// Formats bytes for people: "64 MiB", "1.50 GiB", "512 B".
std::string FormatBytes(uint64_t bytes);

/// Formats microseconds for a log line: "12.3 us".
std::string FormatMicros(double us);
template <typename Rep, typename Period>
std::string FormatMicros(std::chrono::duration<Rep, Period> d) {
  return FormatMicros(std::chrono::duration<double, std::micro>(d).count());
}

/// Parses a duration: "500ms", "30s", "5m", "2h", "1d"; a bare number is seconds.
absl::StatusOr<uint64_t> ParseDurationMs(std::string_view text);

}  // namespace gpubroker
