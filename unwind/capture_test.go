package unwind

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/internal/elfnote"
)

// The test programs under testdata/stacks write, through capture.h's
// fx_dump: "FXSTACK1", eight registers (ip, sp, bp, bx, r12..r15), the
// stack's address and length, the stack bytes, then the length and text
// of /proc/self/maps; all integers little-endian uint64.

const stacksDir = "../testdata/stacks"

// needGCC skips (or fails under FORENSIC_REQUIRE_E2E) without a compiler.
func needGCC(t testing.TB) {
	t.Helper()
	_, err := exec.LookPath("gcc")
	e2eenv.Need(t, err == nil, "gcc is needed to build the test programs under testdata/stacks")
}

// gcc compiles sources from testdata/stacks into dir/out.
func gcc(t testing.TB, dir, out string, args ...string) string {
	t.Helper()
	src, err := filepath.Abs(stacksDir)
	if err != nil {
		t.Fatal(err)
	}
	full := []string{"-Wall", "-Werror", "-I", src, "-o", filepath.Join(dir, out)}
	for _, a := range args {
		if strings.HasSuffix(a, ".c") {
			a = filepath.Join(src, a)
		}
		full = append(full, a)
	}
	cmd := exec.Command("gcc", full...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(full, " "), err, b)
	}
	return filepath.Join(dir, out)
}

// captured is one capture written by a test program.
type captured struct {
	Capture
	maps string
}

// runCapture runs exe with args and env (its capture goes to a file in
// dir) and reads the capture back.
func runCapture(t testing.TB, dir, exe string, args, env []string) captured {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(exe)+".cap")
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), append(env, "FX_CAPTURE_OUT="+out)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", exe, err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseCapture(data)
	if err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	return c
}

func parseCapture(data []byte) (captured, error) {
	var c captured
	if !bytes.HasPrefix(data, []byte("FXSTACK1")) || len(data) < 8+8*10 {
		return c, os.ErrInvalid
	}
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(data[8+8*i:]) }
	for i, reg := range []int{RegRIP, RegRSP, RegRBP, RegRBX, RegR12, RegR13, RegR14, RegR15} {
		c.Regs.Set(reg, u(i))
	}
	c.Stack.Addr = u(8)
	n := u(9)
	rest := data[8+8*10:]
	if uint64(len(rest)) < n+8 {
		return c, os.ErrInvalid
	}
	c.Stack.Data = rest[:n]
	rest = rest[n:]
	ml := binary.LittleEndian.Uint64(rest)
	if uint64(len(rest)-8) < ml {
		return c, os.ErrInvalid
	}
	c.maps = string(rest[8 : 8+ml])
	c.Mappings = parseMaps(c.maps)
	return c, nil
}

// parseMaps returns the executable mappings of a /proc/PID/maps text, with
// the build ids of their files.
func parseMaps(text string) []Mapping {
	var out []Mapping
	ids := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.Contains(f[1], "x") {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, _ := strconv.ParseUint(lo, 16, 64)
		end, _ := strconv.ParseUint(hi, 16, 64)
		off, _ := strconv.ParseUint(f[2], 16, 64)
		m := Mapping{Start: start, End: end, Offset: off}
		if len(f) >= 6 {
			m.Path = strings.Join(f[5:], " ")
		}
		if strings.HasPrefix(m.Path, "/") {
			id, ok := ids[m.Path]
			if !ok {
				id = elfnote.BuildID(m.Path)
				ids[m.Path] = id
			}
			m.BuildID = id
		}
		out = append(out, m)
	}
	return out
}

// names returns the function names of a walk's frames ("?" when unnamed).
func names(r Result) []string {
	var out []string
	for _, f := range r.Frames {
		n := f.Function
		if n == "" {
			n = "?"
		}
		out = append(out, n)
	}
	return out
}
