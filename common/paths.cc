#include "common/paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "common/strings.h"

namespace gpubroker {

namespace {

bool Serves(const std::string& dir) {
  struct stat st {};
  return ::stat(StrCat(dir, "/", kSessionSocketName).c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace

std::string DefaultSocketDir() {
  if (::geteuid() == 0) return kSystemSocketDir;
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0') {
    return StrCat(xdg, "/gpubroker");
  }
  return StrCat("/tmp/gpubroker-", ::geteuid());
}

std::string ClientSocketDir() {
  if (const char* dir = std::getenv("GPUBROKER_SOCKET_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  std::string own = DefaultSocketDir();
  if (own != kSystemSocketDir && !Serves(own) && Serves(kSystemSocketDir)) return kSystemSocketDir;
  return own;
}

}  // namespace gpubroker
