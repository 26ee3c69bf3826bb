package unwind

import (
	"testing"
)

// BenchmarkUnwindChain measures one walk of the -O2 chain with the files'
// CFI already cached: the per-stack cost of an analysis.
func BenchmarkUnwindChain(b *testing.B) {
	c := chainCapture(b)
	u := New(LocalFiles{}, 0)
	if r := u.Unwind(c.Capture); !r.Complete() {
		b.Fatalf("walk %v: %s", names(r), r.Stop)
	}
	b.ReportAllocs()
	for b.Loop() {
		u.Unwind(c.Capture)
	}
}

// BenchmarkUnwindColdChain includes opening and indexing every file (the
// executable, libc with its debug file): the first walk of an analysis.
func BenchmarkUnwindColdChain(b *testing.B) {
	c := chainCapture(b)
	b.ReportAllocs()
	for b.Loop() {
		New(LocalFiles{}, 0).Unwind(c.Capture)
	}
}
