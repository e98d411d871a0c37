# TaskPatch — plain GNU make.
#
#   make                 build build/bin/{taskpatch,tpctl,taskpatchd} and build/lib/libtaskpatch.a
#   make deps            install what the build, tests and benchmarks need (Debian 12, apt-get)
#   make demo            the main job: show what TaskPatch does on this machine
#   make check           the whole test suite (what CI runs); parts: check-lint, check-claims,
#                        check-unit, check-oracle, check-runtimes, check-integration, check-crash,
#                        check-order, check-fuzz, check-asan, check-arm, check-deb
#   make check-crash-full   every crash and error point, 200 random kills (check-crash: a sample)
#   make arm64           cross-build everything for aarch64 into build/arm64/
#   make asan            build with AddressSanitizer + UBSan into build/asan/ and run the tests
#   make bench-hash      SHA-256 benchmark against openssl and sha256sum
#   make bench-bundle    bundle size and apply time against bsdiff, xdelta3, zstd, cp + openssl
#   make bench-switch    device switch time, bytes written, status latency and memory
#   make bench-fleet     idle poll bytes (304) vs an unconditional GET, TLS handshake, nginx polls/s
#   make bench-quant     quantizer MB/s per type against ggml's ggml_quantize_chunk
#   make bench-fold      taskpatch quantize / fold time and RSS against llama_model_quantize
#   make bench-lora      llama.cpp decode tokens/s: folded task model vs base + LoRA at run time
#   make readme-numbers  regenerate the README's Numbers from tests/bench/results/*.json
#   make install / uninstall   PREFIX=/usr/local DESTDIR=: the binaries, man pages, systemd units,
#                        sysusers.d, tmpfiles.d, bash completions, and SYSCONFDIR/taskpatch/taskpatchd.yaml
#                        unless present (dirs: UNITDIR= SYSUSERSDIR= TMPFILESDIR= BASHCOMPDIR= SYSCONFDIR=/etc)
#   make deb             build/deb/taskpatch_<version>_<arch>.deb (dpkg-buildpackage); ARCH=arm64 cross-builds
#   make check-deb       build the .deb, then lintian, its contents, its binaries, its units (systemd-analyze)
#
# Variables: BUILD (output dir), CROSS (toolchain prefix), WERROR=0 to drop -Werror,
# SANITIZE=1 for ASan+UBSan, V=1 for full commands.

VERSION := 0.1.0

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
DESTDIR ?=

BUILD ?= build
CROSS ?=
ifeq ($(origin CC),default)
CC := $(CROSS)gcc
endif
AR := $(CROSS)ar
PKG_CONFIG ?= pkg-config

ARCH := $(shell $(CC) -dumpmachine 2>/dev/null | cut -d- -f1)
TRIPLET := $(shell $(CC) -dumpmachine 2>/dev/null)

ifneq ($(CROSS),)
# Debian multiarch: the target's .pc files live under its triplet.
PKG_CONFIG := PKG_CONFIG_LIBDIR=/usr/lib/$(TRIPLET)/pkgconfig:/usr/share/pkgconfig $(PKG_CONFIG)
endif

ifeq ($(V),1)
Q :=
else
Q := @
endif

# ---- dependencies ----------------------------------------------------------

PKGS := libsystemd libcurl yaml-0.1 libzstd jansson p11-kit-1 libcrypto
# mbedTLS 2.28 ships no .pc file.
MBEDTLS_LIBS := -lmbedtls -lmbedx509 -lmbedcrypto

NODEPS_GOALS := deps clean help distclean
ifneq ($(filter-out $(NODEPS_GOALS),$(or $(MAKECMDGOALS),all)),)
PKG_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null)
ifeq ($(PKG_LIBS),)
$(error pkg-config cannot find $(PKGS) for $(TRIPLET): run 'make deps' first)
endif
CHECK_CFLAGS := $(shell $(PKG_CONFIG) --cflags check)
CHECK_LIBS := $(shell $(PKG_CONFIG) --libs check)
endif

# ---- flags -----------------------------------------------------------------

