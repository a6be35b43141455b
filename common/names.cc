#include "common/names.h"

#include <cctype>

#include "absl/strings/str_format.h"
#include "common/strings.h"

namespace gpubroker {
namespace {

bool IsNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' ||
         c == '-';
}

absl::Status Validate(std::string_view what, std::string_view name, size_t limit) {
  if (name.empty()) return absl::InvalidArgumentError(StrCat(what, " is empty"));
  if (name.size() > limit) {
    return absl::InvalidArgumentError(
        StrCat(what, " is ", name.size(), " characters long; the limit is ", limit));
  }
  const char first = name.front();
  if (!std::isalpha(static_cast<unsigned char>(first)) && first != '_') {
    return absl::InvalidArgumentError(
        StrCat(what, " must start with a letter or '_': '", name.substr(0, 32), "'"));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i])) {
      const auto c = static_cast<unsigned char>(name[i]);
      std::string shown = std::isprint(c) ? StrCat("'", std::string(1, name[i]), "'")
                                          : absl::StrFormat("byte 0x%02x", c);
      return absl::InvalidArgumentError(StrCat(what, " has ", shown, " at position ", i,
                                               "; allowed are letters, digits and . _ : -"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateName(std::string_view name) {
  return Validate("buffer name", name, kMaxNameLength);
}

absl::Status ValidateTenantName(std::string_view name) { return Validate("tenant name", name, 64); }

absl::StatusOr<NameRef> ParseNameRef(std::string_view ref) {
  NameRef out;
  out.name = ref;
  if (const auto slash = ref.find('/'); slash != std::string_view::npos) {
    out.tenant = ref.substr(0, slash);
    out.name = ref.substr(slash + 1);
    if (auto s = ValidateTenantName(out.tenant); !s.ok()) {
      return absl::InvalidArgumentError(StrCat("in '", ref.substr(0, 200), "': ", s.message(),
                                               " (a reference is NAME or TENANT/NAME)"));
    }
  }
  if (auto s = ValidateName(out.name); !s.ok()) return s;
  return out;
}

}  // namespace gpubroker
