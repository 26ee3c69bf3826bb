// Command gpucheck is the helper of scripts/gpu-check.sh (make gpu-check):
//
//	gpucheck exports LIB           list LIB's exports of the hooked families against the symbol table
//	gpucheck coverage LIB REPORT   compare that list with the coverage the recorder stored for LIB
//	                               (REPORT is `forensic analyze --json` output); exit 1 on a difference
//	gpucheck summary REPORT        print the fields of an analyze --json report that the checks read,
//	                               one key=value per line
//
// It reads libcuda with debug/elf on its own, independently of the
// recorder's attach code, and classifies names only through cuda.Lookup and
// cuda.FamilyOf (the symbol table). It never needs a GPU or root.
package main

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/internal/elfnote"
	"github.com/retrivium/forensic/report"
)

const usage = `usage:
  gpucheck exports LIB
  gpucheck coverage LIB REPORT.json
  gpucheck summary REPORT.json
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	code := 0
	switch {
	case args[0] == "exports" && len(args) == 2:
		err = cmdExports(args[1], stdout)
	case args[0] == "coverage" && len(args) == 3:
		var same bool
		same, err = cmdCoverage(args[1], args[2], stdout)
		if err == nil && !same {
			code = 1
		}
	case args[0] == "summary" && len(args) == 2:
		err = cmdSummary(args[1], stdout)
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpucheck %s: %v\n", args[0], err)
		return 2
	}
	return code
}

// inventory is what a library exports, against the symbol table.
type inventory struct {
	Path    string
	BuildID string
	Defined int // defined dynamic symbols
	Funcs   int // of which functions
	// Hooked: table rows the library exports as functions (the recorder
	// attaches to these).
	Hooked []string
	// Unhooked: exported memory and context calls with no row (cuda.Unhooked).
	Unhooked []string
	// Absent: table rows the library does not export as a function.
	Absent []string
	// NotFunc: table rows (or family members) exported as something other
	// than a plain function (an IFUNC, an object): the recorder cannot
	// attach to them as they are.
	NotFunc []string
}

func readInventory(path string) (*inventory, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("dynamic symbols of %s: %w", path, err)
	}
	inv := &inventory{Path: path, BuildID: elfnote.BuildID(path)}
	funcs := map[string]bool{}
	other := map[string]string{}
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF {
			continue
		}
		inv.Defined++
		name, _, _ := strings.Cut(s.Name, "@")
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			inv.Funcs++
			funcs[name] = true
		} else {
			other[name] = elf.ST_TYPE(s.Info).String()
		}
	}
	for _, s := range cuda.Symbols {
		if funcs[s.Name] {
			inv.Hooked = append(inv.Hooked, s.Name)
		} else {
			inv.Absent = append(inv.Absent, s.Name)
		}
	}
	for name := range funcs {
		if _, _, ok := cuda.Lookup(name); ok {
			continue
		}
		if cuda.Unhooked(name) {
			inv.Unhooked = append(inv.Unhooked, name)
		}
	}
	for name, typ := range other {
		_, _, row := cuda.Lookup(name)
		_, fam := cuda.FamilyOf(name)
		if row || fam {
			inv.NotFunc = append(inv.NotFunc, name+" ("+typ+")")
		}
	}
	for _, l := range [][]string{inv.Hooked, inv.Unhooked, inv.Absent, inv.NotFunc} {
		sort.Strings(l)
	}
	return inv, nil
}

func cmdExports(path string, w io.Writer) error {
	inv, err := readInventory(path)
	if err != nil {
		return err
	}
	target, _ := filepath.EvalSymlinks(path)
	fmt.Fprintf(w, "library %s", path)
	if target != "" && target != path {
		fmt.Fprintf(w, " -> %s", target)
	}
	fmt.Fprintf(w, "\nbuild id %s\n", orDash(inv.BuildID))
	fmt.Fprintf(w, "defined dynamic symbols %d (%d functions); symbol table rows %d in %d families\n",
		inv.Defined, inv.Funcs, len(cuda.Symbols), len(cuda.Families()))
	fmt.Fprintf(w, "count hooked=%d unhooked=%d absent=%d notfunc=%d\n",
		len(inv.Hooked), len(inv.Unhooked), len(inv.Absent), len(inv.NotFunc))
	list := func(title string, names []string) {
		fmt.Fprintf(w, "%s (%d):\n", title, len(names))
		for _, n := range names {
			fam, _ := cuda.FamilyOf(n)
			if i := strings.IndexByte(n, ' '); i > 0 {
				fam, _ = cuda.FamilyOf(n[:i])
			}
			fmt.Fprintf(w, "  %-40s family %s\n", n, orDash(fam))
		}
	}
	list("hooked: exported and in the symbol table", inv.Hooked)
	list("exported but not hooked: a memory or context call with no row", inv.Unhooked)
	list("hooked but absent: in the symbol table, not exported", inv.Absent)
	list("exported but not as a plain function (cannot be attached as is)", inv.NotFunc)
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func readReport(path string) (*report.Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep report.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s is not an analyze --json report: %w", path, err)
	}
	return &rep, nil
}

// sameLib says whether the coverage entry names the file at path: the same
// file (through symlinks), else the same build id.
func sameLib(path, buildID string, l report.Library) bool {
	if a, err := os.Stat(path); err == nil {
		if b, err := os.Stat(l.Path); err == nil && os.SameFile(a, b) {
			return true
		}
	}
	return buildID != "" && l.BuildID == buildID
}

func cmdCoverage(lib, reportPath string, w io.Writer) (bool, error) {
	inv, err := readInventory(lib)
	if err != nil {
		return false, err
	}
	rep, err := readReport(reportPath)
	if err != nil {
		return false, err
	}
	var cov *report.Library
	for i, l := range rep.Coverage {
		fmt.Fprintf(w, "recorder attached %s (build id %s): hooked %d, absent %d, unhooked exports %d%s\n",
			l.Path, orDash(l.BuildID), len(l.Hooked), len(l.Absent), len(l.Unknown), errNote(l.Error))
		if cov == nil && sameLib(lib, inv.BuildID, l) {
			cov = &rep.Coverage[i]
		}
	}
	if cov == nil {
		fmt.Fprintf(w, "DIFF the recorder's coverage has no entry for %s (build id %s)\n", lib, orDash(inv.BuildID))
		return false, nil
	}
	same := true
	cmp := func(what string, mine, theirs []string) {
		only := func(a, b []string) []string {
			in := map[string]bool{}
			for _, x := range b {
				in[x] = true
			}
			var out []string
			for _, x := range a {
				if !in[x] {
					out = append(out, x)
				}
			}
			sort.Strings(out)
			return out
		}
		a, b := only(mine, theirs), only(theirs, mine)
		if len(a) == 0 && len(b) == 0 {
			fmt.Fprintf(w, "same %s: %d names\n", what, len(mine))
			return
		}
		same = false
		fmt.Fprintf(w, "DIFF %s: only in the ELF reading %v; only in the recorder's coverage %v\n", what, a, b)
	}
	cmp("hooked", inv.Hooked, cov.Hooked)
	cmp("absent", inv.Absent, cov.Absent)
	cmp("unhooked exports", inv.Unhooked, cov.Unknown)
	return same, nil
}

func errNote(e string) string {
	if e == "" {
		return ""
	}
	return "; error: " + e
}

// cmdSummary prints the fields the checks read. Values never contain a
// newline; absent values print as "null".
func cmdSummary(path string, w io.Writer) error {
	rep, err := readReport(path)
	if err != nil {
		return err
	}
	kv := func(k string, v any) {
		s := fmt.Sprint(v)
		s = strings.Join(strings.Fields(s), " ")
		fmt.Fprintf(w, "%s=%s\n", k, s)
	}
	kv("schema", rep.Schema)
	kv("attribution", rep.Attribution)
	if rep.Capacity != nil {
		kv("capacity", *rep.Capacity)
	} else {
		kv("capacity", "null")
	}
	kv("verdict", rep.Verdict)
	if f := rep.FirstFailure; f != nil {
		kv("ff_symbol", f.Symbol)
		kv("ff_operation", f.Operation)
		kv("ff_result", f.Result)
		kv("ff_result_name", f.ResultName)
		if f.Size != nil {
			kv("ff_size", *f.Size)
		} else {
			kv("ff_size", "null")
		}
		if f.GPU != nil {
			kv("ff_gpu", *f.GPU)
		} else {
			kv("ff_gpu", "null")
		}
		kv("ff_cuda_device", f.CUDADevice)
		kv("ff_gpu_mapping", f.GPUMapping)
		kv("ff_pid", f.PID)
	} else {
		kv("ff_symbol", "null")
	}
	kv("failures", len(rep.Failures))
	for i, m := range rep.Missing {
		kv(fmt.Sprintf("missing.%d", i), fmt.Sprintf("%s (decisive %v)", m.What, m.Decisive))
	}
	for i, e := range rep.Evidence {
		v := "null"
		if e.Value != nil {
			v = fmt.Sprint(*e.Value)
		}
		if e.Text != "" {
			v = e.Text
		}
		kv(fmt.Sprintf("evidence.%d", i), fmt.Sprintf("%s = %s %s [%s, %s]", e.Field, v, e.Unit, e.Source, e.Status))
	}
	kv("ended", rep.Run.Ended)
	if x := rep.Run.WorkloadExit; x != nil && x.Code != nil {
		kv("workload_exit", *x.Code)
	} else if x != nil && x.Signal != nil {
		kv("workload_exit", "signal "+fmt.Sprint(*x.Signal))
	} else {
		kv("workload_exit", "null")
	}
	kv("calls_seen", rep.Loss.Calls)
	kv("events_stored", rep.Loss.Events)
	kv("lost_calls", rep.Loss.LostCalls)
	kv("lost_inflight", rep.Loss.LostInflight)
	kv("lost_before_failure", rep.Loss.BeforeFailure)
	kv("nvml_init", rep.Sampling.NVMLInit)
	kv("samples", rep.Sampling.Samples)
	kv("triggered_rounds", rep.Sampling.Triggered)
	if rep.Sampling.DelayMedian != nil {
		kv("trigger_delay_median_ns", *rep.Sampling.DelayMedian)
	}
	for _, c := range rep.Calls {
		kv("call."+c.Symbol, fmt.Sprintf("%d %d", c.Calls, c.Failed))
	}
	for i, l := range rep.Coverage {
		kv(fmt.Sprintf("coverage.%d", i), fmt.Sprintf("%s hooked=%d absent=%d unhooked=%d%s",
			l.Path, len(l.Hooked), len(l.Absent), len(l.Unknown), errNote(l.Error)))
	}
	return nil
}
