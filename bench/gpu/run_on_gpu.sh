#!/usr/bin/env bash
# The GPU checks and benchmark, on a machine with a GPU and PyTorch that can
# install nothing, from an archive made here by
#   scripts/gpu-pack.sh build PACK.tar.xz mlp add_chain add_chains8 bert_tiny lstm_tc nasnet_like
# ResNet-18 and MobileNetV2 are too large to carry with the rest: they are
# exported there from their seeds (scripts/make_zoo.py), and the benchmark
# checks that PyTorch's outputs there match the zoo's.
# Usage (from the repository root): bench/gpu/run_on_gpu.sh PACK.tar.xz OUT_DIR [gpu_bench.py options]
set -uo pipefail
PACK=${1:?archive}
OUT=${2:?output folder}
shift 2
mkdir -p "$OUT"
D=$(mktemp -d)
tar -C "$D" -xJf "$PACK" || exit 1
export LD_LIBRARY_PATH=$D/lib TESSERA_ZOO=$D/zoo TESSERA_ONNX_CHECK=$D/bin/tessera-onnx-check PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
python3 scripts/make_zoo.py --out "$D/zoo" --only resnet18,mobilenet_v2 2>&1 | grep -v Warning | tail -3
echo "run_on_gpu: zoo exported in $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout "${BENCH_TIMEOUT:-230}" python3 bench/gpu/gpu_bench.py --bench "$D/bin/tessera-gpu-bench" --zoo "$D/zoo" \
  --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log" | grep -v "^W1\|Warning"
echo "run_on_gpu: gpu_bench exit ${PIPESTATUS[0]} in $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout "${TEST_TIMEOUT:-110}" "$D/tests/cuda_test" --gtest_filter="CudaGpu.*" > "$OUT/cuda_test.log" 2>&1
echo "run_on_gpu: cuda_test exit $? in $(( $(date +%s) - t0 )) s"
grep -E "Failure|Expected|Which is|differs|OK \]|FAILED|PASSED|SKIPPED|error" "$OUT/cuda_test.log" | head -40
