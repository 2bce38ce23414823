// libtessera.so is the layers' archives linked whole (src/api/CMakeLists.txt);
// this file gives the target a source of its own.
#include "tessera/tessera.h"
