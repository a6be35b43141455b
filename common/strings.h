#pragma once

// String helpers that take std::string_view. (The system's Abseil is built
// with its own string_view type, so absl/strings does not accept ours.)

#include <charconv>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/string_view.h"

namespace gpubroker {

namespace detail {
inline void AppendOne(std::string& out, std::string_view s) { out.append(s); }
inline void AppendOne(std::string& out, const char* s) { out.append(s); }
inline void AppendOne(std::string& out, const std::string& s) { out.append(s); }
inline void AppendOne(std::string& out, absl::string_view s) { out.append(s.data(), s.size()); }
inline void AppendOne(std::string& out, char c) { out.push_back(c); }
template <typename T>
requires(std::is_integral_v<T> && !std::is_same_v<T, char> &&
         !std::is_same_v<T, bool>) void AppendOne(std::string& out, T v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, end);
}
inline void AppendOne(std::string& out, bool v) { out.append(v ? "true" : "false"); }
inline void AppendOne(std::string& out, double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, end);
}
}  // namespace detail

/// Concatenates strings, string views, characters and numbers.
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (detail::AppendOne(out, args), ...);
  return out;
}

template <typename... Args>
void StrAppend(std::string* out, const Args&... args) {
  (detail::AppendOne(*out, args), ...);
}

/// Parses a whole string as an integer; false on any stray character or overflow.
template <typename T>
bool ParseInt(std::string_view text, T* out) {
  if (text.empty()) return false;
  if (text.front() == '+') text.remove_prefix(1);
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

/// Parses a whole string as a double.
bool ParseDouble(std::string_view text, double* out);

std::string_view Trim(std::string_view s);
std::string ToLower(std::string_view s);

/// absl's string_view (from absl::Status::message()) as ours.
inline std::string_view View(absl::string_view s) { return {s.data(), s.size()}; }

}  // namespace gpubroker
