#include "base/paths.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace tessera {

namespace fs = std::filesystem;

std::string cache_dir(const std::string& override) {
  if (!override.empty()) return override;
  if (const char* env = std::getenv("TESSERA_CACHE"); env && *env) return env;
  if (const char* home = std::getenv("HOME"); home && *home) return (fs::path(home) / ".cache" / "tessera").string();
  return ".tessera-cache";
}

bool write_file_atomic(const std::string& path, const std::string& text) {
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return false;
    out << text;
    if (!out.flush()) {
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return false;
  }
  return true;
}

}  // namespace tessera
