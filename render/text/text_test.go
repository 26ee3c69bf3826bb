package text

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/retrivium/forensic/report"
)

// The human report fits the terminal it is given (100 and 80 columns), and
// has no colour unless asked (a TTY).
func TestTextFitsWidth(t *testing.T) {
	size := uint64(1 << 30)
	gpu, idx := "GPU-b0ae225f-1d3a-d2cc-f557-bca7789e4f53", 0
	long := strings.Repeat("a very long explanation ", 20)
	ff := report.Failure{Symbol: "cuMemHostGetDevicePointer_v2", Operation: "mapping", Result: 712,
		ResultName: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", Size: &size, PID: 4194304, TID: 4194305,
		GPU: &gpu, GPUIndex: &idx, GPUMapping: "visible-devices-index+order-pci-bus-id", Phase: long,
		Stack:               &report.Stack{Partial: true, Note: long, Frames: []report.Frame{{Function: strings.Repeat("f", 90), Library: "libx.so"}}},
		PossibleConsequence: true, Recovered: true}
	v := uint64(150 << 30)
	ch := int64(150 << 30)
	rep := &report.Report{
		Run:          report.RunInfo{Path: "/very/long/" + strings.Repeat("dir/", 30) + "run.db", Command: strings.Fields(long)},
		FirstFailure: &ff, Attribution: report.AttrMapping, Verdict: long, Cause: &report.Cause{Text: long},
		Missing:  []report.Missing{{What: long, Fix: long, Decisive: true}},
		Evidence: []report.Evidence{{Field: long, Value: &v, Unit: "bytes", Source: long, Status: "NVML_SUCCESS", Note: long}},
		Failures: []report.Failure{ff, ff},
		MemoryViews: []report.ViewRow{{GPU: 7, Field: "framebuffer reserved", Scope: "pid 4194304", Support: long,
			Start: &v, Before: &v, At: &v, End: &v, Peak: &v, Change: &ch, Phases: []report.PhaseValue{{Phase: "x", Last: &v}}}},
		Phases:    []report.Phase{{Label: long}},
		Processes: []report.ProcessInfo{{PID: 4194304, Exe: "/" + strings.Repeat("x", 200), Devices: []report.DeviceMap{{Method: "unknown", Why: long}}}},
		Coverage:  []report.Library{{Path: long, Absent: strings.Fields(long)}},
		KernelLog: []report.KernelLine{{Text: long}},
	}
	for _, width := range []int{0, 100, 80} {
		var b bytes.Buffer
		if err := Write(&b, rep, Options{Width: width}); err != nil {
			t.Fatal(err)
		}
		limit := width
		if limit == 0 {
			limit = 100 // the default when not a terminal
		}
		for i, line := range strings.Split(b.String(), "\n") {
			if n := utf8.RuneCountInString(line); n > limit {
				t.Errorf("width %d: line %d has %d columns: %q", width, i+1, n, line)
			}
		}
		if strings.Contains(b.String(), "\x1b[") {
			t.Error("colour escapes without a TTY")
		}
		// The verdict's words are all there: wrapped, never cut.
		if !strings.Contains(strings.Join(strings.Fields(b.String()), " "), strings.TrimSpace(long)) {
			t.Errorf("width %d: the verdict was cut", width)
		}
	}
}

