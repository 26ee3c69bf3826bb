package e2e

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// A CUDA context holds framebuffer of its own, which no traced call sizes
// (SIMGPU_CTX_MEM stands in for a real driver's hundreds of MiB). The
// workload holds 5 GiB traced and 1 GiB of context on an 8 GiB GPU (512
// MiB reserved): 1.5 GiB free when it asks for 2 GiB and exits. A sample
// read after the exit shows 7.5 GiB free; less the 5 GiB its traced frees
// explain, 2.5 GiB, which would say "had room" for the 2 GiB request. The
// exit is a release of unknown size, so that sample only bounds free at
// the failure from above: the sample before the failure decides, or
// capacity is unknown, never "had room". Held stopped until its sample is
// read (--freeze-on-failure), the failure's own sample is exact.
func TestContextMemoryFreedAtExit(t *testing.T) {
	const script = "init; use 0; alloc 5G; sleep 400; alloc 2G; exit 1"
	cases := []struct {
		name  string
		flags []string
		// want is the capacity when the failure's sample came after the
		// exit (the recorder reads it a moment after the failure, and the
		// workload exits at once): the nearest sample before decides, or
		// nothing does.
		want report.Capacity
	}{
		{"a sample before the failure", []string{"--interval", "100ms"}, report.CapFBExhausted},
		{"no sample before the failure", []string{"--interval", "10s"}, report.CapUnknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.want != report.CapFBExhausted {
				verdictVaries(t, "the capacity is exhausted when the failure's sample is read before the exit, else unknown: the machine's load decides which")
			}
			// No calls file: writing it would delay the exit past the
			// recorder's sample of the failure.
			w := newWorld(t, "SIMGPU_FB_TOTAL=8G", "SIMGPU_CTX_MEM=1G", "SIMWORK_CALLS=")
			res := w.record(c.flags, simwork, script)
			rep, _ := analyzeJSON(t, res.db)
			if rep.FirstFailure == nil || rep.Capacity == nil {
				t.Fatalf("no failure judged; recorder said:\n%s", res.stderr)
			}
			got, text := *rep.Capacity, contextText(rep)
			if got == report.CapFBHadRoom {
				t.Fatalf("had room, judged from a sample after the exit freed the context: %s", rep.Verdict)
			}
			if !strings.Contains(text, "exited, freeing its CUDA context on GPU 0") {
				// The recorder read the sample before the workload exited:
				// it is exact, and says exhausted (1.5 GiB free).
				if got != report.CapFBExhausted {
					t.Errorf("capacity %s from a sample before the exit: %s", got, rep.Verdict)
				}
				t.Logf("the failure's sample came before the exit: %s", rep.Verdict)
				return
			}
			if got != c.want {
				t.Errorf("capacity %s, want %s: %s", got, c.want, rep.Verdict)
			}
			if got == report.CapUnknown && !strings.Contains(text, "--freeze-on-failure") {
				t.Errorf("the missing evidence does not say what settles it: %s", text)
			}
		})
	}
	t.Run("held stopped", func(t *testing.T) {
		w := newWorld(t, "SIMGPU_FB_TOTAL=8G", "SIMGPU_CTX_MEM=1G")
		res := w.record([]string{"--freeze-on-failure", "--interval", "10s"}, simwork, script)
		rep, _ := analyzeJSON(t, res.db)
		if rep.Capacity == nil || *rep.Capacity != report.CapFBExhausted {
			t.Fatalf("capacity %v, want framebuffer-exhausted: %s\n%s", rep.Capacity, rep.Verdict, res.stderr)
		}
		if text := contextText(rep); !strings.Contains(text, "the process held stopped") || strings.Contains(text, "exited, freeing") {
			t.Errorf("not judged from the failure's own sample, taken while the process was held: %s", text)
		}
	})
}

// contextText is the verdict, the evidence's texts and notes and the
// missing evidence with its fixes.
func contextText(rep *report.Report) string {
	text := []string{rep.Verdict}
	for _, e := range rep.Evidence {
		text = append(text, e.Text, e.Note)
	}
	for _, m := range rep.Missing {
		text = append(text, m.What, m.Fix)
	}
	return strings.Join(text, " / ")
}
