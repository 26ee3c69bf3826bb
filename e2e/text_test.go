package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/retrivium/forensic/internal/e2eenv"
)

// The text report as a terminal shows it: wording, 80 columns, colour.

// The demo's output at 80 columns: every line fits; an instant is said
// once; no nested parentheses, no "NVML NVML_SUCCESS", no zero loss
// counts; the memory views explain why "framebuffer used" never shows the
// memory the verdict says ran out. The export gives cuInit no CUDA device
// and cuDeviceGet no pointer.
func TestDemoTextWording(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, filepath.Join(simDir, "scenarios", "weights_oom"))
	out := textAt80(t, res.db)
	for i, line := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(line); n > 80 {
			t.Errorf("line %d has %d columns: %q", i+1, n, line)
		}
	}
	if m := regexp.MustCompile(`(\+\d+\.\d+ s) to (\+\d+\.\d+ s)`).FindAllStringSubmatch(out, -1); m != nil {
		for _, x := range m {
			if x[1] == x[2] {
				t.Errorf("an instant said twice: %q", x[0])
			}
		}
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, nested := range []string{"((", "))"} {
		if strings.Contains(flat, nested) {
			t.Errorf("nested parentheses %q:\n%s", nested, out)
		}
	}
	// Counts of nothing lost are said once, as "none lost", and a sample's
	// status follows its source once.
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`LOSS AND SAMPLING \d+ calls seen, \d+ events stored, none lost NVML \(`),
		regexp.MustCompile(`from nvmlDeviceGetMemoryInfo_v2 / nvmlMemory_v2_t(, corrected by traced calls)?, NVML_SUCCESS, at \+`),
	} {
		if !want.MatchString(flat) {
			t.Errorf("does not match %q:\n%s", want, out)
		}
	}
	if !strings.Contains(flat, "framebuffer-exhausted") {
		t.Errorf("lacks the capacity:\n%s", out)
	}
	// The workload frees everything right after its failure, so the
	// failure's own sample usually comes after the peak, and the memory
	// views must say why "used" never shows it; on a loaded machine that
	// sample can still catch the peak, and then it shows it.
	peakSeen := strings.Contains(flat, "used 15.00 GiB, total 16.00 GiB")
	if note := "no sample was taken while the traced processes' device memory was at its peak"; !peakSeen && !strings.Contains(flat, note) {
		t.Errorf("no sample read the peak, and the text lacks %q:\n%s", note, out)
	}
	seen := map[string]bool{}
	for _, e := range chromeEvents(t, res.db) {
		if e.Ph != "X" || seen[e.Name] {
			continue
		}
		seen[e.Name] = true
		_, dev := e.Args["cuda_device"]
		_, ptr := e.Args["ptr"]
		switch e.Name {
		case "cuInit":
			if dev {
				t.Errorf("cuInit, before any context, has a CUDA device: %v", e.Args)
			}
		case "cuDeviceGet":
			if ptr || e.Args["device_handle"] == nil {
				t.Errorf("cuDeviceGet returns a device handle, not a pointer: %v", e.Args)
			}
		case "cuMemAlloc_v2":
			if !dev || !ptr {
				t.Errorf("an allocation in a context lacks its device or pointer: %v", e.Args)
			}
		}
	}
}

// The VERDICT heading is coloured by its attribution as the HTML report
// is: red for an allocation problem, green when nothing failed.
func TestVerdictHeadingColour(t *testing.T) {
	_, err := exec.LookPath("script")
	e2eenv.Need(t, err == nil, "util-linux script (a terminal for the colour) is not installed")
	tests := []struct {
		name, steps, want string
	}{
		{"allocation", "init; use 0; alloc 40G; exit 1", "\x1b[1;31mVERDICT"},
		{"none", "init; use 0; alloc 1G; free-all", "\x1b[1;32mVERDICT"},
	}
	for _, tt := range tests {
		w := newWorld(t)
		res := w.record(nil, script(tt.steps)...)
		cmd := exec.Command("script", "-qec", binPath+" analyze "+res.db, "/dev/null")
		cmd.Env = append(os.Environ(), "COLUMNS=80", "NO_COLOR=")
		var out bytes.Buffer
		cmd.Stdout = &out
		cmd.Run() // a verdict is not an error; the text is what is checked
		if !strings.Contains(out.String(), tt.want) {
			t.Errorf("%s: heading %q not found:\n%q", tt.name, tt.want, firstLines(out.String(), 8))
		}
	}
}
