module github.com/retrivium/forensic

go 1.26.0

require (
	github.com/NVIDIA/go-nvml v0.13.4-1
	github.com/cilium/ebpf v0.22.0
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
	go.etcd.io/bbolt v1.5.0
	golang.org/x/sys v0.50.0
	golang.org/x/term v0.48.0
	google.golang.org/protobuf v1.36.11
)

require golang.org/x/text v0.14.0 // indirect

tool github.com/cilium/ebpf/cmd/bpf2go
