package deploy

import (
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/retrivium/forensic/internal/e2eenv"
)

const (
	rulesFile      = "prometheus/forensic-rules.yml"
	rulesTestFile  = "prometheus/forensic-rules.test.yml"
	prometheusRule = "kubernetes/prometheusrule.yaml"
	podMonitor     = "kubernetes/podmonitor.yaml"
)

// readYAML reads a YAML file into generic values.
func readYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// The shipped rules are valid, and their unit tests pass: the failure
// alerts fire on a node's first failure, whether its series was there at 0
// or starts with the failure (promtool, from Debian's prometheus package).
func TestRulesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	e2eenv.Need(t, err == nil, "promtool not found (scripts/deps.sh test installs Debian's prometheus)")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// The PrometheusRule holds exactly the plain rules file's groups.
func TestPrometheusRuleHoldsTheRules(t *testing.T) {
	plain, pr := readYAML(t, rulesFile), readYAML(t, prometheusRule)
	if pr["apiVersion"] != "monitoring.coreos.com/v1" || pr["kind"] != "PrometheusRule" {
		t.Fatalf("%s is a %v %v", prometheusRule, pr["apiVersion"], pr["kind"])
	}
	spec, _ := pr["spec"].(map[string]any)
	if !reflect.DeepEqual(spec["groups"], plain["groups"]) {
		t.Errorf("%s's groups differ from %s's", prometheusRule, rulesFile)
	}
}

// The PodMonitor selects the DaemonSet's pods and scrapes the port the
// recorder serves its metrics on.
func TestPodMonitorScrapesTheRecorder(t *testing.T) {
	pm := readYAML(t, podMonitor)
	if pm["apiVersion"] != "monitoring.coreos.com/v1" || pm["kind"] != "PodMonitor" {
		t.Fatalf("%s is a %v %v", podMonitor, pm["apiVersion"], pm["kind"])
	}
	ds := readDaemonSet(t)
	meta, _ := pm["metadata"].(map[string]any)
	if meta["namespace"] != ds.Namespace {
		t.Errorf("PodMonitor in %v, the DaemonSet in %s", meta["namespace"], ds.Namespace)
	}
	spec, _ := pm["spec"].(map[string]any)
	sel, _ := spec["selector"].(map[string]any)
	match, _ := sel["matchLabels"].(map[string]any)
	if len(match) == 0 {
		t.Fatal("PodMonitor selects no labels")
	}
	for k, v := range match {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("PodMonitor selects %s=%v; the pods have %q", k, v, ds.Spec.Template.Labels[k])
		}
	}
	eps, _ := spec["podMetricsEndpoints"].([]any)
	if len(eps) != 1 {
		t.Fatalf("%d endpoints, want 1", len(eps))
	}
	port, _ := eps[0].(map[string]any)["port"].(string)
	var ports []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			ports = append(ports, p.Name)
		}
	}
	if !slices.Contains(ports, port) {
		t.Errorf("PodMonitor scrapes port %q; the pods name %v", port, ports)
	}
}

// Every metric the rules use is one the recorder serves, as
// docs/flight.md lists them.
func TestRulesUseDocumentedMetrics(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/flight.md")
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`forensic_[a-z0-9_]+`).FindAllString(string(rules), -1)
	if len(used) == 0 {
		t.Fatal("the rules use no forensic metric")
	}
	for _, name := range used {
		if !strings.Contains(string(doc), "| `"+name+"` |") {
			t.Errorf("%s: not in docs/flight.md's table of metrics", name)
		}
	}
}

// Every alert's runbook annotation points at a section of
// docs/flight.md that says what to do.
func TestRunbooksExist(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/flight.md")
	if err != nil {
		t.Fatal(err)
	}
	alerts := regexp.MustCompile(`(?m)^\s+- alert: (\w+)$`).FindAllStringSubmatch(string(rules), -1)
	books := regexp.MustCompile(`runbook: "docs/flight\.md#(\w+)"`).FindAllStringSubmatch(string(rules), -1)
	if len(alerts) == 0 || len(books) != len(alerts) {
		t.Fatalf("%d alerts, %d runbooks: every alert needs one", len(alerts), len(books))
	}
	for i, a := range alerts {
		if anchor := strings.ToLower(a[1]); books[i][1] != anchor {
			t.Errorf("%s: runbook #%s, want #%s", a[1], books[i][1], anchor)
		}
		if !strings.Contains(string(doc), "\n### "+a[1]+"\n") {
			t.Errorf("%s: no section \"### %s\" in docs/flight.md", a[1], a[1])
		}
	}
}
