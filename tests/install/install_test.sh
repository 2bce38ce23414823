#!/usr/bin/env bash
# The public API as a program outside the tree sees it: installs the build
# into a temporary prefix, builds tests/install/api_program.cc (the program
# of docs/api.md) against it with CMake (shared and static) and with
# pkg-config, runs each on zoo models (compiled Executables and ONNX files)
# and compares their outputs with what `tessera run` writes: bitwise for an
# Executable. Usage: install_test.sh BUILD_DIR.
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
"$BUILD/bin/tessera" topo --json --quiet > "$TMP/host-map.json" || { echo "FAIL: tessera topo --json"; exit 1; }
export TESSERA_HOST_MAP=$TMP/host-map.json
# Outputs alike: bitwise (`exact`), or within rel-L2 1e-5 per output.
compare() {
  $PY - "$@" <<'PYEOF'
import glob, os, sys
import numpy as np
want_dir, got_dir, how = sys.argv[1:4]
files = sorted(glob.glob(os.path.join(want_dir, "*.npy")))
assert files, "tessera run wrote no outputs"
for f in files:
    want, got = np.load(f), np.load(os.path.join(got_dir, os.path.basename(f)))
    assert want.dtype == got.dtype and want.shape == got.shape, (f, want.dtype, got.dtype, want.shape, got.shape)
    if how == "exact":
        assert np.array_equal(want, got), f"{os.path.basename(f)}: max abs diff {np.abs(want - got).max()}"
    else:
        w, g = want.astype(np.float64), got.astype(np.float64)
        rel = np.linalg.norm(w - g) / max(np.linalg.norm(w), 1e-30)
        assert rel <= 1e-5, f"{os.path.basename(f)}: rel-L2 {rel}"
PYEOF
}
# Each program on an Executable the CLI compiled (its Plan fixed: the same
# bits as `tessera run` writes for it), and on the ONNX file. From the ONNX
# file each process makes its own measured plan choice, which on a busy
# host may keep another Plan (other tilings, other rounding): there the
# outputs agree to rounding.
for m in mlp resnet18; do
  step "tessera compile $m" "$BUILD/bin/tessera" compile "$ZOO/$m.onnx" --veus 2 -o "$TMP/$m.tsx" --quiet || continue
  mkdir -p "$TMP/cli-$m" "$TMP/cli-$m-onnx"
  step "tessera run $m.tsx" "$BUILD/bin/tessera" run "$TMP/$m.tsx" --input "$ZOO/$m.inputs.npz" \
    --output-dir "$TMP/cli-$m" --iters 1 --quiet || continue
  step "tessera run $m.onnx" "$BUILD/bin/tessera" run "$ZOO/$m.onnx" --input "$ZOO/$m.inputs.npz" \
    --output-dir "$TMP/cli-$m-onnx" --iters 1 --threads 2 --quiet || continue
  for prog in "$TMP/b/api_program" "$TMP/b/api_program_static" "$TMP/api_program_pc"; do
    out=$TMP/out-$m-$(basename "$prog")
    mkdir -p "$out" "$out-onnx"
    step "$(basename "$prog") $m.tsx" "$prog" "$TMP/$m.tsx" "$ZOO/$m.inputs.npz" "$out" || continue
    grep -qx "cpu [0-9]*" "$TMP/log" || { echo "FAIL: $prog lists no cpu device"; fail=$((fail + 1)); }
    [[ -s $out/model.tsx ]] || { echo "FAIL: $prog wrote no model.tsx"; fail=$((fail + 1)); }
    step "$(basename "$prog") $m.tsx outputs bitwise" compare "$TMP/cli-$m" "$out" exact
    step "$(basename "$prog") $m.onnx" "$prog" "$ZOO/$m.onnx" "$ZOO/$m.inputs.npz" "$out-onnx" || continue
    step "$(basename "$prog") $m.onnx outputs" compare "$TMP/cli-$m-onnx" "$out-onnx" close
  done
done
# The Executable it saved runs under the CLI.
step "saved model.tsx runs" "$BUILD/bin/tessera" run "$TMP/out-mlp-api_program-onnx/model.tsx" --iters 1 --quiet
if ((fail)); then
  echo "install_test: $fail failed"
  exit 1
fi
echo "install_test: installed package, CMake (shared, static) and pkg-config builds; outputs bitwise equal on Executables, within rounding from ONNX files"
