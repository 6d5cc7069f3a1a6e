# attnlab: the two commands of the README, plus a few for developers.
#   make demo            install missing Debian packages, build (Release), run the main job
#   make test            same set-up, then every test through CTest
#   make cli             only the library and build/attnlab (what `make demo` builds)
#   make test-sanitize   the whole suite under AddressSanitizer + UndefinedBehaviorSanitizer
#   make bench           attnlab against PyTorch/OpenBLAS on this machine (needs python3-torch)
#   make bench-lra       every attention variant, N = 1K ... 16K: time and memory against mha
#   make bench-attention the fused attention kernel, N = 1K ... 32K, against PyTorch (minutes)
#   make bench-decode    decoding at context 4096: cache bytes per token and tokens/s against mha
#   make bench-mha-options  a training step with each mha option (one layer, then the reference LM)
#   make test-slurm      sweeps as job arrays under a local single-node Slurm (root; minutes; not in `make test`)
#   make fuzz            libFuzzer on every file and string parser, FUZZ_RUNS executions each (clang)
#   make docs            the API reference (Doxygen) in build/docs/html
#   make package         the Debian package build/attnlab_*.deb (CPack); make test-package tests it
#   make tidy            clang-tidy's bugprone and performance checks (.clang-tidy) over the library
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps deps-test docs package test-package tidy build cli demo test test-slurm test-sanitize fuzz bench bench-lra bench-attention bench-decode bench-mha-options clean

all: build

deps:
	@sh cmake/install-deps.sh

# `make test` and `make docs` also need doxygen (the test api/docs_complete checks the reference).
deps-test:
	@sh cmake/install-deps.sh test

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The demo needs only the library and the CLI: the test suite is built by `make test`.
cli: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target attnlab_cli

demo: cli
	./$(BUILD)/attnlab demo

test: deps-test build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

docs: deps-test $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) --target docs

# The .deb of the library, headers, CMake package files and build/attnlab (docs/testing.md,
# "The Debian package"); test-package installs it into a clean prefix and builds
# examples/own-project against it, and with apt-get where run as root.
package: cli
	cd $(BUILD) && cpack -G DEB

test-package: package
	sh scripts/package/test_package.sh $(BUILD)

# scripts/slurm/local_cluster.sh starts the cluster (installing slurm-wlm and munge if missing);
# the test submits sweeps with sbatch, requeues tasks mid-run and checks the results.
test-slurm: cli
	bash scripts/slurm/test_slurm.sh $(BUILD)

test-sanitize: deps
	cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DATTNLAB_SANITIZE=ON -DATTNLAB_NATIVE=OFF
	cmake --build build-sanitize -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-sanitize --output-on-failure -j $(JOBS)

# Not part of `test` or `demo`: needs clang, and takes long (docs/fuzzing.md). -O1 with line
# tables: libFuzzer's recommended trade between compile time, speed and readable stack traces.
FUZZ_RUNS ?= 1000000
fuzz: deps
	cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" \
	  -DCMAKE_CXX_COMPILER=clang++ -DATTNLAB_FUZZ=ON \
	  -DATTNLAB_SANITIZE=ON -DATTNLAB_NATIVE=OFF -DATTNLAB_BUILD_TESTS=OFF $(CMAKE_FLAGS)
	cmake --build build-fuzz -j $(JOBS) --target fuzz_targets
	sh fuzz/run.sh build-fuzz $(FUZZ_RUNS)

# Not part of `test`: about 9 s of CPU per file, some 13 minutes over the library's 87 files on
# one core. A separate configure exports compile_commands.json for it.
tidy: deps
	cmake -S . -B build-tidy -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DATTNLAB_BUILD_TESTS=OFF $(CMAKE_FLAGS)
	run-clang-tidy -quiet -j $(JOBS) -p build-tidy '^$(CURDIR)/(tensor|autograd|nn|optim|dist)/.*\.cpp$$'

bench: build
	cmake --build $(BUILD) -j $(JOBS) --target bench_ops bench_lm bench_generate
	sh bench/run.sh $(BUILD)
	sh bench/run_lm.sh $(BUILD)
	sh bench/run_generate.sh $(BUILD)

bench-lra: build
	cmake --build $(BUILD) -j $(JOBS) --target bench_lra
	./$(BUILD)/bench/bench_lra --out $(BUILD)/bench

bench-attention: build
	cmake --build $(BUILD) -j $(JOBS) --target bench_attention
	sh bench/run_attention.sh $(BUILD)

bench-decode: build
	cmake --build $(BUILD) -j $(JOBS) --target bench_decode
	./$(BUILD)/bench/bench_decode

bench-mha-options: build
	cmake --build $(BUILD) -j $(JOBS) --target bench_mha_options
	./$(BUILD)/bench/bench_mha_options
	./$(BUILD)/bench/bench_mha_options --lm

clean:
	rm -rf $(BUILD) build-sanitize build-fuzz
