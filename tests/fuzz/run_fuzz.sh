#!/usr/bin/env bash
# Runs the libFuzzer targets: run_fuzz.sh FUZZ_BUILD_DIR SECONDS [TESSERA]
# The three run at once, SECONDS each: fuzz_onnx_import (ONNX bytes through the
# importer and compiler), fuzz_executable_load (Executable bytes through
# the loader, then a run) and fuzz_daemon_request (a client's bytes through
# tesserad's framing, decoding and validation). Corpora live in FUZZ_BUILD_DIR/corpus-<target>
# (seeded with small models) and grow across runs; crashes are written to
# FUZZ_BUILD_DIR/crashes/.
# TESSERA is the CLI that compiles the Executable seeds (default: the main
# build's, build/bin/tessera): the Executable format is the same in every
# build, so the sanitizer build need not build the CLI first.
set -euo pipefail
build=${1:?fuzz build dir}
seconds=${2:-30}
tessera=${3:-build/bin/tessera}
if [ ! -x "$tessera" ]; then
  echo "run_fuzz.sh: no tessera CLI at $tessera to compile the Executable seeds (make build first)" >&2
  exit 1
fi
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build/crashes"
# Whatever the seeds' compiles and the targets cache stays in the fuzz
# build, not in the user's cache.
export TESSERA_CACHE="$build/test-cache"
/usr/bin/python3 "$here/make_seeds.py" "$build/seeds"
# Executable seeds: the ONNX seeds that compile, for 1 to 3 vEUs and both
# policies, analytic costs (deterministic, no profiling).
mkdir -p "$build/seeds-tsx"
for f in "$build"/seeds/*.onnx; do
  for veus in 1 2 3; do
    for policy in wavefront critical-path; do
      "$tessera" compile "$f" -o "$build/seeds-tsx/$(basename "$f" .onnx)-$veus-$policy.tsx" \
        --veus "$veus" --policy "$policy" --no-profile --quiet 2>/dev/null || true
    done
  done
done
if ! ls "$build"/seeds-tsx/*.tsx >/dev/null 2>&1; then
  echo "run_fuzz.sh: no Executable seeds could be compiled" >&2
  exit 1
fi

# Daemon requests: seeds are good request sequences (Hello, then Status,
# Lease, Release, Load, Run, ...), written by make_seeds.py --daemon.
/usr/bin/python3 "$here/make_seeds.py" --daemon "$build/seeds-daemon" "$here/../../src"

# The three targets fuzz at once, SECONDS of wall time each (on fewer
# cores than targets they share them).
targets=() pids=()
start() {  # start TARGET SEEDS
  local target=$1 seeds=$2
  mkdir -p "$build/corpus-$target"
  echo "$target: ${seconds}s"
  "$build/bin/$target" "$build/corpus-$target" "$seeds" -max_total_time="$seconds" -rss_limit_mb=4096 \
    -max_len=65536 -timeout=10 -print_final_stats=1 -artifact_prefix="$build/crashes/$target-" \
    2>"$build/$target.log" &
  targets+=("$target")
  pids+=($!)
}
start fuzz_onnx_import "$build/seeds"
start fuzz_executable_load "$build/seeds-tsx"
start fuzz_daemon_request "$build/seeds-daemon"
failed=0
for i in "${!pids[@]}"; do
  target=${targets[$i]}
  if wait "${pids[$i]}"; then
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$build/$target.log" | sed "s/^/$target: /" || true
    echo "$target: no crashes"
  else
    tail -60 "$build/$target.log"
    echo "$target: FAILED (see $build/crashes/)"
    failed=1
  fi
done
exit $failed
