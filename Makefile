# forensic: record and explain GPU memory failures.
#
#   make            bin/forensic and the simulated GPU (build/simgpu)
#   make demo       record the out-of-memory scenario on the simulated GPU and analyze it (root)
#   make test       every test, end-to-end BPF tests included, then the e2e suite
#                   again against a -race build (root; see README)
#   make test-race  the e2e suite against bin/forensic-race only (root)
#   make bench      benchmarks; figures go to BENCHMARKS.md (root)
#   make generate   rebuild the BPF object from bpf/forensic.bpf.c (needs clang, bpftool, libbpf-dev)
#   make gpu-check  validation run on a real NVIDIA GPU (root; see scripts/gpu-check.sh)
#
# demo, test, bench and generate first install the Debian packages they
# need and the machine lacks (scripts/deps.sh holds the list).

GO        ?= go
BUILD     := build
SIM       := $(BUILD)/simgpu
NVIDIA    := $(BUILD)/nvidia
NVIDIA550 := $(BUILD)/nvidia550
# go-nvml's cgo prints a deprecation warning per NVML function without this.
export CGO_CFLAGS ?= -Wno-deprecated-declarations

GO_SRC := $(shell find . -name '*.go' -not -path './build/*' -not -path './.git/*') go.mod go.sum bpf/forensic_x86_bpfel.o

.PHONY: all simgpu nvidia-libs roots test test-race e2e-race fuzz-smoke test-unit demo bench generate gpu-check clean

all: bin/forensic simgpu

# -buildvcs=auto: the binary carries its commit and module version (its
# metrics and run.db say which build recorded), even where GOFLAGS turns
# the stamp off; outside a git checkout it is left out without an error.
bin/forensic: $(GO_SRC)
	$(GO) build -buildvcs=auto -trimpath -o $@ ./cmd/forensic

# The same binary with the race detector, for the e2e suite.
bin/forensic-race: $(GO_SRC)
	$(GO) build -buildvcs=auto -race -trimpath -o $@ ./cmd/forensic

simgpu:
	$(MAKE) --no-print-directory -C testdata/simgpu OUT=$(CURDIR)/$(SIM)

# NVIDIA's real driver libraries of two versions, unpacked (never
# installed) from Debian's non-free component: 535 (bookworm) and 550
# (trixie). Their export lists are the reference for the symbol table, and
# each libcuda is a real binary to trace.
nvidia-libs: $(NVIDIA)/libcuda.so.1 $(NVIDIA550)/libcuda.so.1

$(NVIDIA)/libcuda.so.1:
	scripts/fetch-nvidia-libs.sh $(NVIDIA) bookworm

$(NVIDIA550)/libcuda.so.1:
	scripts/fetch-nvidia-libs.sh $(NVIDIA550) trixie

# A minimal Debian trixie root with its python3 (3.13), made once with
# debootstrap from the archive this machine's apt uses: the e2e tests run
# Python in it under chroot and in a pivot_root'd mount namespace.
roots: build/roots/trixie/.complete

build/roots/trixie/.complete:
	scripts/make-root.sh build/roots/trixie trixie

# Every test, with the end-to-end tests required: a missing prerequisite
# (root, the simulator, the NVIDIA libraries) fails instead of skipping.
# Then the e2e suite once more, against the -race build of the binary.
# The deploy tests fetch the Kubernetes 1.29 to 1.33 schemas with
# `go mod download` on their first run (84 MB into the module cache).
test:
	scripts/deps.sh test
	$(MAKE) --no-print-directory all nvidia-libs roots
	$(GO) vet ./...
	FORENSIC_REQUIRE_E2E=1 $(GO) test -count=1 -timeout 12m ./...
	$(MAKE) --no-print-directory fuzz-smoke
	$(MAKE) --no-print-directory e2e-race

# The e2e suite against bin/forensic-race (the e2e harness runs the binary
# FORENSIC_BIN names).
test-race:
	scripts/deps.sh test
	$(MAKE) --no-print-directory all nvidia-libs roots
	$(MAKE) --no-print-directory e2e-race

# A race makes the binary exit 66, which fails the test that ran it. The
# race runtime waits 1 s at every exit so that goroutines still running can
# report; 20 ms still gives them the CPU (the recorder stops its goroutines
# before it exits, analyze has none left) and saves minutes over the
# suite's several hundred runs.
# FORENSIC_E2E_RACE leaves out the checks of every recording's report
# (readability, verdict goldens): the first pass made them on the same code.
e2e-race: bin/forensic-race
	GORACE=atexit_sleep_ms=20 FORENSIC_REQUIRE_E2E=1 FORENSIC_BIN=bin/forensic-race FORENSIC_E2E_RACE=1 \
		$(GO) test -count=1 -timeout 12m ./e2e/

# Each fuzz target briefly (the seed corpora always run as plain tests).
# Budgets are counts, about 5 s each here, not -fuzztime durations: Go
# 1.26's coordinator can fail a duration run at its deadline with a bare
# "context deadline exceeded" and no crasher (go.dev/issue/75804).
fuzz-smoke:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeChunk$$' -fuzztime 150000x -fuzzminimizetime 0x ./store
	$(GO) test -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime 8000x -fuzzminimizetime 0x ./store
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRecord$$' -fuzztime 125000x -fuzzminimizetime 0x ./bpf
	$(GO) test -run '^$$' -fuzz '^FuzzCFI$$' -fuzztime 150000x -fuzzminimizetime 0x ./unwind

# Unit tests only (no root needed).
test-unit:
	$(GO) test $$($(GO) list ./... | grep -v -e /e2e -e /bench/ -e /bpf -e /deploy)

demo:
	scripts/deps.sh build
	$(MAKE) --no-print-directory all
	scripts/demo.sh

bench:
	scripts/deps.sh bench
	$(MAKE) --no-print-directory all nvidia-libs
	scripts/bench.sh

generate:
	scripts/deps.sh generate
	mkdir -p $(BUILD)/bpf
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > $(BUILD)/bpf/vmlinux.h
	$(GO) generate ./bpf

gpu-check:
	scripts/gpu-check.sh

clean:
	rm -rf bin $(BUILD)
