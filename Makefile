# forensic: record and explain GPU memory failures.
#
#   make            bin/forensic and the simulated GPU (build/simgpu)
#   make demo       record the out-of-memory scenario on the simulated GPU and analyze it (root)
#   make test       every test, end-to-end BPF tests included (root; see README)
#   make bench      benchmarks; figures go to BENCHMARKS.md (root)
#   make generate   rebuild the BPF object from bpf/forensic.bpf.c (needs clang, bpftool, libbpf-dev)
#   make gpu-check  validation run on a real NVIDIA GPU (root; see scripts/gpu-check.sh)

GO      ?= go
BUILD   := build
SIM     := $(BUILD)/simgpu
NVIDIA  := $(BUILD)/nvidia
# go-nvml's cgo prints a deprecation warning per NVML function without this.
export CGO_CFLAGS ?= -Wno-deprecated-declarations

GO_SRC := $(shell find . -name '*.go' -not -path './build/*' -not -path './.git/*') go.mod go.sum bpf/forensic_x86_bpfel.o

.PHONY: all simgpu nvidia-libs test fuzz-smoke test-unit demo bench generate gpu-check clean

all: bin/forensic simgpu

bin/forensic: $(GO_SRC)
	$(GO) build -trimpath -o $@ ./cmd/forensic

simgpu:
	$(MAKE) --no-print-directory -C testdata/simgpu OUT=$(CURDIR)/$(SIM)

# NVIDIA's real driver-535 libraries, unpacked (never installed) from
# Debian's non-free component: the reference export list and a real binary
# to trace.
nvidia-libs: $(NVIDIA)/libcuda.so.1

$(NVIDIA)/libcuda.so.1:
	scripts/fetch-nvidia-libs.sh $(NVIDIA)

# Every test, with the end-to-end tests required: a missing prerequisite
# (root, the simulator, the NVIDIA libraries) fails instead of skipping.
test: all nvidia-libs
	$(GO) vet ./...
	FORENSIC_REQUIRE_E2E=1 $(GO) test -count=1 -timeout 12m ./...
	$(MAKE) --no-print-directory fuzz-smoke

# Each fuzz target briefly (the seed corpora always run as plain tests).
fuzz-smoke:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeChunk$$' -fuzztime 10s -fuzzminimizetime 0x ./store
	$(GO) test -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime 10s -fuzzminimizetime 0x ./store
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRecord$$' -fuzztime 10s -fuzzminimizetime 0x ./bpf

# Unit tests only (no root needed).
test-unit:
	$(GO) test ./cuda ./store ./analyze ./recorder/...

demo: all
	scripts/demo.sh

bench: all nvidia-libs
	scripts/bench.sh

generate:
	mkdir -p $(BUILD)/bpf
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > $(BUILD)/bpf/vmlinux.h
	$(GO) generate ./bpf

gpu-check:
	scripts/gpu-check.sh

clean:
	rm -rf bin $(BUILD)
