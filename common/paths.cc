#include "common/paths.h"

#include <unistd.h>

#include <cstdlib>

#include "common/strings.h"

namespace gpubroker {

std::string DefaultSocketDir() {
  if (::geteuid() == 0) return "/run/gpubroker";
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0') {
    return StrCat(xdg, "/gpubroker");
  }
  return StrCat("/tmp/gpubroker-", ::geteuid());
}

std::string ClientSocketDir() {
  if (const char* dir = std::getenv("GPUBROKER_SOCKET_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  return DefaultSocketDir();
}

}  // namespace gpubroker
