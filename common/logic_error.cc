#include <stdexcept>
#include <string>

#include "common/status_macros.h"
#include "common/strings.h"

namespace gpubroker::detail {

void ThrowLogicError(const char* file, int line, const std::string& what) {
  throw std::logic_error(StrCat(file, ":", line, ": ", what));
}

}  // namespace gpubroker::detail
