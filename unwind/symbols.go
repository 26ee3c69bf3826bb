package unwind

import (
	"debug/elf"
	"sort"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// symbol is one function of a symbol table, at a virtual address.
type symbol struct {
	name       string
	addr, size uint64
}

// Symbol names a code address.
type Symbol struct {
	// Function is the function's name, demangled without parameter lists
	// for C++ ("at::native::empty_cuda").
	Function string
	// Raw is the name as the symbol table spells it (mangled for C++).
	Raw string
	// Offset is the address's distance from the function's start.
	Offset uint64
	// Source says which table named it: "symtab", "debug-symtab" (a
	// separate debug file) or "dynsym" (exported names only).
	Source string
}

// symtab is a file's function symbols sorted by address.
type symtab struct {
	syms   []symbol
	source string
}

// functions returns the function symbols of syms, sorted.
func functions(syms []elf.Symbol) []symbol {
	var out []symbol
	for _, s := range syms {
		t := elf.ST_TYPE(s.Info)
		if (t != elf.STT_FUNC && t != elf.STT_GNU_IFUNC) || s.Value == 0 || s.Section == elf.SHN_UNDEF {
			continue
		}
		out = append(out, symbol{name: s.Name, addr: s.Value, size: s.Size})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].addr != out[j].addr {
			return out[i].addr < out[j].addr
		}
		// Aliases: prefer a sized, global-looking name.
		return out[i].size > out[j].size || (out[i].size == out[j].size && len(out[i].name) < len(out[j].name))
	})
	return out
}

// loadSymtab reads the best symbol table available: the file's .symtab,
// else a debug file's .symtab, else the file's .dynsym.
func loadSymtab(f, debug *elf.File) symtab {
	if f != nil {
		if syms, err := f.Symbols(); err == nil {
			if fs := functions(syms); len(fs) > 0 {
				return symtab{syms: fs, source: "symtab"}
			}
		}
	}
	if debug != nil {
		if syms, err := debug.Symbols(); err == nil {
			if fs := functions(syms); len(fs) > 0 {
				return symtab{syms: fs, source: "debug-symtab"}
			}
		}
	}
	if f != nil {
		if syms, err := f.DynamicSymbols(); err == nil {
			return symtab{syms: functions(syms), source: "dynsym"}
		}
	}
	return symtab{}
}

// lookup finds the function holding virtual address v. A sized symbol
// holds [addr, addr+size); an unsized one (assembly labels such as
// _start) holds addresses up to the next symbol.
func (t symtab) lookup(v uint64) (symbol, bool) {
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].addr > v }) - 1
	if i < 0 {
		return symbol{}, false
	}
	// Among the symbols starting at the same address, lookup sorted the
	// preferred one first.
	for i > 0 && t.syms[i-1].addr == t.syms[i].addr {
		i--
	}
	s := t.syms[i]
	if s.size != 0 && v >= s.addr+s.size {
		return symbol{}, false
	}
	return s, true
}

// Demangle returns a C++ (Itanium ABI) name without its parameter lists,
// and any other name unchanged.
func Demangle(name string) string {
	if !strings.HasPrefix(name, "_Z") {
		return name
	}
	if d, err := demangle.ToString(name, demangle.NoParams); err == nil {
		return d
	}
	return name
}
