#include "common/units.h"

#include <cctype>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"
#include "common/strings.h"

namespace gpubroker {
namespace {

// Splits "1.5GiB" into ("1.5", "GiB").
std::pair<std::string_view, std::string_view> SplitNumber(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  std::string_view unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  return {text.substr(0, i), unit};
}

absl::StatusOr<uint64_t> Scale(std::string_view original, std::string_view number, double factor) {
  uint64_t whole = 0;
  if (number.find('.') == std::string_view::npos && ParseInt(number, &whole)) {
    const auto f = static_cast<uint64_t>(factor);
    if (whole != 0 && f > std::numeric_limits<uint64_t>::max() / whole) {
      return absl::InvalidArgumentError(StrCat("size out of range: '", original, "'"));
    }
    return whole * f;
  }
  double value = 0;
  if (!ParseDouble(number, &value) || value < 0) {
    return absl::InvalidArgumentError(StrCat("not a size: '", original, "'"));
  }
  const double bytes = std::ceil(value * factor);
  if (bytes >= 18446744073709551615.0) {
    return absl::InvalidArgumentError(StrCat("size out of range: '", original, "'"));
  }
  return static_cast<uint64_t>(bytes);
}

}  // namespace

absl::StatusOr<uint64_t> ParseBytes(std::string_view text) {
  text = Trim(text);
  auto [number, unit] = SplitNumber(text);
  if (number.empty()) {
    return absl::InvalidArgumentError(StrCat("not a size: '", text, "'"));
  }
  const std::string u = ToLower(unit);
  double factor;
  constexpr double kKi = 1024.0;
  if (u.empty() || u == "b") {
    factor = 1;
  } else if (u == "k" || u == "ki" || u == "kib") {
    factor = kKi;
  } else if (u == "m" || u == "mi" || u == "mib") {
    factor = kKi * kKi;
  } else if (u == "g" || u == "gi" || u == "gib") {
    factor = kKi * kKi * kKi;
  } else if (u == "t" || u == "ti" || u == "tib") {
    factor = kKi * kKi * kKi * kKi;
  } else if (u == "kb") {
    factor = 1e3;
  } else if (u == "mb") {
    factor = 1e6;
  } else if (u == "gb") {
    factor = 1e9;
  } else if (u == "tb") {
    factor = 1e12;
  } else {
    return absl::InvalidArgumentError(StrCat("unknown size unit '", unit, "' in '", text,
                                             "' (use B, KiB, MiB, GiB, TiB, or kB, MB, GB, TB)"));
  }
  return Scale(text, number, factor);
}

absl::StatusOr<SizeOrShare> ParseSizeOrShare(std::string_view text) {
  const std::string_view t = Trim(text);
  SizeOrShare out;
  if (!t.empty() && t.back() == '%') {
    double percent = 0;
    if (!ParseDouble(t.substr(0, t.size() - 1), &percent) || percent <= 0 || percent > 100) {
      return absl::InvalidArgumentError(StrCat("'", text, "' is not a share between 0% and 100%"));
    }
    out.share = percent / 100.0;
    return out;
  }
  auto bytes = ParseBytes(t);
  if (!bytes.ok() || *bytes == 0) {
    return absl::InvalidArgumentError(StrCat("'", text, "' is not a size or a percentage"));
  }
  out.bytes = *bytes;
  return out;
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return StrCat(bytes, " B");
  if (value == std::floor(value)) return absl::StrFormat("%.0f %s", value, kUnits[unit]);
  return absl::StrFormat("%.2f %s", value, kUnits[unit]);
}

std::string FormatMicros(double us) { return absl::StrFormat("%.1f us", us); }

absl::StatusOr<uint64_t> ParseDurationMs(std::string_view text) {
  text = Trim(text);
  auto [number, unit] = SplitNumber(text);
  if (number.empty()) {
    return absl::InvalidArgumentError(StrCat("not a duration: '", text, "'"));
  }
  const std::string u = ToLower(unit);
  double factor;
  if (u == "ms") {
    factor = 1;
  } else if (u.empty() || u == "s") {
    factor = 1e3;
  } else if (u == "m" || u == "min") {
    factor = 60e3;
  } else if (u == "h") {
    factor = 3600e3;
  } else if (u == "d") {
    factor = 86400e3;
  } else {
    return absl::InvalidArgumentError(
        StrCat("unknown duration unit '", unit, "' in '", text, "' (use ms, s, m, h, d)"));
  }
  return Scale(text, number, factor);
}

}  // namespace gpubroker
