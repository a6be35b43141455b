#include <stdexcept>
#include <string>

#include "common/strings.h"
#include "common/status_macros.h"

namespace gpubroker::detail {

void ThrowLogicError(const char* file, int line, const std::string& what) {
  throw std::logic_error(StrCat(file, ":", line, ": ", what));
}

}  // namespace gpubroker::detail