// The memory-view table's "at fail" column is the sample as read; when the
// verdict used a reconciled value, a note under the table says which, so the
// two never seem to disagree unexplained.
func TestTextNotesReconciledValue(t *testing.T) {
	free, sample := uint64(512<<20), uint64(15872<<20)
	gpu := 0
	tests := []struct {
		name     string
		evidence []report.Evidence
		want     string // "" when no note is expected
	}{
		{"exact", []report.Evidence{{Field: "framebuffer free at the failure", Value: &free, GPU: &gpu, Decisive: true,
			Source: "nvmlDeviceGetMemoryInfo_v2 / nvmlMemory_v2_t, corrected by traced calls"}},
			`GPU 0's "at failure" is the sample as read; the verdict used framebuffer free at the failure: 512.0 MiB`},
		{"bounds", []report.Evidence{{Field: "BAR1 free at the failure", Value: &free, Text: "between 512.0 MiB and 1.00 GiB", GPU: &gpu,
			Decisive: true, Source: "nvmlDeviceGetBAR1MemoryInfo, corrected by traced calls"}},
			`the verdict used BAR1 free at the failure: between 512.0 MiB and 1.00 GiB`},
		{"sample only", []report.Evidence{{Field: "framebuffer free at the failure", Value: &sample, GPU: &gpu, Decisive: true,
			Source: "nvmlDeviceGetMemoryInfo_v2 / nvmlMemory_v2_t"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := &report.Report{Evidence: tt.evidence, MemoryViews: []report.ViewRow{{GPU: 0, Field: "framebuffer free",
				Support: "supported", At: &sample}}}
			var b bytes.Buffer
			if err := Write(&b, rep, Options{}); err != nil {
				t.Fatal(err)
			}
			out := strings.Join(strings.Fields(b.String()), " ")
			if tt.want == "" {
				if strings.Contains(out, "the verdict used") {
					t.Errorf("note without a reconciled value:\n%s", b.String())
				}
			} else if !strings.Contains(out, tt.want) {
				t.Errorf("want %q in:\n%s", tt.want, b.String())
			}
		})
	}
}

// A Python process's stack lists its Python frames first, each with its
// file and line, then the native frames; every line fits the width.
func TestTextPythonFramesFirst(t *testing.T) {
	file := "/srv/" + strings.Repeat("deep/", 30) + "train.py"
	ff := report.Failure{Symbol: "cuMemAlloc_v2", Operation: "allocation", Stack: &report.Stack{Method: "unwound", Stop: "outermost",
		Python: "ok", Frames: []report.Frame{
			{Function: "ffi_call", Offset: 0xcd, Library: "libffi.so.8", Language: report.LangNative},
			{Function: "Model.forward", File: file, Line: 42, Language: report.LangPython},
			{Function: "main", File: "train.py", Language: report.LangPython},
			{Function: "Py_RunMain", Offset: 9, Library: "python3.11", Language: report.LangNative},
		}}}
	var b bytes.Buffer
	if err := Write(&b, &report.Report{FirstFailure: &ff}, Options{Width: 80}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	order := []string{"  python    Model.forward", "train.py:42)", "            main (train.py)",
		"  native    ffi_call+0xcd (libffi.so.8)", "            Py_RunMain+0x9 (python3.11)"}
	at := 0
	for _, s := range order {
		i := strings.Index(out[at:], s)
		if i < 0 {
			t.Fatalf("%q not after byte %d of:\n%s", s, at, out)
		}
		at += i + len(s)
	}
	for i, line := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(line); n > 80 {
			t.Errorf("line %d has %d columns: %q", i+1, n, line)
		}
	}
}

// A stack frame too wide for the terminal wraps onto indented lines: its
// offset, its library's name and its file's name are all there, never cut.
func TestTextFramesWrapNeverCut(t *testing.T) {
	frames := []report.Frame{
		{Function: "_ctypes_callproc.cold", Offset: 0x5ab, Library: "_ctypes.cpython-311-x86_64-linux-gnu.so", Language: report.LangNative},
		{Function: "PyCFuncPtr_call.cold", Offset: 0x19a, Library: "_ctypes.cpython-311-x86_64-linux-gnu.so", Language: report.LangNative},
		{Address: 0x7f3efcae1f7a, Library: "/opt/" + strings.Repeat("long-directory-name/", 5) + "libffi.so.8.1.2"},
		{Function: "step", File: "/srv/" + strings.Repeat("deep/", 20) + "train.py", Line: 123, Language: report.LangPython},
	}
	want := []string{"_ctypes_callproc.cold+0x5ab (_ctypes.cpython-311-x86_64-linux-gnu.so)",
		"PyCFuncPtr_call.cold+0x19a (_ctypes.cpython-311-x86_64-linux-gnu.so)",
		"0x7f3efcae1f7a (" + frames[2].Library + ")", "step (" + frames[3].File + ":123)"}
	for _, width := range []int{60, 80, 100} {
		ff := report.Failure{Symbol: "cuMemAlloc_v2", Stack: &report.Stack{Frames: frames}}
		var b bytes.Buffer
		if err := Write(&b, &report.Report{FirstFailure: &ff}, Options{Width: width}); err != nil {
			t.Fatal(err)
		}
		var joined strings.Builder
		for i, line := range strings.Split(b.String(), "\n") {
			if n := utf8.RuneCountInString(line); n > width {
				t.Errorf("width %d: line %d has %d columns: %q", width, i+1, n, line)
			}
			joined.WriteString(strings.ReplaceAll(line, " ", ""))
		}
		if strings.Contains(b.String(), "…") {
			t.Errorf("width %d: a frame was cut:\n%s", width, b.String())
		}
		for _, w := range want {
			if !strings.Contains(joined.String(), strings.ReplaceAll(w, " ", "")) {
				t.Errorf("width %d: %q is not whole in:\n%s", width, w, b.String())
			}
		}
	}
}

// Stack captures the rate limit skipped, or that were lost, are said in
// the loss section, and only then.
func TestTextStackCaptureLoss(t *testing.T) {
	for _, l := range []report.Loss{{Known: true}, {Known: true, StackSkipped: 7, StackLost: 2}} {
		var b bytes.Buffer
		if err := Write(&b, &report.Report{Loss: l}, Options{}); err != nil {
			t.Fatal(err)
		}
		want := l.StackSkipped > 0
		if got := strings.Contains(b.String(), "stack captures: 7 skipped by their rate limit, 2 lost"); got != want {
			t.Errorf("loss %+v: stack capture line shown %v:\n%s", l, got, b.String())
		}
	}
}

// The header names what the user asked for (a directory, a glob), else
// the run's own path.
func TestTextHeaderInput(t *testing.T) {
	rep := &report.Report{Run: report.RunInfo{Path: "runs/rank2.db"}, Attribution: report.AttrNone}
	for _, tc := range []struct{ input, want string }{
		{"", "forensic analyze runs/rank2.db\n"},
		{"runs/ (4 files)", "forensic analyze runs/ (4 files)\n"},
	} {
		var b bytes.Buffer
		if err := Write(&b, rep, Options{Width: 80, Input: tc.input}); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(b.String(), tc.want) {
			t.Errorf("Input %q: header %q, want %q", tc.input, strings.SplitN(b.String(), "\n", 2)[0], tc.want)
		}
	}
}

// A free row whose low differs from its other readings (the view dipped
// between start and end and came back) is no "unchanged throughout" row:
// its low is shown; one whose every reading, low included, is the same is.
func TestMemoryViewFreeRowThatDippedIsNotUnchanged(t *testing.T) {
	v := func(x uint64) *uint64 { return &x }
	rep := &report.Report{MemoryViews: []report.ViewRow{
		{GPU: 0, Field: "bar1 free", Scope: "device", Support: "supported", Start: v(252 << 20), End: v(252 << 20),
			Peak: v(252 << 20), Low: v(12 << 20)},
		{GPU: 0, Field: "bar1 total", Scope: "device", Support: "supported", Start: v(256 << 20), End: v(256 << 20),
			Peak: v(256 << 20), Low: v(256 << 20)},
	}}
	for _, width := range []int{80, 120} {
		var b bytes.Buffer
		if err := Write(&b, rep, Options{Width: width}); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if strings.Contains(out, "free 252.0") || !strings.Contains(out, "12.0") {
			t.Errorf("width %d: the free row that dipped to 12 MiB reads as unchanged:\n%s", width, out)
		}
		if !strings.Contains(out, "unchanged throughout: total 256.0") {
			t.Errorf("width %d: the steady total is not one line:\n%s", width, out)
		}
	}
}

// Phases over views that never moved say so in one line, instead of a
// heading for growth with nothing under it.
func TestPhasesWithNoGrowthSaySoInOneLine(t *testing.T) {
	v := func(x uint64) *uint64 { return &x }
	rep := &report.Report{Phases: []report.Phase{{Label: "up to first failure", StartNS: 0, EndNS: 10}},
		MemoryViews: []report.ViewRow{{GPU: 0, Field: "bar1 total", Scope: "device", Support: "supported",
			Start: v(256 << 20), End: v(256 << 20), Phases: []report.PhaseValue{{Phase: "up to first failure", Last: v(256 << 20)}}}}}
	var b bytes.Buffer
	if err := Write(&b, rep, Options{Width: 80}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "growth within each phase") || !strings.Contains(out, "no view grew or shrank within a phase") {
		t.Errorf("phases with no growth:\n%s", out)
	}
}

// PROCESSES lists the processes that took part one by one and counts the
// bystanders a shim or launcher forks in one line, commonest first.
func TestProcessesCountBystandersInOneLine(t *testing.T) {
	zero := 0
	ok := &report.Exit{Code: &zero}
	ps := []report.ProcessInfo{{PID: 100, Exe: "/usr/bin/python3", Args: []string{"python3", "serve.py"}, Root: true, Calls: 12, Exit: ok}}
	for i, exe := range []string{"pyenv", "pyenv", "bash", "pyenv", "readlink", "head", "uname", "sed", "cut"} {
		ps = append(ps, report.ProcessInfo{PID: uint32(200 + i), Exe: "/usr/bin/" + exe, Args: []string{exe}, Exit: ok})
	}
	var b bytes.Buffer
	if err := Write(&b, &report.Report{Processes: ps}, Options{Width: 80}); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(b.String()), " ")
	for _, want := range []string{"pid 100 (parent 0): exit 0, 12 calls", "$ python3 serve.py",
		"and 9 more that made no CUDA call and exited 0 (--json lists each): pyenv (3), bash (1), cut (1), head (1), readlink (1), 2 other programs"} {
		if !strings.Contains(text, want) {
			t.Errorf("PROCESSES lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(text, "pid 201") {
		t.Errorf("a bystander is listed one by one:\n%s", b.String())
	}
}
