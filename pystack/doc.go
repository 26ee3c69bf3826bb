// Package pystack reads the Python call stack of one thread of a CPython
// process from outside it: from its memory (a /proc/PID/mem reader, or the
// bytes a BPF program copied) and the ELF file of its interpreter.
//
// The walk is split the way a probe must split it. Capture reads, for the
// failing thread, a fixed list of fields per frame (RawFrame: the code
// object, the instruction pointer or index, the frame's owner); ReadCode
// copies, once per code object, the strings and the line table it needs
// (RawCode). Resolve turns both into frames with qualified names, files
// and lines, offline, after the process may have exited.
//
// The failing thread is found by its native thread id in the interpreter's
// thread list (CPython 3.11 and later), or by its pthread id (3.10), never
// as "the thread holding the GIL": a thread inside a ctypes or extension
// call has released it.
//
// Supported: CPython 3.10, 3.11, 3.12 and 3.13 (default builds, x86-64).
// The structure offsets of each are one table (layouts), taken from the
// CPython headers of that version and checked against the DWARF of real
// builds; 3.13's own _Py_DebugOffsets are compared with the table before a
// walk. Any other version is refused by name rather than guessed.
// docs/stacks.md describes what a BPF program must read.
package pystack
