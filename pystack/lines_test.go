package pystack

import (
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"testing"
)

func TestLine310(t *testing.T) {
	// (bytecode delta, line delta) pairs from line 10: [0,6) line 10,
	// [6,10) line 12, [10,12) no line, [12,20) line 9 (a loop's back
	// edge), an empty range that still moves the line, [20,24) line 14.
	table := []byte{6, 0, 4, 2, 2, 0x80, 8, 0xfd, 0, 3, 4, 2}
	for _, tc := range []struct {
		addr int64
		want int
	}{{-2, 10}, {0, 10}, {4, 10}, {6, 12}, {8, 12}, {10, 0}, {12, 9}, {18, 9}, {20, 14}, {22, 14}, {24, 0}} {
		if got := lineAt(lines310, table, 10, tc.addr); got != tc.want {
			t.Errorf("offset %d: line %d, want %d", tc.addr, got, tc.want)
		}
	}
}

func TestLine311(t *testing.T) {
	entry := func(code, units int) byte { return byte(0x80 | code<<3 | (units - 1)) }
	table := []byte{
		entry(0, 2), 5, // short form, same line (20): [0,4)
		entry(11, 1), 4, 9, // one-line form, line +1 = 21: [4,6)
		entry(13, 3), 4, // no columns, svarint +2 = 23: [6,12)
		entry(14, 1), 13, 0, 5, 9, // long form, svarint 13 = -6 -> 17: [12,14)
		entry(15, 2),                      // no location: [14,18)
		entry(14, 8), 0x41, 0x01, 0, 1, 1, // long form, varint 0x41 0x01 = 65, svarint -> -32 ... -15: [18,34)
		entry(12, 1), 0, 0, // one-line +2 -> -13: [34,36)
	}
	for _, tc := range []struct {
		addr int64
		want int
	}{{-2, 20}, {0, 20}, {2, 20}, {4, 21}, {6, 23}, {10, 23}, {12, 17}, {14, 0}, {16, 0}, {18, -15}, {32, -15}, {34, -13}, {36, 0}} {
		if got := lineAt(lines311, table, 20, tc.addr); got != tc.want {
			t.Errorf("offset %d: line %d, want %d", tc.addr, got, tc.want)
		}
	}
	for _, cut := range []int{2, 6, 8} { // after the first entry; before a line delta
		if got := lineAt(lines311, table[:cut], 20, 12); got != 0 {
			t.Errorf("table cut at %d bytes: line %d for an entry past the cut", cut, got)
		}
	}
	if got := lineAt(lines311, table[:9], 20, 12); got != 17 {
		t.Errorf("table cut after the long form's line delta: line %d, want 17", got)
	}
	if got := lineAt(lines311, []byte{0x05, 0x80}, 20, 0); got != 0 {
		t.Errorf("a table not starting with an entry: line %d", got)
	}
}

func TestVarint(t *testing.T) {
	for _, tc := range []struct {
		b  []byte
		u  uint
		s  int
		ok bool
	}{
		{[]byte{0}, 0, 0, true}, {[]byte{1}, 1, -0, true}, {[]byte{3}, 3, -1, true}, {[]byte{62}, 62, 31, true},
		{[]byte{0x40 | 2, 1}, 66, 33, true}, {[]byte{0x7f, 0x7f, 0x01}, 8191, -4095, true},
		{[]byte{0x40 | 2}, 2, 1, false}, {nil, 0, 0, false},
	} {
		u, ok := varint(tc.b)
		s, _ := svarint(tc.b)
		if u != tc.u || ok != tc.ok || s != tc.s {
			t.Errorf("varint(%x) = %d, %d, %v; want %d, %d, %v", tc.b, u, s, ok, tc.u, tc.s, tc.ok)
		}
	}
}

// lineDump makes an interpreter compile a large stdlib module and print,
// for every code object, its line table and what co_lines() says about
// each bytecode range: the interpreter's own answer to compare with.
const lineDump = `
import inspect, json, sys
src = open(inspect.__file__).read()
out = []
def walk(co):
    out.append({"first": co.co_firstlineno, "table": co.co_linetable.hex(),
                "lines": [[s, e, -1 if l is None else l] for s, e, l in co.co_lines()]})
    for c in co.co_consts:
        if hasattr(c, "co_lines"):
            walk(c)
walk(compile(src, "inspect.py", "exec"))
json.dump(out, sys.stdout)
`

// TestLineTablesMatchCPython decodes the line tables of every code object
// of inspect.py, compiled by each interpreter found, and compares each
// bytecode offset's line with the interpreter's co_lines().
func TestLineTablesMatchCPython(t *testing.T) {
	for _, in := range pythons(t) {
		l, err := layoutFor(in.major, in.minor)
		if err != nil {
			continue
		}
		t.Run(in.String(), func(t *testing.T) {
			b, err := exec.Command(in.path, "-c", lineDump).Output()
			if err != nil {
				t.Fatal(err)
			}
			var codes []struct {
				First int32
				Table string
				Lines [][3]int
			}
			if err := json.Unmarshal(b, &codes); err != nil {
				t.Fatal(err)
			}
			checked := 0
			for _, c := range codes {
				table, _ := hex.DecodeString(c.Table)
				for _, r := range c.Lines {
					want := max(r[2], 0)
					for off := r[0]; off < r[1]; off += 2 {
						if got := lineAt(l.Lines, table, c.First, int64(off)); got != want {
							t.Fatalf("code at line %d, offset %d: line %d, CPython says %d", c.First, off, got, want)
						}
						checked++
					}
				}
			}
			t.Logf("%d code objects, %d bytecode offsets", len(codes), checked)
			if checked < 1000 {
				t.Errorf("only %d offsets checked", checked)
			}
		})
	}
}