CFLAGS ?= -O2 -g
WERROR ?= 1
WARNINGS := -Wall -Wextra -Wformat=2 -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wno-missing-field-initializers -Wvla
ifeq ($(WERROR),1)
WARNINGS += -Werror
endif
HARDEN_CFLAGS := -fstack-protector-strong -fPIE
HARDEN_LDFLAGS := -pie -Wl,-z,relro -Wl,-z,now -Wl,--as-needed

ifeq ($(FUZZ),1)
# libFuzzer: instrument everything, link the fuzzer main only into the targets.
CFLAGS := -O1 -g -fno-omit-frame-pointer
SAN_FLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
else ifeq ($(SANITIZE),1)
CFLAGS := -O1 -g -fno-omit-frame-pointer
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all
else
# Fortify needs optimisation and conflicts with ASan's interceptors.
HARDEN_CFLAGS += -D_FORTIFY_SOURCE=2
endif

# common/ is one library in layers (common/README.md), each including only kernels/ and the layers
# before it (tests/lint.sh checks it); headers are included by name, so every layer is on the path.
COMMON_LAYERS := base text artifact codec bundle device model
INCLUDES := -Ikernels $(addprefix -Icommon/,$(COMMON_LAYERS)) -Icli -Idaemon
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -DTASKPATCH_VERSION='"$(VERSION)"' $(INCLUDES) $(WARNINGS) \
             $(HARDEN_CFLAGS) $(SAN_FLAGS) $(PKG_CFLAGS) -pthread $(CFLAGS) -MMD -MP
ALL_LDFLAGS = $(HARDEN_LDFLAGS) $(SAN_FLAGS) -pthread $(LDFLAGS)
LIBS = $(PKG_LIBS) $(MBEDTLS_LIBS) -lm

# ---- sources ---------------------------------------------------------------

KERNEL_SRCS := kernels/cpu.c kernels/dispatch.c kernels/sha256.c kernels/sha256-generic.c \
               kernels/quant.c kernels/dequant.c kernels/quant-generic.c kernels/quant-generic-k.c \
               kernels/quant-weighted.c kernels/product.c
KERNEL_SRCS_x86_64 := kernels/sha256-x86-shani.c kernels/sha256-x86-avx2.c kernels/quant-x86-avx2.c \
                      kernels/quant-x86-avx2-k.c kernels/predict-x86-avx2.c
KERNEL_SRCS_aarch64 := kernels/sha256-arm64-ce.c kernels/sha256-arm64-neon.c kernels/quant-arm64-neon.c \
                       kernels/quant-arm64-neon-k.c kernels/predict-arm64-neon.c
KERNEL_SRCS += $(KERNEL_SRCS_$(ARCH))

