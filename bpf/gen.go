package bpf

// The generated forensic_x86_bpfel.{go,o} are committed so that a plain
// `go build` needs no clang; `make generate` rebuilds them (it first dumps
// this kernel's BTF to build/bpf/vmlinux.h for CO-RE).
//go:generate go tool bpf2go -tags linux -target amd64 -type fx_call -type fx_call_array -type fx_proc -type fx_symcfg -type fx_stats -type fx_hold -type fx_file -type fx_const -type fx_kind -type fx_call_flags -type fx_proc_what -type fx_proc_flags -type fx_counter -type fx_hold_flags -type fx_ustack -type fx_pystack -type fx_pycode -type fx_stack_ref -type fx_pylayout -type fx_pyproc -type fx_ustack_flags -type fx_py_status -type fx_pycode_flags -type fx_vmas -type fx_vma -type fx_vmas_flags -type fx_thread forensic forensic.bpf.c -- -I../build/bpf -I. -O2 -g -Wall -Werror
