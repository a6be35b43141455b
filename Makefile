# gpubroker: the two commands of the quick start are `make run` and `make test`.
# Everything else is here for development and CI.

BUILD          ?= build
SANITIZE_BUILD ?= build-sanitize
FUZZ_BUILD     ?= build-fuzz
DEB_BUILD      ?= build-deb
JOBS           ?= $(shell nproc 2>/dev/null || echo 2)
BUILD_TYPE     ?= RelWithDebInfo
CMAKE_FLAGS    ?=
ARGS           ?=
FUZZ_SECONDS   ?= 60
SOAK_SECONDS   ?= 600

SOURCES = $(shell git ls-files '*.cc' '*.c' '*.h' '*.hpp' 2>/dev/null)

.PHONY: all deps configure build run test test-sanitize fuzz demo bench format format-check \
        docs deb dashboard-snapshot clean soak

all: build

deps:
	@./scripts/install-deps.sh

configure: deps
	@[ -f $(BUILD)/CMakeCache.txt ] || cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	    -DGPUBROKER_WERROR=ON $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j$(JOBS)

# The daemon in the foreground with its defaults (the CUDA backend where a GPU
# is usable, the host backend otherwise). Extra flags: make run ARGS="--log-level debug".
run: build
	$(BUILD)/bin/gpubrokerd $(ARGS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# The whole suite again under AddressSanitizer and UndefinedBehaviorSanitizer
# (clang, which also checks the lock annotations with -Wthread-safety).
test-sanitize: deps
	@[ -f $(SANITIZE_BUILD)/CMakeCache.txt ] || CC=clang CXX=clang++ cmake -S . -B $(SANITIZE_BUILD) \
	    -DCMAKE_BUILD_TYPE=Debug -DGPUBROKER_SANITIZE=ON -DGPUBROKER_WERROR=ON \
	    -DGPUBROKER_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build $(SANITIZE_BUILD) -j$(JOBS)
	cd $(SANITIZE_BUILD) && \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j$(JOBS)

# libFuzzer on what gpubroker reads from other processes, FUZZ_SECONDS each,
# from the seed corpora:
# the frame decoder, the frames' calls served by the daemon's core, and a
# ticket's fields as a receiving client reads them.
FUZZERS = frame_decoder_fuzzer:corpus session_calls_fuzzer:calls_corpus \
          ticket_fields_fuzzer:ticket_corpus
fuzz: deps
	@[ -f $(FUZZ_BUILD)/CMakeCache.txt ] || CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) \
	    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUBROKER_FUZZ=ON -DGPUBROKER_BUILD_BENCH=OFF \
	    -DGPUBROKER_BUILD_TESTS=ON $(CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target frame_decoder_fuzzer session_calls_fuzzer \
	    ticket_fields_fuzzer
	@set -e; for f in $(FUZZERS); do \
	  name=$${f%%:*}; seeds=$${f##*:}; \
	  rm -rf $(FUZZ_BUILD)/$$seeds && mkdir -p $(FUZZ_BUILD)/$$seeds && \
	  cp tests/fuzz/$$seeds/* $(FUZZ_BUILD)/$$seeds/; \
	  echo "== $$name ($(FUZZ_SECONDS) s)"; \
	  $(FUZZ_BUILD)/bin/$$name -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	      -artifact_prefix=$(FUZZ_BUILD)/$$name- $(FUZZ_BUILD)/$$seeds; \
	done

# A daemon on a temporary directory, a producer and a consumer process.
demo: build
	./scripts/demo.sh $(BUILD)/bin

# Sixteen clients for ten minutes of mixed calls and SIGKILLs against one
# daemon: nothing may leak, the daemon's RSS and descriptors stay flat (see
# docs/reliability.md). Shorter: make soak SOAK_SECONDS=120. Not part of CI.
soak: build
	$(BUILD)/bin/gpubroker-soak --duration $(SOAK_SECONDS) $(ARGS)

bench: build
	$(BUILD)/bin/gpubroker-bench $(ARGS)

# A Debian package of an optimized /usr build (CPack; dependencies from
# dpkg-shlibdeps). deploy/container/build.sh installs it into a clean Debian 12.
deb: deps
	@[ -f $(DEB_BUILD)/CMakeCache.txt ] || cmake -S . -B $(DEB_BUILD) -DCMAKE_BUILD_TYPE=Release \
	    -DCMAKE_INSTALL_PREFIX=/usr -DGPUBROKER_BUILD_TESTS=OFF -DGPUBROKER_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build $(DEB_BUILD) -j$(JOBS)
	cd $(DEB_BUILD) && cpack -G DEB
	@ls $(DEB_BUILD)/*.deb

format:
	clang-format -i $(SOURCES)

format-check:
	@clang-format --dry-run -Werror $(SOURCES) && echo "format: $(words $(SOURCES)) files clean"

# docs/configuration.md's option table comes from the daemon's option table.
docs: build
	./scripts/update-config-docs.sh $(BUILD)/bin/gpubrokerd docs/configuration.md

# deploy/grafana/gpubroker.json's panels drawn from a live run under load,
# scraped by a real Prometheus (docs/images/dashboard.png; needs root and
# python3-matplotlib; about three minutes).
dashboard-snapshot: build
	/usr/bin/python3 scripts/dashboard-snapshot.py --bin-dir $(BUILD)/bin --out docs/images/dashboard.png

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD) $(FUZZ_BUILD) $(DEB_BUILD)
