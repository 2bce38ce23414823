# Tessera — top-level entry points. `make demo` and `make test` work on a
# fresh machine: they install what is missing (scripts/setup-deps.sh), build
# with CMake + Ninja into build/, and generate the model zoo on demand.
#
#   make build      configure and build (binaries in build/bin/)
#   make demo       build, generate the example model, run it with `tessera run`
#   make test       build and run every test (unit, conformance, zoo, CLI, fuzz smoke)
#   make zoo        export the model zoo (build/zoo/) and the extra set of
#                   unseen-kind models (build/zoo-extra/) with PyTorch
#   make fuzz       build the libFuzzer targets (build-asan/) and run them longer
#   make asan       build and test with AddressSanitizer + UBSan (build-asan/,
#                   clang, one build with the fuzz targets)
#   make tsan       ThreadSanitizer on the thread pool and the plan executor
#                   under random schedules (build-tsan/)
#   make bench      Tessera vs ONNX Runtime and PyTorch, interleaved; writes
#                   bench/RESULTS.md (bench-quick: a short smoke run)
#   make bench-gemm measure tile-sized GEMM across math libraries
#   make soak       tesserad under load for longer (many clients x runs)
#   make clean      remove build outputs
#
# Variables: BUILD_TYPE (Release), WERROR (the main build's -Werror: ON in CI),
# JOBS, FUZZ_SECONDS.
#
# The sanitizer builds carry line tables only (-g1): enough for
# file:line in every report, and their compiles take a fifth to two fifths
# less time than with full debug information. They optimize at -O1 but
# for the kernels (-O2, where their tests spend their time): the ASan
# build takes a quarter less CPU time than at -O2, and its suites run
# as fast. They are developer builds,
# so they always treat warnings as errors: the ASan build is the one clang
# compile, and its warnings differ from gcc's with the host's ISA (an
# AVX2 host leaves AVX-512-only helpers unused).

BUILD_TYPE ?= Release
WERROR ?= $(if $(CI),ON,OFF)
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 300
SAN_FLAGS := -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG"
PYTHON := /usr/bin/python3
BUILD := build
TESSERA := $(BUILD)/bin/tessera

.PHONY: all deps configure build demo test check-erf zoo fuzz fuzz-smoke asan tsan bench bench-quick bench-deps bench-gemm bench-gpu soak clean

all: build

deps:
	@bash scripts/setup-deps.sh

$(BUILD)/build.ninja: CMakeLists.txt
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DTESSERA_WERROR=$(WERROR)

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

zoo: deps
	$(PYTHON) scripts/make_zoo.py --out $(BUILD)/zoo
	$(PYTHON) scripts/make_zoo.py --set extra --out $(BUILD)/zoo-extra
	$(PYTHON) scripts/make_zoo.py --out $(BUILD)/zoo-extra --opset 11 --suffix _opset11 \
	  --only bert_tiny,nasnet_like,mlp,transformer_encoder,gru_bidirectional,unet_tiny,char_lm

demo: build
	@$(PYTHON) scripts/make_zoo.py --out $(BUILD)/zoo --only resnet18
	$(TESSERA) run $(BUILD)/zoo/resnet18.onnx --input $(BUILD)/zoo/resnet18.inputs.npz --iters 10

test: build zoo
	cd $(BUILD) && ctest --output-on-failure -j 1
	@$(MAKE) --no-print-directory fuzz-smoke

# erf against every float in [-4.5, 4.5] (the unit test checks a dense grid).
check-erf: build
	$(BUILD)/tests/erf_every_float

# One clang build with AddressSanitizer + UBSan (build-asan/) serves the
# fuzzers and the sanitized suites: the library is compiled once for both.
# The code the fuzzers reach carries libFuzzer's coverage (not the kernels,
# calibration, run path or profiler: tessera_no_fuzz_coverage); the test programs
# link without libFuzzer, and the sanitizer runtime answers the hooks.
SAN_BUILD := build-asan
$(SAN_BUILD)/build.ninja: CMakeLists.txt Makefile
	@# A gcc build left there (before it was clang's) is configured afresh.
	@grep -qs '^CMAKE_CXX_COMPILER:.*clang' $(SAN_BUILD)/CMakeCache.txt || rm -rf $(SAN_BUILD)/CMakeCache.txt $(SAN_BUILD)/CMakeFiles
	cmake -S . -B $(SAN_BUILD) -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DTESSERA_SANITIZE="address;undefined" -DTESSERA_FUZZ=ON -DTESSERA_WERROR=ON $(SAN_FLAGS)

fuzz-build: deps $(SAN_BUILD)/build.ninja
	cmake --build $(SAN_BUILD) -j $(JOBS) --target fuzz_onnx_import fuzz_executable_load fuzz_daemon_request

