# wgml — the two commands a user needs:
#   make demo   install deps (the library's, the command's and the demo's), build, run the main job
#   make test   install those and the tests' tools (deps-test), build, run the tests, then a
#               short fuzz run of the loaders
BUILD ?= build
CLANG_BUILD ?= build-clang
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
# Seconds of fuzzing in `make test` (`make fuzz` runs scripts/fuzz.sh's default, 60 s);
# either takes FUZZ_SECONDS from the command line or the environment.
TEST_FUZZ_SECONDS = $(or $(FUZZ_SECONDS),30)
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
ifdef WGPU_NATIVE_DIR
CMAKE_FLAGS += -DWGPU_NATIVE_DIR=$(WGPU_NATIVE_DIR)
endif

.PHONY: deps deps-test build demo test test-clang asan bench clean fuzz install

deps:
	@./scripts/deps.sh

# clang, OpenBLAS, Open MPI, Vulkan's headers, SPIR-V tools: before the build, which looks for them
deps-test:
	@./scripts/deps.sh --test

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	./scripts/demo.sh $(BUILD)

# The libFuzzer builds of the safetensors and IDX readers (clang, ASan, UBSan), in their
# own folder; scripts/fuzz.sh splits the fuzzing time between them.
define fuzz_build
	@cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DWGML_FUZZ=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_safetensors fuzz_idx
endef

test: deps-test
	@$(MAKE) --no-print-directory build
	cd $(BUILD) && ctest --output-on-failure -j 2
	$(fuzz_build)
	FUZZ_SECONDS=$(TEST_FUZZ_SECONDS) ./scripts/fuzz.sh $(FUZZ_BUILD)

# The same tests built by clang (the compiler scripts/deps.sh installs, also used for the
# fuzz builds), in their own folder: both compilers build with -Werror, so a warning or an
# extension only one of them has (gcc's _Float16 on x86-64, say) fails here, not for a user.
test-clang: deps-test
	@cmake -S . -B $(CLANG_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(CLANG_BUILD) -j $(JOBS)
	cd $(CLANG_BUILD) && XDG_RUNTIME_DIR=/tmp ctest --output-on-failure -j 2

asan: deps-test
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DWGML_SANITIZE=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j 2

fuzz: deps-test
	$(fuzz_build)
	./scripts/fuzz.sh $(FUZZ_BUILD)

bench: build
	./$(BUILD)/wgml bench

# wgml.h and wgml_gpt.h, libwgml.so.0 and libwgml.a, wgpu-native (lib/wgml/, private), the
# wgml command, wgml.pc, the CMake package (lib/cmake/wgml) and the LICENSE under PREFIX
# (cmake --install does the same)
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(CLANG_BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
