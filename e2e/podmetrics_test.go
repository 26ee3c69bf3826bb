package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A failure in a pod's container is counted under its namespace and pod
// in the metrics, and its event line names them too.
func TestPodLabelsOnFailures(t *testing.T) {
	w := newWorld(t)
	ctr := newContainer(t, w.dir)
	events := filepath.Join(w.dir, "events.jsonl")
	fr := w.startFlight(ctr.run("init; use 0; alloc 300G")+` > f.txt 2>&1; touch failed; while [ ! -e stop ]; do sleep 0.1; done`,
		"--events", events)
	fr.pollUntil(30*time.Second, "the container's failure", func() bool { return exists(filepath.Join(fr.work, "failed")) })
	var n float64
	fr.pollUntil(10*time.Second, "the pod's failure in the metrics", func() bool {
		n, _ = value(scrape(t, fr.metrics), "forensic_pod_failed_calls_total", "namespace=e2e-ns", "pod=e2e-pod-0", "class=allocation")
		return n > 0
	})
	if n != 1 {
		t.Errorf("forensic_pod_failed_calls_total{namespace=e2e-ns,pod=e2e-pod-0} = %v, want 1", n)
	}
	os.WriteFile(filepath.Join(fr.work, "stop"), nil, 0o644)
	if err := <-fr.done; err != nil {
		t.Errorf("record: %v\n%s", err, fr.log.String())
	}
	lines := eventLines(t, events)
	if len(lines) != 1 || lines[0]["namespace"] != "e2e-ns" || lines[0]["pod"] != "e2e-pod-0" || lines[0]["size_bytes"] != float64(300<<30) {
		t.Errorf("event lines %v, want the failed allocation of pod e2e-ns/e2e-pod-0", lines)
	}
}
