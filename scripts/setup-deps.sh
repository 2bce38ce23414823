#!/usr/bin/env bash
# Installs the Debian packages that Tessera's build, tests and model zoo need.
# Idempotent: packages already present are skipped, and apt is not touched at
# all when nothing is missing. Runs as root with no standard input (CI).
#
#   scripts/setup-deps.sh            build + test + zoo dependencies
#   scripts/setup-deps.sh --bench    also the math libraries compared in
#                                    docs/math-libraries.md
set -euo pipefail

packages=(
  # build and test
  cmake ninja-build g++ clang libclang-rt-14-dev libomp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # model format
  libonnx-dev libprotobuf-dev protobuf-compiler
  # math inside rTasks (chosen by measurement, see docs/math-libraries.md)
  libdnnl-dev
  # CPU topology for pinning vEUs; the host map's file and --json output
  libhwloc-dev nlohmann-json3-dev
  # tesserad: its config, its workers' sandbox, its Prometheus metrics
  libtomlplusplus-dev libseccomp-dev prometheus-cpp-dev
  # .npz inputs (deflate)
  zlib1g-dev
  # model zoo and references
  python3-numpy python3-torch python3-torchvision python3-onnx
  # the Python module (python/): its build, its tests, pip install ./python
  pybind11-dev python3-dev python3-pytest python3-setuptools python3-pip
)

if [[ "${1:-}" == "--bench" ]]; then
  packages+=(libopenblas-dev libblis-dev libxsmm-dev libxnnpack-dev)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
echo "setup-deps: done"
