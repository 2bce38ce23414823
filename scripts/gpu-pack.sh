#!/usr/bin/env bash
# Packs what the GPU tests need on a machine that can install nothing (a
# lent GPU machine: same processor family, its own CUDA driver): the CLI,
# its ONNX checker, the CUDA test, the shared libraries they load that are
# not the C runtime's, and the zoo models the tests read, into one
# compressed archive. There: tar xJf it, then
#   LD_LIBRARY_PATH=$D/lib TESSERA_ZOO=$D/zoo TESSERA_ONNX_CHECK=$D/bin/tessera-onnx-check $D/tests/cuda_test
# Usage: scripts/gpu-pack.sh BUILD_DIR OUT.tar.xz [MODEL...]
set -euo pipefail
BUILD=${1:?build dir}
OUT=${2:?archive to write}
shift 2
MODELS=${*:-mlp add_chain add_chains8}
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/tests" "$STAGE/zoo"
cp "$BUILD/bin/tessera" "$BUILD/bin/tessera-onnx-check" "$STAGE/bin/"
[[ -x $BUILD/bin/tessera-gpu-bench ]] && cp "$BUILD/bin/tessera-gpu-bench" "$STAGE/bin/"
[[ -x $BUILD/tests/cuda_test ]] && cp "$BUILD/tests/cuda_test" "$STAGE/tests/"
for exe in "$STAGE"/bin/* "$STAGE"/tests/*; do
  ldd "$exe" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
    *) cp -L "$lib" "$STAGE/lib/" ;;
  esac
done
for m in $MODELS; do cp "$BUILD/zoo/$m".* "$STAGE/zoo/"; done
tar -C "$STAGE" -cJf "$OUT" .
echo "gpu-pack: $(du -h "$OUT" | cut -f1) in $OUT"
