# sandboxd — non-recursive Makefile.
#
#   make            build sandboxd, sandbox-init, sandboxctl
#   make check      install deps, build, unit tests and integration tests, each plain and under ASan+UBSan
#                   (the two integration runs side by side); 20 s of each fuzz target; the SDKs' and E2B tests, the short load run, a sample of the kill -9 matrix
#   make fuzz       each fuzz target for FUZZ_SECONDS (default 300)
#   make faults     the kill -9 matrix at every fault point (tests/faults/)
#   make sdk-py-check  the Python SDK's tests (sdk/python) against a real daemon
#   make load       the load suite at full size (tests/load/)
#   make demo       install deps, build, run the main job in the test world
#   make bench      the performance table beside its peers (bwrap, posix_spawn, plain veth,
#                   cp -a) and goals, into build/bench.json; BENCH_ARGS=--quick
#   make bench-detail  the detailed benchmarks; the load suite at full size
#   make install    binaries (sandboxd-e2b too), systemd units, man pages, bash completion (and the shim when built)
#   make systemd-test  sandboxd under a real systemd (tests/systemd/: nspawn on a cached bookworm root)
#   make deb        the Debian package, build/deb/sandboxd_VERSION_ARCH.deb (debian/)
#   make deb-check  make deb, then its file list, maintainer scripts and lintian (tests/deb/)
#   make shim       the containerd shim (shim/, Go): build/containerd-shim-sandboxd-v2
#   make e2b-test   E2B's JS SDK against sandboxd-e2b (tests/e2b/)
#   make cri-test   pods through the CRI: private containerd + CRI plugin + CNI (tests/cri/)

PREFIX    ?= /usr/local
BINDIR    ?= $(PREFIX)/bin
SBINDIR   ?= $(PREFIX)/sbin
LIBEXECDIR?= $(PREFIX)/libexec/sandboxd
MANDIR    ?= $(PREFIX)/share/man
UNITDIR   ?= /etc/systemd/system
DESTDIR   ?=
VERSION   := 0.1.0

CC        ?= gcc
PKGS      := libcjson libgit2 libarchive libseccomp libcap libnl-3.0 libnl-route-3.0 \
             libmnl libnftnl libsystemd libcurl libpcre2-8 ldns openssl zlib
PKG_CFLAGS:= $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS  := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CMOCKA_CFLAGS := $(shell pkg-config --cflags cmocka 2>/dev/null)
CMOCKA_LIBS   := $(shell pkg-config --libs cmocka 2>/dev/null)

WARN      := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wno-unused-parameter \
             -Wno-missing-field-initializers
HARDEN    := -D_FORTIFY_SOURCE=2 -fstack-protector-strong -fPIE -fstack-clash-protection
CFLAGS    ?= -O2 -g
ALL_CFLAGS:= -std=gnu11 -D_GNU_SOURCE $(WARN) $(HARDEN) $(CFLAGS) -I. $(PKG_CFLAGS) \
             -DSANDBOXD_VERSION='"$(VERSION)"' -DLIBEXECDIR='"$(LIBEXECDIR)"' -MMD -MP
LDFLAGS_H := -pie -Wl,-z,relro,-z,now -Wl,--as-needed -pthread
LIBS      := $(PKG_LIBS) -lhttp_parser -lresolv -pthread

# Build flavours: build/ (release) and build/asan/ (unit tests under sanitizers).
B         := build
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

