package pystack

import "errors"

// Errors a walk returns; callers test them with errors.Is. Each carries a
// sentence a CLI can print.
var (
	// ErrNotPython: no mapped file of the process is a CPython
	// interpreter (none exports _PyRuntime).
	ErrNotPython = errors.New("not a CPython process (no mapped file exports _PyRuntime)")
	// ErrUnsupported: a CPython version or build this package has no
	// layout for.
	ErrUnsupported = errors.New("CPython version or build not supported")
	// ErrNoThread: the interpreter has no thread state for the thread.
	ErrNoThread = errors.New("no Python thread state for this thread")
	// ErrLayout: the process's own debug offsets (3.13+) disagree with
	// the table, or a structure read back makes no sense.
	ErrLayout = errors.New("the interpreter's structures do not match the known layout")
)
