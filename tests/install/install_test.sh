#!/usr/bin/env bash
# The public API as a program outside the tree sees it: installs the build
# into a temporary prefix, builds tests/install/api_program.cc (the program
# of docs/api.md) against it with CMake (shared and static) and with
# pkg-config, runs each on zoo models and compares their outputs bitwise
# with what `tessera run` writes. Usage: install_test.sh BUILD_DIR.
set -uo pipefail
BUILD=${1:?build dir}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
ZOO=$BUILD/zoo
PY=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
step() {  # step NAME COMMAND...
  local name=$1
  shift
  if ! "$@" >"$TMP/log" 2>&1; then
    echo "FAIL: $name"
    sed 's/^/    /' "$TMP/log" | tail -20
    fail=$((fail + 1))
    return 1
  fi
}
step "install" cmake --install "$BUILD" --prefix "$TMP/prefix" || exit 1
for f in include/tessera/tessera.h lib/libtessera.so lib/libtessera.a lib/cmake/Tessera/TesseraConfig.cmake \
         lib/pkgconfig/tessera.pc bin/tessera bin/tessera-onnx-check; do
  [[ -e $TMP/prefix/$f ]] || { echo "FAIL: $f is not installed"; fail=$((fail + 1)); }
done
# Nothing under include/ reaches into the tree's src/.
if grep -rn '#include "\(base\|ir\|compiler\|runtime\|devices\|kernels\|passes\|onnx\|topology\|api\)/' "$TMP/prefix/include"; then
  echo "FAIL: an installed header includes an internal one"
  fail=$((fail + 1))
fi
step "cmake configure" cmake -S "$SRC/tests/install" -B "$TMP/b" -G Ninja -DCMAKE_PREFIX_PATH="$TMP/prefix" \
  -DCMAKE_BUILD_TYPE=Release || exit 1
step "cmake build" cmake --build "$TMP/b" || exit 1
step "pkg-config build" bash -c "g++ -std=c++20 -O1 '$SRC/tests/install/api_program.cc' -o '$TMP/api_program_pc' \
  \$(PKG_CONFIG_PATH='$TMP/prefix/lib/pkgconfig' pkg-config --cflags --libs tessera) -Wl,-rpath,'$TMP/prefix/lib'" || exit 1
# Away from the build tree: the installed library finds its ONNX checker
# in the prefix.
export TESSERA_ONNX_CHECK=
# One host map for every process: the Plan the first run chooses (timed,
# cached under the map's digest) is then the one the others read back. A
# map measured again in between could give another digest and a fresh
# choice, whose Plan need not give the same bits.
"$BUILD/bin/tessera" topo --json --quiet > "$TMP/host-map.json" || { echo "FAIL: tessera topo --json"; exit 1; }
export TESSERA_HOST_MAP=$TMP/host-map.json
for m in mlp resnet18; do
  mkdir -p "$TMP/cli-$m"
  step "tessera run $m" "$BUILD/bin/tessera" run "$ZOO/$m.onnx" --input "$ZOO/$m.inputs.npz" --output-dir "$TMP/cli-$m" \
    --iters 1 --threads 2 --quiet || continue
  for prog in "$TMP/b/api_program" "$TMP/b/api_program_static" "$TMP/api_program_pc"; do
    out=$TMP/out-$m-$(basename "$prog")
    mkdir -p "$out"
    step "$(basename "$prog") $m" "$prog" "$ZOO/$m.onnx" "$ZOO/$m.inputs.npz" "$out" || continue
    grep -qx "cpu [0-9]*" "$TMP/log" || { echo "FAIL: $prog lists no cpu device"; fail=$((fail + 1)); }
    [[ -s $out/model.tsx ]] || { echo "FAIL: $prog wrote no model.tsx"; fail=$((fail + 1)); }
    step "$(basename "$prog") $m outputs" $PY - "$TMP/cli-$m" "$out" <<'PYEOF'
import glob, os, sys
import numpy as np
want_dir, got_dir = sys.argv[1:3]
files = sorted(glob.glob(os.path.join(want_dir, "*.npy")))
assert files, "tessera run wrote no outputs"
for f in files:
    want, got = np.load(f), np.load(os.path.join(got_dir, os.path.basename(f)))
    assert want.dtype == got.dtype and want.shape == got.shape, (f, want.dtype, got.dtype, want.shape, got.shape)
    assert np.array_equal(want, got), f"{os.path.basename(f)}: max abs diff {np.abs(want - got).max()}"
PYEOF
  done
done
# The Executable it saved runs under the CLI.
step "saved model.tsx runs" "$BUILD/bin/tessera" run "$TMP/out-mlp-api_program/model.tsx" --iters 1 --quiet
if ((fail)); then
  echo "install_test: $fail failed"
  exit 1
fi
echo "install_test: installed package, CMake (shared, static) and pkg-config builds, outputs bitwise equal"
