#pragma once

// The byte-level reading and writing of the flat layouts
// (common/wire/flat_answer.h, common/wire/flat_call.h): fixed little-endian
// fields and strings as a u16 length and their bytes. Internal to
// common/wire.

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

namespace gpubroker::flat {

// Fields are copied as they lie in memory, which is the layouts' byte order
// on the machines this builds for.
static_assert(std::endian::native == std::endian::little, "the flat layouts are little-endian");

inline constexpr size_t kMaxCount = std::numeric_limits<uint8_t>::max();
inline constexpr size_t kMaxString = std::numeric_limits<uint16_t>::max();

class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Bytes(&v, 4); }
  void U64(uint64_t v) { Bytes(&v, 8); }
  /// At most kMaxString bytes (the caller checks).
  void Str(std::string_view s) {
    const auto n = static_cast<uint16_t>(s.size());
    Bytes(&n, 2);
    out_->append(s);
  }

 private:
  void Bytes(const void* p, size_t n) { out_->append(static_cast<const char*>(p), n); }
  std::string* out_;
};

/// Reads fields in order; a read past the end reads zero and makes ok()
/// false, so a decoder reads every field and checks once at the end.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool done() const { return ok_ && pos_ == in_.size(); }
  uint8_t U8() {
    uint8_t v = 0;
    Bytes(&v, 1);
    return v;
  }
  uint32_t U32() {
    uint32_t v = 0;
    Bytes(&v, 4);
    return v;
  }
  uint64_t U64() {
    uint64_t v = 0;
    Bytes(&v, 8);
    return v;
  }
  void Str(std::string* s) { s->assign(View()); }
  /// A string as a view into the input (empty past the end).
  std::string_view View() {
    uint16_t n = 0;
    Bytes(&n, 2);
    if (!Need(n)) return {};
    const std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  bool Need(size_t n) {
    if (ok_ && in_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  void Bytes(void* p, size_t n) {
    if (!Need(n)) return;
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }
  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

/// Whether `s` is well-formed UTF-8 (no overlong forms, no surrogates,
/// nothing past U+10FFFF), as protobuf requires of a `string` field it
/// parses: a flat decoder refuses what a protobuf parse would.
inline bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t cp = 0;
    if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3f);
    }
    constexpr uint32_t kLeast[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kLeast[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

}  // namespace gpubroker::flat