# Every common/<layer>/*.c is part of libtaskpatch.
COMMON_SRCS := $(wildcard $(addsuffix /*.c,$(addprefix common/,$(COMMON_LAYERS))))

# What both tools link. taskpatch's own helpers (models, signers, keys) are in taskpatch-common.c, so
# that tpctl, a socket client, loads neither libcrypto nor mbedTLS nor p11-kit at every call.
CLI_SHARED_SRCS := cli/cli.c
TASKPATCH_SRCS := $(wildcard cli/taskpatch*.c)
TPCTL_SRCS := $(wildcard cli/tpctl*.c)
# The daemon: main() in taskpatchd.c; everything else goes into libtaskpatchd.a,
# which the unit tests link too.
TASKPATCHD_SRCS := daemon/taskpatchd.c
DAEMON_LIB_SRCS := $(filter-out $(TASKPATCHD_SRCS),$(wildcard daemon/*.c))

UNIT_SRCS := $(wildcard tests/unit/check_*.c)
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
TOOL_SRCS := $(wildcard tests/tools/*.c)
BENCH_SRCS := tests/bench/bench-sha256.c tests/bench/delta-eval.c

OBJ := $(BUILD)/obj
LIB := $(BUILD)/lib/libtaskpatch.a
DLIB := $(BUILD)/lib/libtaskpatchd.a
BINS := $(BUILD)/bin/taskpatch $(BUILD)/bin/tpctl $(BUILD)/bin/taskpatchd
UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))
TOOLS := $(patsubst tests/tools/%.c,$(BUILD)/tools/%,$(TOOL_SRCS))
FUZZERS := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRCS))
BENCHES := $(patsubst tests/bench/%.c,$(BUILD)/bench/%,$(BENCH_SRCS))

objs = $(patsubst %.c,$(OBJ)/%.o,$(1))

# Per-object instruction-set flags: only these files may use these instructions.
$(OBJ)/kernels/sha256-x86-shani.o: ISA_FLAGS := -msse4.1 -msha
$(OBJ)/kernels/sha256-x86-avx2.o: ISA_FLAGS := -mavx2
$(OBJ)/kernels/sha256-arm64-ce.o: ISA_FLAGS := -march=armv8-a+crypto
$(OBJ)/kernels/sha256-arm64-neon.o: ISA_FLAGS := -march=armv8-a
# Quantizers must round like ggml: no fused multiply-add (GCC fuses on aarch64 by default);
# sqrtf() as one instruction, without libm.
QUANT_FP_FLAGS := -ffp-contract=off -fno-math-errno
$(call objs,kernels/quant.c kernels/quant-generic.c kernels/quant-generic-k.c kernels/quant-weighted.c \
        kernels/dequant.c kernels/product.c): \
        ISA_FLAGS := $(QUANT_FP_FLAGS)
$(call objs,kernels/quant-x86-avx2.c kernels/quant-x86-avx2-k.c kernels/predict-x86-avx2.c): ISA_FLAGS := -mavx2 $(QUANT_FP_FLAGS)
$(call objs,kernels/quant-arm64-neon.c kernels/quant-arm64-neon-k.c kernels/predict-arm64-neon.c): \
        ISA_FLAGS := -march=armv8-a $(QUANT_FP_FLAGS)
# The lora prediction rounds as the fold does (common/codec/predict.h); its residual coder places
# each element as every device must (predict-ac.h).
$(OBJ)/common/codec/predict.o $(OBJ)/common/codec/predict-ac.o: ISA_FLAGS := $(QUANT_FP_FLAGS)

# The build time is the clock's floor (common/base/clock.h): a device clock reading earlier is unset.
BUILD_EPOCH := $(or $(SOURCE_DATE_EPOCH),$(shell git log -1 --format=%ct 2> /dev/null),$(shell date +%s))
$(OBJ)/common/base/clock.o: OBJ_DEFS := -DTASKPATCH_BUILD_EPOCH=$(BUILD_EPOCH)

# ---- build -----------------------------------------------------------------

.PHONY: all
all: $(BINS) $(LIB)

$(OBJ)/%.o: %.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) $(ISA_FLAGS) $(OBJ_DEFS) -c $< -o $@

$(LIB): $(call objs,$(KERNEL_SRCS) $(COMMON_SRCS))
	@mkdir -p $(@D)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^

define link
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(1) $(LIB) $(LIBS)
endef

$(BUILD)/bin/taskpatch: $(call objs,$(TASKPATCH_SRCS) $(CLI_SHARED_SRCS)) $(LIB)
	$(call link,$(call objs,$(TASKPATCH_SRCS) $(CLI_SHARED_SRCS)))

$(BUILD)/bin/tpctl: $(call objs,$(TPCTL_SRCS) $(CLI_SHARED_SRCS)) $(LIB)
	$(call link,$(call objs,$(TPCTL_SRCS) $(CLI_SHARED_SRCS)))

$(DLIB): $(call objs,$(DAEMON_LIB_SRCS))
	@mkdir -p $(@D)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/bin/taskpatchd: $(call objs,$(TASKPATCHD_SRCS)) $(DLIB) $(LIB)
	$(call link,$(call objs,$(TASKPATCHD_SRCS)) $(DLIB))

$(BUILD)/tests/check_%: $(OBJ)/tests/unit/check_%.o $(DLIB) $(LIB)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(DLIB) $(LIB) $(CHECK_LIBS) $(LIBS)

$(OBJ)/tests/unit/%.o: ALL_CFLAGS += $(CHECK_CFLAGS) -Itests/unit

$(BUILD)/bench/%: $(OBJ)/tests/bench/%.o $(LIB)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(LIB) $(LIBS)

# Keep test objects between runs.
.SECONDARY:

# Fixture generators and test helpers (may dlopen() reference libraries, e.g. ggml).
$(BUILD)/tools/%: $(OBJ)/tests/tools/%.o $(LIB)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(LIB) $(LIBS) -ldl -lm

# libtaskpatchd.a too, for the daemon's own parsers (fuzz_state); a target pulls in only what it uses.
$(BUILD)/fuzz/%: $(OBJ)/tests/fuzz/%.o $(DLIB) $(LIB)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -fsanitize=fuzzer -o $@ $< $(DLIB) $(LIB) $(LIBS)

.PHONY: fuzz-build
fuzz-build: $(FUZZERS)

.PHONY: tests-build
tests-build: all $(UNIT_TESTS) $(BENCHES) $(TOOLS)

-include $(shell find $(OBJ) -name '*.d' 2>/dev/null)

# ---- tests -----------------------------------------------------------------

# The whole suite: every part runs even when an earlier one fails; one closing line.
# Two lanes of about equal length carry the long parts: asan then arm, beside integration then crash.
CHECK_PARTS ?= lint claims unit oracle runtimes asan,arm+integration,crash order fuzz deb
.PHONY: check
check:
	@tests/check.sh $(CHECK_PARTS)

.PHONY: check-unit check-integration check-asan check-arm check-lint check-crash check-crash-full
check-unit: tests-build
	@tests/unit/run.sh $(BUILD)

check-integration: all $(TOOLS)
	@tests/integration/run.sh $(BUILD)

# Kill the daemon at its writes, renames and fsyncs during each operation, fail each of them
# with EIO and ENOSPC, kill it at random moments of a switch; check the invariants each time
# (tests/crash/run.sh). check-crash (and make check) runs a bounded sample, a few minutes;
# check-crash-full (or CRASH=full) every point and 200 random kills.
check-crash: all $(TOOLS)
	@tests/crash/run.sh $(BUILD) $(if $(filter full,$(CRASH)),,--quick)

check-crash-full: all $(TOOLS)
	@tests/crash/run.sh $(BUILD)

# The fsync ordering a power cut needs, proven on each operation's syscall trace (strace -f -y):
# tests/crash/order-trace.sh runs the operations, tests/crash/order-check.py holds them to the rules.
.PHONY: check-order
check-order: all $(TOOLS)
	@tests/crash/order-trace.sh $(BUILD)

check-asan asan:
	$(Q)$(MAKE) --no-print-directory BUILD=build/asan SANITIZE=1 tests-build
	@tests/check-asan.sh build/asan

check-arm: arm64
	@tests/check-arm.sh build/arm64

check-lint:
	@tests/lint.sh

# The README's Numbers section is rendered from tests/bench/numbers.md with the committed
# results (tests/bench/results/*.json): it must match them, every result must record its
# conditions, and no storage claim may come from tmpfs. After re-recording a benchmark:
# make readme-numbers.
.PHONY: check-claims readme-numbers
check-claims:
	@python3 tests/bench/claims.py check

readme-numbers:
	@python3 tests/bench/claims.py write

# libFuzzer targets (clang): make fuzz builds them into build/fuzz/; make fuzz-regress runs
# every seed corpus (tests/fuzz/corpus/<target>/) once. Longer runs: build/fuzz/fuzz_X -runs=N.
.PHONY: fuzz check-fuzz fuzz-regress
fuzz:
	$(Q)$(MAKE) --no-print-directory BUILD=build/fuzz CC=clang FUZZ=1 fuzz-build

check-fuzz fuzz-regress: fuzz
	@tests/fuzz/regress.sh build/fuzz

.PHONY: arm64
arm64:
	$(Q)$(MAKE) --no-print-directory BUILD=build/arm64 CROSS=aarch64-linux-gnu- tests-build

# ---- benchmarks ------------------------------------------------------------

.PHONY: bench bench-hash bench-bundle bench-switch bench-fleet
bench: bench-hash bench-bundle bench-switch bench-fleet

bench-hash: tests-build
	@tests/bench/hash.sh $(BUILD)

bench-bundle: tests-build
	@tests/bench/bundle.sh $(BUILD)

bench-switch: tests-build
	@tests/bench/switch.sh $(BUILD)

bench-fleet: tests-build
	@tests/bench/fleet.sh $(BUILD)

# ---- quantizers ----
# make check-oracle: kernels/quant* against ggml's own ggml_quantize_chunk (libggml-base.so of
# the pinned npm package), byte for byte, every type and every implementation this CPU runs;
# then tests/oracle/file-oracle.sh when present (tests/oracle/run.sh).
# make bench-quant: quantize_rows (best path and generic) against ggml_quantize_chunk, MB/s of
# floats in, per type (tests/bench/quant.sh; writes tests/bench/results/quant.json).
QUANT_ORACLE := $(BUILD)/oracle/quant-oracle
# Its inputs must be the same floats on every architecture (quant-oracle --digest).
$(OBJ)/tests/oracle/quant-oracle.o: ISA_FLAGS := -ffp-contract=off

$(QUANT_ORACLE): $(OBJ)/tests/oracle/quant-oracle.o $(LIB)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(LIB) $(LIBS) -ldl -lm

$(BUILD)/bench/bench-quant: $(OBJ)/tests/bench/bench-quant.o $(LIB)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(LIB) $(LIBS) -ldl -lm

tests-build: $(BUILD)/bench/bench-quant $(QUANT_ORACLE)

.PHONY: check-oracle bench-quant
check-oracle: all $(TOOLS) $(QUANT_ORACLE)
	@tests/oracle/run.sh $(BUILD)

bench-quant: $(BUILD)/bench/bench-quant
	@tests/bench/quant.sh $(BUILD)
# ---- end quantizers ----

# ---- runtimes ----
# make check-runtimes: real llama.cpp (node-llama-cpp) and ONNX Runtime (onnxruntime-node),
# pinned npm packages cached in build/npm-runtimes by tests/tools/npm-runtimes.sh, load the
# models taskpatchd rebuilds; the example inference service (tests/runtime/service.mjs)
# follows switches, commits by health and rolls back a broken task (tests/runtime/run.sh).
# make bench-lora: decode tokens/s of a folded task model vs the base with its LoRA applied at
# run time, and per-task storage (tests/bench/lora.sh; RECORD=1 writes tests/bench/results/lora.json).
.PHONY: check-runtimes bench-lora
check-runtimes: all $(TOOLS)
	@tests/runtime/run.sh $(BUILD)

bench-lora: all $(TOOLS)
	@tests/bench/lora.sh $(BUILD)
# ---- end runtimes ----

# ---- fold ----
# make bench-fold: `taskpatch quantize` and `taskpatch fold` (LoRA rank 16 on every linear layer)
# to Q4_K_M on an F32 model of dim 1024, 8 layers: time, CPU time and peak RSS, against
# llama.cpp's llama_model_quantize in the same run, extrapolated to a 0.5B-class model
# (tests/bench/fold.sh; RECORD=1 writes tests/bench/results/fold.json). The fold's end-to-end
# proof is tests/integration/test-fold.sh (check-integration); its whole-file oracle against
# llama_model_quantize is tests/oracle/file-oracle.sh (check-oracle).
# The fold's float arithmetic is specified operation by operation (common/model/fold.h): never fused.
$(OBJ)/common/model/fold.o: ISA_FLAGS := -ffp-contract=off
.PHONY: bench-fold
bench-fold: all $(TOOLS)
	@tests/bench/fold.sh $(BUILD)
# ---- end fold ----

# ---- demo, deps ------------------------------------------------------------

.PHONY: demo deps
demo: all $(TOOLS)
	@tests/demo.sh $(BUILD)

# System packages (apt-get), then the pinned npm packages: ggml's prebuilt library (cached
# under build/npm; the fixtures quantize with it) and the runtimes, node-llama-cpp and
# onnxruntime-node (build/npm-runtimes; make check-runtimes, the demo's inference service).
deps:
	@sh packaging/install-deps.sh
	@sh tests/tools/npm-ggml.sh build/npm > /dev/null
	@sh tests/tools/npm-runtimes.sh build/npm-runtimes > /dev/null

# ---- Debian package --------------------------------------------------------

# make deb: build/deb/taskpatch_$(VERSION)_<arch>.deb with dpkg-buildpackage (debhelper 13),
# from a source tree staged in build/deb/src/<arch>/ (dpkg wants debian/ at its root): the
# sources, and packaging/debian/ as debian/ (its symlinks resolved). ARCH=arm64 cross-builds
# (dpkg-buildpackage -a arm64; the :arm64 -dev packages come from 'make deps').
# check-deb: lintian, the contents, the binaries run, the units verify, the exposure score
# (tests/packaging/check-deb.sh). Our command line (ARCH=, BUILD=, ...) must not reach the
# package's own make calls: MAKEFLAGS is dropped.
DEB_NATIVE := $(shell dpkg --print-architecture 2> /dev/null)
DEB_ARCH := $(if $(filter command line,$(origin ARCH)),$(patsubst aarch64,arm64,$(patsubst x86_64,amd64,$(ARCH))),$(DEB_NATIVE))
# A cross build names its compiler (dpkg-architecture checks CC against the host type) and
# runs no tests (the "cross" and "nocheck" build profiles).
DEB_CROSS_ENV := $(if $(filter-out $(DEB_NATIVE),$(DEB_ARCH)),CC=$(shell dpkg-architecture -a$(DEB_ARCH) -qDEB_HOST_GNU_TYPE 2> /dev/null)-gcc DEB_BUILD_OPTIONS=nocheck)
DEB_CROSS_PROFILES := -Pcross,nocheck
DEB_SRC := build/deb/src/$(DEB_ARCH)
DEB := build/deb/taskpatch_$(VERSION)_$(DEB_ARCH).deb
DEB_STAGE := Makefile kernels common cli daemon config systemd packaging

.PHONY: deb check-deb
deb:
	$(Q)v=$$(dpkg-parsechangelog -l packaging/debian/changelog -S Version) && [ "$$v" = "$(VERSION)" ] || \
		{ echo "packaging/debian/changelog is at $$v, the Makefile at $(VERSION): add a changelog entry"; exit 1; }
	$(Q)rm -rf $(DEB_SRC) build/deb/src/taskpatch*_$(DEB_ARCH).* && mkdir -p $(DEB_SRC)
	$(Q)tar -cf - --exclude=packaging/debian $(DEB_STAGE) | tar -xf - -C $(DEB_SRC)
	$(Q)cp -RL packaging/debian $(DEB_SRC)/debian
	@$(if $(Q),echo "  DPKG    $(DEB) (log: build/deb/build-$(DEB_ARCH).log)")
	$(Q)cd $(DEB_SRC) && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES $(DEB_CROSS_ENV) \
		dpkg-buildpackage -b -us -uc -J $(if $(DEB_CROSS_ENV),-a $(DEB_ARCH) $(DEB_CROSS_PROFILES)) \
		$(if $(Q),> ../../build-$(DEB_ARCH).log 2>&1 || { tail -n 40 ../../build-$(DEB_ARCH).log; exit 1; })
	$(Q)mv build/deb/src/taskpatch*_$(VERSION)_$(DEB_ARCH).* build/deb/
	@ls -l build/deb/*_$(VERSION)_$(DEB_ARCH).*deb | sed 's/^/  /'

# The container part of the check (native packages only) makes its model fixtures with
# $(BUILD)'s gguf-fixture, built by a make that does not see our ARCH= (the Makefile's own
# ARCH picks the kernel sources).
check-deb: deb
	$(if $(DEB_CROSS_ENV),,$(Q)env -u MAKEFLAGS -u MFLAGS -u MAKEOVERRIDES \
		$(MAKE) --no-print-directory BUILD=$(BUILD) $(BUILD)/tools/gguf-fixture)
	@tests/packaging/check-deb.sh $(DEB) $(BUILD)

# ---- install ---------------------------------------------------------------

# Where the system integration goes, each overridable on the command line. The systemd
# directories come from systemd.pc, as systemd's docs ask (so PREFIX=/usr/local still puts
# the units where systemd looks); without it, under PREFIX. SYSCONFDIR is /etc whatever the
# PREFIX: taskpatchd's built-in default is /etc/taskpatch/taskpatchd.yaml (CONFIG_DEFAULT_PATH,
# common/device/config.h), and the installed unit passes --config $(SYSCONFDIR)/taskpatch/....
# Same paths as the Debian package (packaging/debian/, tests/packaging/check-deb.sh).
pkgvar = $(shell $(PKG_CONFIG) --variable=$(1) $(2) 2> /dev/null)
SYSCONFDIR ?= /etc
UNITDIR ?= $(or $(call pkgvar,systemdsystemunitdir,systemd),$(PREFIX)/lib/systemd/system)
SYSUSERSDIR ?= $(or $(call pkgvar,sysusersdir,systemd),$(PREFIX)/lib/sysusers.d)
TMPFILESDIR ?= $(or $(call pkgvar,tmpfilesdir,systemd),$(PREFIX)/lib/tmpfiles.d)
BASHCOMPDIR ?= $(or $(call pkgvar,completionsdir,bash-completion),$(PREFIX)/share/bash-completion/completions)

# What install adds, one list per directory: uninstall removes the same lists.
MAN1 := packaging/man/taskpatch.1 packaging/man/tpctl.1
MAN5 := packaging/man/taskpatchd.yaml.5
MAN8 := packaging/man/taskpatchd.8
UNITS := systemd/taskpatchd.service systemd/taskpatchd.socket
COMPLETIONS := packaging/completion/taskpatch packaging/completion/tpctl
CONFIG := config/taskpatchd.yaml
CONFDIR = $(SYSCONFDIR)/taskpatch
CONF_DST = $(DESTDIR)$(CONFDIR)/$(notdir $(CONFIG))
# The units name the binary and the configuration by their Debian paths; installed elsewhere
# (PREFIX=/usr/local, SYSCONFDIR=...) they name the installed ones.
UNIT_SED = -e 's|/usr/bin/taskpatchd|$(BINDIR)/taskpatchd|g' -e 's|/etc/taskpatch/|$(CONFDIR)/|g'

.PHONY: install uninstall
install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8 \
		$(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR) $(DESTDIR)$(BASHCOMPDIR) \
		$(DESTDIR)$(CONFDIR)
	install -m 0755 $(BINS) $(DESTDIR)$(BINDIR)/
	install -m 0644 $(MAN1) $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 $(MAN5) $(DESTDIR)$(MANDIR)/man5/
	install -m 0644 $(MAN8) $(DESTDIR)$(MANDIR)/man8/
	for u in $(UNITS); do \
		sed $(UNIT_SED) $$u > $(DESTDIR)$(UNITDIR)/$${u##*/} && chmod 0644 $(DESTDIR)$(UNITDIR)/$${u##*/} || exit 1; \
	done
	install -m 0644 systemd/taskpatch.sysusers $(DESTDIR)$(SYSUSERSDIR)/taskpatch.conf
	install -m 0644 systemd/taskpatch.tmpfiles $(DESTDIR)$(TMPFILESDIR)/taskpatch.conf
	install -m 0644 $(COMPLETIONS) $(DESTDIR)$(BASHCOMPDIR)/
	@# The configuration is the administrator's once installed: never overwritten.
	@if [ -e $(CONF_DST) ]; then \
		echo "  keeping $(CONF_DST) (the new default is $(CONFIG))"; \
	else echo "install -m 0644 $(CONFIG) $(DESTDIR)$(CONFDIR)/"; install -m 0644 $(CONFIG) $(DESTDIR)$(CONFDIR)/; fi

# Removes what install added, except a configuration that differs from the one install would
# add (the administrator changed it, or an older version installed it): kept, and said so.
uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(BINS)))
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(MAN1)))
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man5/,$(notdir $(MAN5)))
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man8/,$(notdir $(MAN8)))
	rm -f $(addprefix $(DESTDIR)$(UNITDIR)/,$(notdir $(UNITS)))
	rm -f $(DESTDIR)$(SYSUSERSDIR)/taskpatch.conf $(DESTDIR)$(TMPFILESDIR)/taskpatch.conf
	rm -f $(addprefix $(DESTDIR)$(BASHCOMPDIR)/,$(notdir $(COMPLETIONS)))
	@if cmp -s $(CONFIG) $(CONF_DST); then \
		echo "rm -f $(CONF_DST)"; rm -f $(CONF_DST); \
	elif [ -e $(CONF_DST) ]; then \
		echo "  keeping $(CONF_DST): it differs from $(CONFIG)"; fi
	rmdir $(DESTDIR)$(CONFDIR) 2> /dev/null || true

.PHONY: clean
clean:
	rm -rf build

.PHONY: help
help:
	@sed -n '2,/^$$/s/^# \{0,1\}//p' Makefile
