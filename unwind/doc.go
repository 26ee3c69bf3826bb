// Package unwind walks the user stack of a thread offline, from what a
// probe can capture at one instant: the registers, a bounded copy of the
// stack from the stack pointer upwards, and the process's executable
// mappings. It reads the call-frame information (CFI) of the mapped ELF
// files, .eh_frame (looked up through .eh_frame_hdr) and .debug_frame,
// interprets the DW_CFA_* programs to recover each caller's registers, and
// falls back to frame pointers only where a file has no CFI for an
// address. Frames are named from .symtab, else .dynsym (stripped libraries
// such as NVIDIA's libcuda), else a separate debug file found by build id;
// C++ names are demangled.
//
// A walk always says why it stopped (Stop). Only StopOutermost, a frame
// whose CFI marks the return address undefined (glibc's _start and thread
// start, clone and clone3), makes a walk complete; an address outside every
// executable mapping ends the walk as incomplete.
//
// Only x86-64 is supported. docs/stacks.md describes what a BPF program
// must capture for this package and why.
package unwind