# A short run inside `make test`; `make fuzz` runs longer. The Executable
# seeds are compiled by the main build's CLI.
fuzz-smoke: build fuzz-build
	bash tests/fuzz/run_fuzz.sh $(SAN_BUILD) 30 $(TESSERA)

fuzz: build fuzz-build
	bash tests/fuzz/run_fuzz.sh $(SAN_BUILD) $(FUZZ_SECONDS) $(TESSERA)

asan: zoo deps $(SAN_BUILD)/build.ninja
	cmake --build $(SAN_BUILD) -j $(JOBS)
	ln -sfn ../$(BUILD)/zoo $(SAN_BUILD)/zoo
	ln -sfn ../$(BUILD)/zoo-extra $(SAN_BUILD)/zoo-extra
	cd $(SAN_BUILD) && ctest --output-on-failure -j 1

# ONNX Runtime for baselines: the npm package's bundled CPU library; its
# install scripts (which would download) are skipped.
# ThreadSanitizer over the code that runs threads: the pool, the plan
# executor under random schedules (which reorder every wait and signal),
# the vDevice, and the API's sessions (submit, concurrent sessions).
TSAN_FILTER := *RandomSchedulesStress/mlp:*RandomSchedulesStress/add_chains8:*RandomSchedulesStress/bert_tiny:*BitwiseEqual*/nasnet_like
TSAN_API_FILTER := *Submit*:*Disjoint*:*BoundOutputIsWrittenInPlace*:*NullDevice*:*LastHandle*
# As ctest runs the others: the zoo, and a cache of the build's own (the
# test cache of CMakeLists.txt), not the user's.
TSAN_RUN := TESSERA_ZOO=$(BUILD)/zoo TESSERA_CACHE=$(CURDIR)/build-tsan/test-cache TSAN_OPTIONS=halt_on_error=1
tsan: zoo
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_SANITIZE=thread \
	  -DTESSERA_WERROR=ON $(SAN_FLAGS)
	cmake --build build-tsan -j $(JOBS) --target base_test plan_test devices_cpu_test contract_test api_test run_mode_test
	$(TSAN_RUN) build-tsan/tests/base_test
	$(TSAN_RUN) build-tsan/tests/devices_cpu_test
	$(TSAN_RUN) build-tsan/tests/contract_test
	$(TSAN_RUN) build-tsan/tests/plan_test --gtest_filter='$(TSAN_FILTER)'
	$(TSAN_RUN) build-tsan/tests/api_test --gtest_filter='$(TSAN_API_FILTER)'
	$(TSAN_RUN) build-tsan/tests/run_mode_test --gtest_filter='*/mlp:*/add_chains8:RunModeChooser.*:ListExchangeChooser.*:SpareCore*'

bench-deps:
	@test -d $(BUILD)/bench/node_modules/onnxruntime-node || \
	  npm install --ignore-scripts --no-save --no-audit --no-fund --prefix $(BUILD)/bench onnxruntime-node@1.20.1

bench: build zoo bench-deps
	$(PYTHON) bench/run_bench.py --build $(BUILD) --unseen
	$(PYTHON) bench/python_overhead.py --build $(BUILD) --out $(BUILD)/bench/RESULTS-python.md
	$(PYTHON) bench/daemon_bench.py --build $(BUILD) --out $(BUILD)/bench/RESULTS-daemon.md

# tesserad under load for longer: N clients x M runs, a hundred times the
# test's count.
soak: build zoo
	TESSERA_SOAK=1 PYTHONPATH=$(BUILD)/python TESSERA_BUILD=$(BUILD) $(PYTHON) -m pytest -q -s -p no:cacheprovider \
	  tests/daemon -k load

bench-quick: build zoo bench-deps
	$(PYTHON) bench/run_bench.py --build $(BUILD) --quick --out $(BUILD)/bench/RESULTS-quick.md

# Tessera on a GPU against PyTorch (eager, CUDA graph, torch.compile):
# needs a GPU, its driver and PyTorch with CUDA under $(PYTHON) (docs/cuda.md).
bench-gpu: build zoo
	@test -x $(BUILD)/bin/tessera-gpu-bench || { echo "bench-gpu: no CUDA backend in $(BUILD) (nvcc not found at configure)"; exit 1; }
	$(PYTHON) bench/gpu/gpu_bench.py --bench $(BUILD)/bin/tessera-gpu-bench --zoo $(BUILD)/zoo --out $(BUILD)/bench/gpu

bench-gemm:
	@bash scripts/setup-deps.sh --bench
	g++ -O2 -march=native -std=c++20 bench/gemm_tiles/gemm_tiles.cc -o $(BUILD)/gemm_tiles \
	  /usr/lib/libxsmm.a /usr/lib/libxsmmnoblas.a -ldl -lpthread -lm
	OMP_NUM_THREADS=1 $(BUILD)/gemm_tiles

clean:
	rm -rf $(BUILD) $(SAN_BUILD) build-tsan build-fuzz
