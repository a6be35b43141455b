#include "common/token.h"

#include <sys/random.h>

#include <cerrno>
#include <stdexcept>

namespace gpubroker {

Token RandomToken() {
  Token t{};
  size_t got = 0;
  while (got < t.size()) {
    ssize_t n = ::getrandom(t.data() + got, t.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("getrandom failed");
    }
    got += static_cast<size_t>(n);
  }
  return t;
}

std::string TokenToHex(const Token& token) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(32);
  for (uint8_t b : token) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xf]);
  }
  return out;
}

std::optional<Token> TokenFromHex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  Token t{};
  for (size_t i = 0; i < 16; ++i) {
    int hi = nibble(hex[2 * i]);
    int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    t[i] = static_cast<uint8_t>((hi << 4) | lo);
  }
  return t;
}

}  // namespace gpubroker