CORE_SRC  := $(wildcard libcore/*.c)
POLICY_SRC:= $(wildcard policy/*.c)
INIT_SRC  := $(wildcard libcore/init/*.c)
NETD_SRC  := $(wildcard policy/netd/*.c)
DAEMON_SRC:= $(filter-out sandboxd/main.c,$(wildcard sandboxd/*.c))
CLI_SRC   := $(filter-out cli/main.c,$(wildcard cli/*.c))
# OpenSSL for the CLI, loaded on first use (cli/lazy/openssl.h): in libclient.a.
CLI_SRC   += cli/lazy/openssl.c
UNIT_SRC  := $(wildcard tests/unit/test-*.c)

obj = $(patsubst %.c,$(1)/%.o,$(2))

BINS      := $(B)/sandboxd $(B)/sandbox-init $(B)/sandboxctl $(B)/sandbox-netd $(B)/sandboxd-e2b
# Test only, never installed: sandboxd with its fault points armed (libcore/fault.h).
FAULT_BINS:= $(B)/faults/sandboxd
UNIT_BINS := $(patsubst tests/unit/%.c,$(B)/tests/%,$(UNIT_SRC))
UNIT_ASAN := $(patsubst tests/unit/%.c,$(B)/asan/tests/%,$(UNIT_SRC))

# A plain `make` builds the binaries, whatever rule comes first below
# (tests/make/default-goal checks it; `make unit` runs that check).
.DEFAULT_GOAL := all

.PHONY: sdk-ts-check
.PHONY: systemd-test
.PHONY: shim shim-test cri-test
# The containerd shim (shim/README.md): Go in GOPATH mode over Debian's
# packaged sources (/usr/share/gocode), offline; GOPATH's first entry and the
# build cache stay in build/.
SHIM      := $(B)/containerd-shim-sandboxd-v2
SHIM_SRC  := $(wildcard shim/*.go)
GO        ?= go
shim: $(SHIM)
$(SHIM): $(SHIM_SRC)
	@mkdir -p $(B)/gopath
	cd shim && GO111MODULE=off GOPATH=$(abspath $(B)/gopath):/usr/share/gocode \
	  GOCACHE=$(abspath $(B)/gocache) GOFLAGS= $(GO) build -trimpath -o $(abspath $@) .
# The shim under a private containerd in the test world (tests/shim/);
# make check runs it when containerd and Go are installed.
shim-test: $(BINS) $(SHIM)
	@python3 tests/shim/run.py
# Pods through the CRI (tests/cri/): a private containerd with its CRI
# plugin and a `sandboxd` runtime handler, CNI in the test world, images
# built here. Debian's python3 (python3-grpcio, python3-grpc-tools).
# make check runs it when containerd and Go are installed (it skips,
# saying why, without the CNI plugins or gRPC for Python).
cri-test: $(BINS) $(SHIM)
	@/usr/bin/python3 tests/cri/run.py

.PHONY: all deps check unit unit-asan integration integration-asan integration-both demo bench bench-detail install clean fuzz load faults
all: $(BINS) $(FAULT_BINS)

deps:
	@scripts/install-deps

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(B)/asan/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN_FLAGS) -U_FORTIFY_SOURCE -O1 $(CMOCKA_CFLAGS) -c $< -o $@

# Single objects by source path (make build/libcore/util.o) while developing.
$(B)/libcore/%.o $(B)/sandboxd/%.o $(B)/cli/%.o $(B)/policy/%.o: $(B)/obj/%.o
	@true

$(B)/tests/%.o: tests/unit/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(CMOCKA_CFLAGS) -c $< -o $@

$(B)/libcore.a: $(call obj,$(B)/obj,$(CORE_SRC))
	@rm -f $@; ar rcs $@ $^
$(B)/libpolicy.a: $(call obj,$(B)/obj,$(POLICY_SRC))
	@rm -f $@; ar rcs $@ $^
$(B)/libdaemon.a: $(call obj,$(B)/obj,$(DAEMON_SRC))
	@rm -f $@; ar rcs $@ $^
$(B)/libclient.a: $(call obj,$(B)/obj,$(CLI_SRC))
	@rm -f $@; ar rcs $@ $^

$(B)/sandboxd: $(B)/obj/sandboxd/main.o $(B)/libdaemon.a $(B)/libpolicy.a $(B)/libcore.a
	@if [ -d $@ ]; then rm -rf $@; fi
	$(CC) $(LDFLAGS_H) -o $@ $^ $(LIBS)
# The same daemon with fault.o built with SANDBOXD_FAULTS, linked before
# libcore.a so that its core_fault() is the one used.
$(B)/faults/fault.o: libcore/fault.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -DSANDBOXD_FAULTS -c $< -o $@
$(B)/faults/sandboxd: $(B)/obj/sandboxd/main.o $(B)/faults/fault.o $(B)/libdaemon.a $(B)/libpolicy.a $(B)/libcore.a
	$(CC) $(LDFLAGS_H) -o $@ $^ $(LIBS)
# sandbox-init loads libarchive on a thread of its own at start, before its
# root changes (cli/lazy/archive.c, libcore/init/main.c), not at exec.
$(B)/sandbox-init: $(call obj,$(B)/obj,$(INIT_SRC)) $(B)/obj/cli/lazy/archive.o $(B)/libcore.a
	$(CC) $(LDFLAGS_H) -o $@ $^ $(LIBS)
$(B)/sandbox-netd: $(call obj,$(B)/obj,$(NETD_SRC)) $(B)/libpolicy.a $(B)/libcore.a
	$(CC) $(LDFLAGS_H) -o $@ $^ $(LIBS)
# sandboxctl loads libarchive (cli/lazy/archive.c) and OpenSSL (cli/lazy/openssl.h) on first use, not at start.
$(B)/sandboxctl: $(B)/obj/cli/main.o $(B)/obj/cli/lazy/archive.o $(B)/libclient.a
	$(CC) $(LDFLAGS_H) -o $@ $^ $(shell pkg-config --libs libcjson) -lresolv -pthread

# The E2B gateway (e2b/, docs/E2B.md): a client of the daemon's socket
# (cli/client.c) serving HTTP/1.1 with http_parser; OpenSSL for key
# hashes and envd tokens.
E2B_SRC   := $(filter-out e2b/main.c,$(wildcard e2b/*.c))
$(B)/libe2b.a: $(call obj,$(B)/obj,$(E2B_SRC))
	@rm -f $@; ar rcs $@ $^
$(B)/sandboxd-e2b: $(B)/obj/e2b/main.o $(B)/libe2b.a $(B)/obj/cli/lazy/archive.o $(B)/libclient.a
	$(CC) $(LDFLAGS_H) -o $@ $^ $(shell pkg-config --libs libcjson openssl zlib) -lhttp_parser -lresolv -pthread

# Unit tests link every library object (not the mains), so any module is testable.
TEST_LINK = $(B)/libe2b.a $(B)/libdaemon.a $(B)/libpolicy.a $(B)/libclient.a $(B)/libcore.a
$(B)/tests/%: $(B)/tests/%.o $(TEST_LINK)
	$(CC) $(LDFLAGS_H) -o $@ $^ $(LIBS) $(CMOCKA_LIBS)

# test-init-agent drives the real sandbox-init binary.
$(B)/tests/test-init-agent $(B)/asan/tests/test-init-agent: | $(B)/sandbox-init
# test-dns drives the real sandbox-netd binary once, end to end on loopback.
$(B)/tests/test-dns $(B)/asan/tests/test-dns: | $(B)/sandbox-netd
# test-proxy drives it once too, with --proxy.
$(B)/tests/test-proxy $(B)/asan/tests/test-proxy: | $(B)/sandbox-netd

ASAN_OBJS = $(call obj,$(B)/asan,$(E2B_SRC) $(DAEMON_SRC) $(POLICY_SRC) $(CLI_SRC) $(CORE_SRC))
$(B)/asan/tests/%: tests/unit/%.c $(ASAN_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN_FLAGS) -U_FORTIFY_SOURCE -O1 $(CMOCKA_CFLAGS) -o $@ $< $(ASAN_OBJS) $(LIBS) $(CMOCKA_LIBS)

# sandboxd itself under ASan+UBSan, for the integration suite.
$(B)/asan/bin/sandboxd: $(B)/asan/sandboxd/main.o $(call obj,$(B)/asan,$(DAEMON_SRC) $(POLICY_SRC) $(CORE_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(SAN_FLAGS) $(LDFLAGS_H) -o $@ $^ $(LIBS)

# sandboxd-e2b under ASan+UBSan, for attacks on its parser (tests/e2b/run.py
# takes it as SANDBOXD_E2B=build/asan/bin/sandboxd-e2b).
$(B)/asan/bin/sandboxd-e2b: $(B)/asan/e2b/main.o $(call obj,$(B)/asan,$(E2B_SRC) $(CLI_SRC)) $(B)/asan/cli/lazy/archive.o
	@mkdir -p $(dir $@)
	$(CC) $(SAN_FLAGS) $(LDFLAGS_H) -o $@ $^ -lcjson -lssl -lcrypto $(LIBS)

unit: $(UNIT_BINS)
	@tests/make/default-goal
	@scripts/run-unit $(UNIT_BINS)
# Each binary three times under the sanitizers, where timing differs most:
# a race that shows one run in a few fails here rather than later.
UNIT_REPEAT ?= 3
unit-asan: $(UNIT_ASAN)
	@RUN_UNIT_REPEAT=$(UNIT_REPEAT) ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 scripts/run-unit $(UNIT_ASAN)

# The suite with the daemon's default (a user namespace wherever the host
# supports one); integration-asan runs it again without (SANDBOXD_TEST_USERNS=0:
# "userns": false, the sandbox user is sandboxd-user). The escape suite runs
# in both modes here.
integration: $(BINS)
	@python3 tests/integration/run.py
	@python3 tests/escape/run.py --no-userns
	@python3 tests/escape/run.py --userns

# The integration suite against a sandboxd built with ASan+UBSan: memory
# errors and leaks in the daemon fail it (the sandbox-init it runs is the
# plain one: it is exec'd from a memfd and must stay small). It runs without
# user namespaces, so together with `integration` the suite covers both modes.
integration-asan: $(BINS) $(B)/asan/bin/sandboxd
	@SANDBOXD_TEST_USERNS=0 SANDBOXD=$(B)/asan/bin/sandboxd SANDBOX_INIT=$(B)/sandbox-init \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  python3 tests/integration/run.py

# Both modes of the suite side by side, each in its own test world with its
# own daemon: the suite waits on sandboxes far more than it computes, so the
# two together take little longer than one, and each runs on a busy machine
# (a test that fails under load is a bug). Each one's output is printed
# whole when it ends (--output-sync).
integration-both: $(BINS) $(B)/asan/bin/sandboxd
	@$(MAKE) --no-print-directory -j2 --output-sync=target integration integration-asan

# make check: the build and the unit tests, then three lanes side by side
# (the suite in its two modes, each in its own test world, and check-beside:
# the sanitizer unit runs, the shim and CRI suites, load and the fault
# matrix, each in its own world too), then the fuzzers two at a time and the
# SDKs, E2B, systemd and package checks. Every lane runs on a busy machine:
# a test that fails under load is a bug. Each lane's output is printed whole
# when it ends (--output-sync).
check: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory -j3 --output-sync=target integration integration-asan check-beside
	@$(MAKE) --no-print-directory -j2 fuzz-short FUZZ_JOBS=2
	@$(MAKE) --no-print-directory sdk-ts-check
	@$(MAKE) --no-print-directory sdk-py-check
	@$(MAKE) --no-print-directory e2b-test
	@$(MAKE) --no-print-directory systemd-test SYSTEMD_TEST_ARGS=--if-possible
	@$(MAKE) --no-print-directory deb-check

# The part of make check that runs beside the integration suite's two modes.
.PHONY: check-beside
check-beside: $(BINS) $(UNIT_ASAN)
	@$(MAKE) --no-print-directory unit-asan
	@if command -v containerd >/dev/null && command -v $(GO) >/dev/null; then \
	  $(MAKE) --no-print-directory shim-test; else echo "shim tests skipped: containerd or go not installed"; fi
	@if command -v containerd >/dev/null && command -v $(GO) >/dev/null; then \
	  $(MAKE) --no-print-directory cri-test; else echo "CRI tests skipped: containerd or go not installed"; fi
	@$(MAKE) --no-print-directory load LOAD_ARGS=--short
	@$(MAKE) --no-print-directory faults FAULTS_ARGS=--sample

# The TypeScript SDK: built with its pinned tsc, then its node tests (and
# examples/agent.ts) against a real sandboxd in the test world.
sdk-ts-check: $(BINS)
	@cd sdk/typescript && npm run --silent build:test
	@python3 sdk/typescript/test/world.py

# The Python SDK (sdk/python) against a real sandboxd in the test world,
# with Debian's python and pytest.
.PHONY: sdk-py-check
sdk-py-check: $(BINS)
	@cd sdk/python && /usr/bin/python3 -m pytest -q -p no:cacheprovider tests

demo: deps
	@$(MAKE) --no-print-directory all
	@python3 tests/integration/demo.py

# E2B's published JS SDK (tests/e2b/, pinned by its lock file) against
# sandboxd-e2b and sandboxd in the test world.
.PHONY: e2b-test
e2b-test: $(BINS)
	@python3 tests/e2b/run.py

# make bench: every row of the performance table beside its peer and goal,
# one run, written to build/bench.json (BENCH_ARGS=--quick: fewer rounds,
# still 1000 sessions and 1000 idle sandboxes; BENCH_ARGS="--only
# network,idle,rate" for the scale rows alone). make bench-detail: the
# detailed benchmarks and the load suite.
bench: deps
	@$(MAKE) --no-print-directory all
	@python3 tests/bench/bench_table.py $(BENCH_ARGS)

bench-detail: deps
	@$(MAKE) --no-print-directory all
	@python3 tests/bench/bench.py
	@python3 tests/bench/bench_policy.py
	@python3 tests/bench/bench_proxy.py
	@python3 tests/bench/bench_flood.py
	@python3 tests/bench/bench_copy.py
	@python3 tests/bench/bench_git.py
	@$(MAKE) --no-print-directory load

# The kill -9 matrix (tests/faults/run.py): sandboxd killed at each fault
# point (SANDBOXD_FAULT, libcore/fault.h) and checked after a restart;
# make check runs a sample covering every operation (FAULTS_ARGS=--sample).
FAULTS_ARGS ?=
faults: $(BINS) $(FAULT_BINS)
	@python3 tests/faults/run.py $(FAULTS_ARGS)

# The load suite (tests/load/run.py): full size by default (32 clients x 1000
# RPCs over 30 sandboxes, then 200 alive at once); make check runs it with
# LOAD_ARGS=--short and it fails on any error or leak, never on time.
LOAD_ARGS ?=
load: $(BINS)
	@python3 tests/load/run.py $(LOAD_ARGS)

# sandboxd under systemd as PID 1 of a systemd-nspawn container
# (tests/systemd/run.py): socket activation, notify/watchdog, sessions as
# scope units that outlive restarts and crashes of the service, journald
# fields. The bookworm root is debootstrap'd once into
# /var/cache/sandboxd-test/systemd/. make check runs it with --if-possible
# (one line saying why when the machine cannot).
# The container gets the .deb (make deb), as an operator would install it;
# `python3 tests/systemd/run.py` alone uses make install instead.
systemd-test: $(BINS) deb
	@python3 tests/systemd/run.py --deb $(DEB_DIR)/sandboxd_$(VERSION)_$$(dpkg --print-architecture).deb $(SYSTEMD_TEST_ARGS)

install: $(BINS)
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBEXECDIR)
	install -m 0755 $(B)/sandboxd $(DESTDIR)$(SBINDIR)/sandboxd
	install -m 0755 $(B)/sandbox-init $(DESTDIR)$(LIBEXECDIR)/sandbox-init
	install -m 0755 $(B)/sandbox-netd $(DESTDIR)$(LIBEXECDIR)/sandbox-netd
	install -m 0755 $(B)/sandboxctl $(DESTDIR)$(BINDIR)/sandboxctl
	install -m 0755 $(B)/sandboxd-e2b $(DESTDIR)$(BINDIR)/sandboxd-e2b
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)/usr/lib/tmpfiles.d $(DESTDIR)/usr/lib/sysusers.d
	sed 's|@SBINDIR@|$(SBINDIR)|g' systemd/sandboxd.service > $(DESTDIR)$(UNITDIR)/sandboxd.service
	install -m 0644 systemd/sandboxd.socket $(DESTDIR)$(UNITDIR)/sandboxd.socket
	sed 's|@BINDIR@|$(BINDIR)|g' systemd/sandboxd-e2b.service > $(DESTDIR)$(UNITDIR)/sandboxd-e2b.service
	install -m 0644 systemd/sandboxd.tmpfiles $(DESTDIR)/usr/lib/tmpfiles.d/sandboxd.conf
	install -m 0644 systemd/sandboxd.sysusers $(DESTDIR)/usr/lib/sysusers.d/sandboxd.conf
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8
	install -m 0644 docs/man/sandboxctl.1 $(DESTDIR)$(MANDIR)/man1/sandboxctl.1
	install -m 0644 docs/man/sandboxd.8 $(DESTDIR)$(MANDIR)/man8/sandboxd.8
	install -D -m 0644 docs/man/sandboxd-policy.5 $(DESTDIR)$(MANDIR)/man5/sandboxd-policy.5
	install -D -m 0644 cli/sandboxctl.bash-completion $(DESTDIR)/usr/share/bash-completion/completions/sandboxctl
	@if command -v $(GO) >/dev/null; then $(MAKE) --no-print-directory shim && \
	  install -m 0755 $(SHIM) $(DESTDIR)$(BINDIR)/containerd-shim-sandboxd-v2; \
	else echo "install: $(GO) not found; the containerd shim (make shim) is not installed"; fi

# The Debian package (debian/), built by dpkg-buildpackage from a copy of the
# tree in build/deb/sandboxd-VERSION/ so that its outputs (the .deb, .changes
# and .buildinfo dpkg writes to the parent directory) land in build/deb/.
# The copy keeps its own build/ between runs (dpkg-buildpackage --no-pre-clean)
# so a rebuild compiles only what changed; everything else, debian/ and its
# stamps included, is copied afresh.
DEB_DIR  := $(B)/deb
DEB_SRC  := $(DEB_DIR)/sandboxd-$(VERSION)
.PHONY: deb deb-check
deb:
	@mkdir -p $(DEB_SRC)
	@find $(DEB_SRC) -mindepth 1 -maxdepth 1 ! -name build -exec rm -rf {} +
	@tar -c --exclude=./build --exclude=./.git --exclude=__pycache__ . | tar -x -C $(DEB_SRC)
	cd $(DEB_SRC) && dpkg-buildpackage -us -uc -b --no-pre-clean
	@ls $(DEB_DIR)/sandboxd_$(VERSION)_*.deb
deb-check: deb
	@python3 tests/deb/check.py $(DEB_DIR)/sandboxd_$(VERSION)_$$(dpkg --print-architecture).deb

# libFuzzer targets (tests/fuzz/fuzz-*.c), built with clang into build/fuzz/:
# the library objects with coverage and ASan+UBSan, each target linked with
# the libFuzzer runtime (Debian: libclang-rt-14-dev). `make fuzz` runs each
# for FUZZ_SECONDS from its seed corpus (tests/fuzz/corpus/<target>/); new
# inputs go to build/fuzz/corpus/<target>/, crashes to build/fuzz/crash-*.
FUZZ_CC      ?= clang-14
FUZZ_SECONDS ?= 300
FUZZ_JOBS    ?= 1
FUZZ_FLAGS   := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_SRC     := $(wildcard tests/fuzz/fuzz-*.c)
FUZZ_BINS    := $(patsubst tests/fuzz/%.c,$(B)/fuzz/%,$(FUZZ_SRC))
FUZZ_OBJS     = $(call obj,$(B)/fuzz,$(DAEMON_SRC) $(POLICY_SRC) $(CORE_SRC))

$(B)/fuzz/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(ALL_CFLAGS) $(FUZZ_FLAGS) -U_FORTIFY_SOURCE -O1 -c $< -o $@
# The gateway's target links the gateway and its daemon client too.
$(B)/fuzz/fuzz-e2b: tests/fuzz/fuzz-e2b.c tests/fuzz/fuzz.h $(FUZZ_OBJS) $(call obj,$(B)/fuzz,$(E2B_SRC) $(CLI_SRC))
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(ALL_CFLAGS) $(FUZZ_FLAGS) -U_FORTIFY_SOURCE -O1 -fsanitize=fuzzer -o $@ $< $(filter %.o,$^) $(LIBS) -lssl -lcrypto -lz
$(B)/fuzz/fuzz-%: tests/fuzz/fuzz-%.c tests/fuzz/fuzz.h $(FUZZ_OBJS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(ALL_CFLAGS) $(FUZZ_FLAGS) -U_FORTIFY_SOURCE -O1 -fsanitize=fuzzer -o $@ $< $(FUZZ_OBJS) $(LIBS)

.PHONY: fuzz-short
fuzz: $(FUZZ_BINS)
	@FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run $(FUZZ_BINS)
# The short run of make check: 20 s per target (FUZZ_JOBS of them at once).
fuzz-short: $(FUZZ_BINS)
	@FUZZ_SECONDS=20 FUZZ_JOBS=$(FUZZ_JOBS) tests/fuzz/run $(FUZZ_BINS)

clean:
	rm -rf $(B)

-include $(shell find $(B) -name '*.d' -type f 2>/dev/null)
