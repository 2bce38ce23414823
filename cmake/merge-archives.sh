#!/bin/sh
# merge-archives.sh AR SCRIPT: runs an ar MRI script (src/api/CMakeLists.txt
# merges the layers' archives into libtessera.a with it).
set -e
"$1" -M < "$2"
