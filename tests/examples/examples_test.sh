#!/usr/bin/env bash
# Runs every program in examples/ on zoo models and checks what it prints.
# Usage: examples_test.sh BUILD_DIR (needs BUILD_DIR/zoo).
set -uo pipefail
BUILD=${1:?build dir}
BIN=$BUILD/bin
ZOO=$BUILD/zoo
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
expect() {  # expect NAME REGEX COMMAND...: COMMAND succeeds and prints a line matching REGEX
  local name=$1 re=$2
  shift 2
  if "$@" >"$TMP/out" 2>"$TMP/err" && grep -qE -- "$re" "$TMP/out"; then
    return 0
  fi
  echo "FAIL: $name (want /$re/)"
  sed 's/^/    /' "$TMP/out" "$TMP/err" | tail -15
  fail=$((fail + 1))
}
/usr/bin/python3 -c "import numpy as np; np.save('$TMP/x.npy', np.load('$ZOO/resnet18.inputs.npz')['input'])"
expect "classify with an input" '^class +[0-9]+  p = 0\.[0-9]{4}$' "$BIN/classify" "$ZOO/resnet18.onnx" "$TMP/x.npy"
[[ $(grep -c '^class ' "$TMP/out") -eq 5 ]] || { echo "FAIL: classify printed no five classes"; fail=$((fail + 1)); }
expect "classify without one" '^class ' "$BIN/classify" "$ZOO/mobilenet_v2.onnx"
if "$BIN/classify" "$ZOO/resnet18.onnx" /nonexistent.npy >/dev/null 2>"$TMP/err" || ! grep -q /nonexistent.npy "$TMP/err"; then
  echo "FAIL: classify on a missing input file must fail naming it"
  fail=$((fail + 1))
fi
expect "two sessions" 'beside the other' "$BIN/two_sessions" "$ZOO/mlp.onnx" "$ZOO/resnet18.onnx"
if (($(nproc) >= 2)); then
  # Two cores or more: the two sessions' cores differ.
  cores=$(grep -oE 'core [0-9]+' "$TMP/out" | sort -u | wc -l)
  [[ $cores -eq 2 ]] || { echo "FAIL: two_sessions shared a core"; cat "$TMP/out"; fail=$((fail + 1)); }
fi
expect "async" '^request 5: output 1x1000' "$BIN/async" "$ZOO/mobilenet_v2.onnx" 6
if "$BIN/async" >/dev/null 2>"$TMP/err" || ! grep -q usage "$TMP/err"; then
  echo "FAIL: async without arguments must fail with its usage"
  fail=$((fail + 1))
fi
if ((fail)); then
  echo "examples_test: $fail failed"
  exit 1
fi
echo "examples_test: classify, two_sessions and async ran as documented"
