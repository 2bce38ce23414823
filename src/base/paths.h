// Where Tessera keeps what it measures between runs (profiles, host maps,
// plan choices).
#pragma once

#include <string>

namespace tessera {

// `override` if not empty, else $TESSERA_CACHE, else ~/.cache/tessera,
// else ".tessera-cache" (no HOME).
std::string cache_dir(const std::string& override = "");

// Writes `text` to `path` whole: to a temporary beside it, then renamed,
// so that readers see the old file or the new one, never a part.
// Creates the parent directories. False when it could not.
bool write_file_atomic(const std::string& path, const std::string& text);

}  // namespace tessera
