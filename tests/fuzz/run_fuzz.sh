#!/usr/bin/env bash
# Runs the importer fuzzer: run_fuzz.sh FUZZ_BUILD_DIR SECONDS
# The corpus lives in FUZZ_BUILD_DIR/corpus (seeded with small models) and
# grows across runs; crashes are written to FUZZ_BUILD_DIR/crashes/.
set -euo pipefail
build=${1:?fuzz build dir}
seconds=${2:-30}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build/corpus" "$build/crashes"
/usr/bin/python3 "$here/make_seeds.py" "$build/seeds"
echo "fuzz_onnx_import: ${seconds}s"
"$build/bin/fuzz_onnx_import" "$build/corpus" "$build/seeds" -max_total_time="$seconds" -rss_limit_mb=4096 \
  -max_len=65536 -timeout=10 -print_final_stats=1 -artifact_prefix="$build/crashes/" 2>"$build/fuzz.log" || {
  tail -60 "$build/fuzz.log"
  echo "fuzz_onnx_import: FAILED (see $build/crashes/)"
  exit 1
}
grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$build/fuzz.log" || true
echo "fuzz_onnx_import: no crashes"
