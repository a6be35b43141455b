#pragma once

#include <string>

namespace gpubroker {

/// An HTTP/1.0 GET of `path` on `host:port` (IPv4), for reading the
/// daemon's own metrics endpoint in tests and benchmarks: the body, or ""
/// when nothing answers.
std::string HttpGet(const std::string& address, const std::string& path);

}  // namespace gpubroker
