package unwind

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/internal/elfnote"
)

func TestDemangle(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"main", "main"},
		{"cuMemAlloc_v2", "cuMemAlloc_v2"},
		{"_ZN13forensic_test5Chain1dEi", "forensic_test::Chain::d"},
		{"_ZNK13forensic_test5Chain1cEi", "forensic_test::Chain::c"},
		{"_ZN13forensic_test4stepILi7EEEiRKNS_5ChainEi", "forensic_test::step<7>"},
		{"_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator6mallocEPPvimP11CUstream_st",
			"c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc"},
		{"_Znot-a-name", "_Znot-a-name"},
	} {
		if got := Demangle(tc.in); got != tc.want {
			t.Errorf("Demangle(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSymtabLookup(t *testing.T) {
	tab := symtab{syms: functions([]elf.Symbol{
		{Name: "_start", Value: 0x1000, Size: 0, Info: byte(elf.STT_FUNC), Section: 1},
		{Name: "f", Value: 0x1100, Size: 0x20, Info: byte(elf.STT_FUNC), Section: 1},
		{Name: "f_alias", Value: 0x1100, Size: 0, Info: byte(elf.STT_FUNC), Section: 1},
		{Name: "data", Value: 0x1200, Size: 0x100, Info: byte(elf.STT_OBJECT), Section: 1},
		{Name: "undefined", Value: 0x1300, Info: byte(elf.STT_FUNC), Section: elf.SHN_UNDEF},
		{Name: "g", Value: 0x1400, Size: 0x10, Info: byte(elf.STT_GNU_IFUNC), Section: 1},
	})}
	for _, tc := range []struct {
		v    uint64
		want string
	}{
		{0xfff, ""}, {0x1000, "_start"}, {0x10ff, "_start"}, {0x1100, "f"}, {0x111f, "f"},
		{0x1120, ""}, {0x1250, ""}, {0x1300, ""}, {0x1405, "g"}, {0x1410, ""},
	} {
		s, ok := tab.lookup(tc.v)
		if (ok && s.name != tc.want) || (!ok && tc.want != "") {
			t.Errorf("lookup(%#x) = %q, %v; want %q", tc.v, s.name, ok, tc.want)
		}
	}
}

// TestLibcuda checks NVIDIA's real, stripped libcuda: its exported names
// (its .dynsym) name its frames, and its .eh_frame has an FDE, with the
// usual entry row, for every exported function.
func TestLibcuda(t *testing.T) {
	path, _ := filepath.Abs("../build/nvidia/libcuda.so.1")
	_, err := os.Stat(path)
	e2eenv.Need(t, err == nil, "NVIDIA's libcuda is not in build/nvidia (make nvidia-libs)")
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Section(".symtab") != nil {
		t.Fatal("libcuda.so.1 has a .symtab: this test is about stripped files")
	}
	dyn, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	m := Mapping{Start: 0x7f0000000000, End: 0x7f0010000000, Path: path, BuildID: elfnote.BuildID(path)}
	u := New(LocalFiles{DebugDirs: []string{t.TempDir()}}, 0)
	start := time.Now()
	mod := u.module(m)
	indexed := time.Since(start)
	mod.symbols()
	t.Logf("libcuda (%d MiB): CFI indexed in %v, symbols loaded in %v more", fileSize(path)>>20, indexed, time.Since(start)-indexed)
	if mod.err != nil || mod.eh == nil {
		t.Fatalf("libcuda: %v, .eh_frame %v", mod.err, mod.eh != nil)
	}
	exported, covered := 0, 0
	for _, s := range dyn {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || s.Size == 0 {
			continue
		}
		exported++
		off, ok := fileOffset(f, s.Value)
		if !ok {
			t.Fatalf("%s at %#x is in no segment", s.Name, s.Value)
		}
		sym, ok := u.Symbolize(m, off+s.Size/2, false)
		if !ok || sym.Source != "dynsym" || sym.Offset != s.Size/2 || !sameAddress(dyn, sym.Raw, s.Value) {
			t.Errorf("%s+%#x named %+v", s.Name, s.Size/2, sym)
		}
		fd, _, err := mod.fde(s.Value)
		if err != nil {
			continue
		}
		covered++
		r, err := rowAt(fd, s.Value)
		if err != nil || r.cfa.reg != RegRSP || r.cfa.offset != 8 || r.regs[RegRIP].kind != ruleOffset || r.regs[RegRIP].n != -8 {
			t.Errorf("%s: entry row %+v, %v", s.Name, r, err)
		}
	}
	t.Logf("libcuda: %d exported functions, %d with an FDE", exported, covered)
	if exported < 100 || covered != exported {
		t.Errorf("%d of %d exported functions have CFI", covered, exported)
	}
}

// sameAddress reports whether the symbol name is defined at addr (an
// alias of the symbol looked up).
func sameAddress(syms []elf.Symbol, name string, addr uint64) bool {
	for _, s := range syms {
		if s.Name == name && s.Value == addr {
			return true
		}
	}
	return false
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

func fileOffset(f *elf.File, v uint64) (uint64, bool) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Vaddr <= v && v < p.Vaddr+p.Filesz {
			return v - p.Vaddr + p.Off, true
		}
	}
	return 0, false
}
