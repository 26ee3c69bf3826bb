package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retrivium/forensic/internal/e2eenv"
)

// scrapeInterval is the test Prometheus's scrape interval; it evaluates
// the rules every second.
const scrapeInterval = 2 * time.Second

// promServer is a real Prometheus server (Debian's) on loopback, scraping
// one flight recorder with the shipped rules loaded.
type promServer struct {
	t    *testing.T
	addr string // host:port of its API
	cmd  *exec.Cmd
	log  bytes.Buffer
}

// startPrometheus starts Prometheus with a generated configuration that
// scrapes target (host:port) every scrapeInterval and evaluates
// deploy/prometheus/forensic-rules.yml every second. It stops when the
// test ends.
func startPrometheus(t *testing.T, dir, target string) *promServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	e2eenv.Need(t, err == nil, "prometheus not found (scripts/deps.sh test installs Debian's prometheus)")
	rules := filepath.Join(repo, "deploy", "prometheus", "forensic-rules.yml")
	cfg := fmt.Sprintf(`global:
  scrape_interval: %s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: forensic
    static_configs:
      - targets: [%q]
`, scrapeInterval, rules, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &promServer{t: t, addr: freePort(t)}
	p.cmd = exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+p.addr, "--log.level=warn")
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-done
		}
	})
	return p
}

// get decodes the data of a Prometheus API answer; false when the server
// does not answer (yet).
func (p *promServer) get(path string, q url.Values, data any) bool {
	resp, err := http.Get("http://" + p.addr + path + "?" + q.Encode())
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) != nil || body.Status != "success" {
		return false
	}
	return json.Unmarshal(body.Data, data) == nil
}

// promSample is one series of an instant query's answer.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query runs an instant query and returns its series.
func (p *promServer) query(expr string) []promSample {
	var data struct {
		Result []promSample `json:"result"`
	}
	if !p.get("/api/v1/query", url.Values{"query": {expr}}, &data) {
		return nil
	}
	return data.Result
}

// value is a sample's value.
func (s promSample) value() float64 {
	str, _ := s.Value[1].(string)
	v, _ := strconv.ParseFloat(str, 64)
	return v
}

// promAlert is one alert of /api/v1/alerts.
type promAlert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
}

// alerts returns the alerts Prometheus has now.
func (p *promServer) alerts() []promAlert {
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	p.get("/api/v1/alerts", nil, &data)
	return data.Alerts
}

// waitProm polls every 100 ms until cond holds or d passes (fatal).
func (p *promServer) waitProm(d time.Duration, what string, cond func() bool) {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			p.t.Fatalf("%s did not happen within %v; prometheus said:\n%s", what, d, p.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A real Prometheus scraping a real flight recorder, with the shipped
// rules, fires ForensicCUDAMemoryFailure on the node's first failure,
// within two scrape intervals of it: the failure's series was there at 0
// before the failure. Every line the recorder logged is JSON, and the
// failure has its event line.
func TestAlertFiresOnFirstFailure(t *testing.T) {
	w := newWorld(t)
	events := filepath.Join(w.dir, "events.jsonl")
	// The workload fails once when the test says so, then waits to be
	// told to end; its own output goes to files.
	fr := w.startFlight(`while [ ! -e go ]; do sleep 0.1; done; "$S" 'init; use 0; alloc 100G' > fail.txt 2>&1; `+
		`while [ ! -e stop ]; do sleep 0.1; done`, "--log-format", "json", "--events", events)
	prom := startPrometheus(t, w.dir, fr.metrics)
	series := `forensic_failed_calls_total{job="forensic",class="allocation",symbol="cuMemAlloc_v2",gpu="0"}`

	// Scraped at least twice, at 0, before anything failed.
	prom.waitProm(60*time.Second, "two scrapes of the failure counter at 0", func() bool {
		r := prom.query("count_over_time(" + series + "[1m])")
		return len(r) == 1 && r[0].value() >= 2
	})
	if r := prom.query(series); len(r) != 1 || r[0].value() != 0 {
		t.Fatalf("before any failure %s = %+v, want one series at 0", series, r)
	}
	if a := prom.alerts(); len(a) != 0 {
		t.Fatalf("alerts before any failure: %+v", a)
	}

	if err := os.WriteFile(filepath.Join(fr.work, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var firing promAlert
	prom.waitProm(60*time.Second, "the alert firing", func() bool {
		for _, a := range prom.alerts() {
			if a.Labels["alertname"] == "ForensicCUDAMemoryFailure" && a.State == "firing" {
				firing = a
				return true
			}
		}
		return false
	})
	if firing.Labels["class"] != "allocation" || firing.Labels["instance"] != fr.metrics || firing.Labels["severity"] != "warning" {
		t.Errorf("alert labels %v, want class allocation on %s", firing.Labels, fr.metrics)
	}
	// When the failure happened, as the recorder saw it (wall clock).
	r := prom.query(`forensic_last_failure_timestamp_seconds{job="forensic"}`)
	if len(r) != 1 {
		t.Fatalf("forensic_last_failure_timestamp_seconds: %+v", r)
	}
	failedAt := time.Unix(0, int64(r[0].value()*1e9))
	if delay := firing.ActiveAt.Sub(failedAt); delay < 0 || delay > 2*scrapeInterval {
		t.Errorf("the alert became active %v after the failure (at %v), want within two scrape intervals (%v)",
			delay, failedAt, 2*scrapeInterval)
	} else {
		t.Logf("alert active %v after the failure", delay.Round(time.Millisecond))
	}

	os.WriteFile(filepath.Join(fr.work, "stop"), nil, 0o644)
	select {
	case <-fr.done:
	case <-time.After(30 * time.Second):
		fr.cmd.Process.Signal(os.Interrupt)
		t.Fatal("the recorder did not stop after its workload ended")
	}
	checkJSONLog(t, fr.log.String())
	lines := eventLines(t, events)
	if len(lines) != 1 || lines[0]["symbol"] != "cuMemAlloc_v2" || lines[0]["class"] != "allocation" ||
		lines[0]["result"] != "CUDA_ERROR_OUT_OF_MEMORY" || lines[0]["size_bytes"] != float64(100<<30) || lines[0]["gpu"] != 0.0 {
		t.Errorf("event lines %v, want the one failed allocation of 100 GiB on GPU 0", lines)
	}
}

// checkJSONLog checks that every line of a recorder's log is a JSON
// object with a time, a level and a message, and that "attached" is
// said at info level.
func checkJSONLog(t *testing.T, log string) {
	t.Helper()
	attached := false
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Errorf("not a JSON log line: %q", sc.Text())
			continue
		}
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(rec["time"])); err != nil || rec["level"] == nil || rec["msg"] == nil {
			t.Errorf("a log line without time, level or msg: %q", sc.Text())
		}
		if strings.HasPrefix(fmt.Sprint(rec["msg"]), "attached ") {
			attached = true
			if rec["level"] != "INFO" {
				t.Errorf("attached at %v, want INFO", rec["level"])
			}
		}
	}
	if !attached {
		t.Errorf("no \"attached\" line in the log:\n%s", log)
	}
}

// eventLines reads a --events file: one JSON object a line.
func eventLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if l == "" {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("not a JSON event line: %q", l)
		}
		out = append(out, ev)
	}
	return out
}
