package deploy

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/retrivium/forensic/deploy/kubeschema"
	"github.com/retrivium/forensic/internal/e2eenv"
)

// validators returns a schema validator per supported Kubernetes
// release; the schemas come through GOPROXY on the first run.
func validators(t *testing.T) []*kubeschema.Validator {
	t.Helper()
	_, err := exec.LookPath("go")
	e2eenv.Need(t, err == nil, "the go command, to download the Kubernetes schemas")
	vs, err := kubeschema.FetchSupported(t.Context(), "go")
	if errors.Is(err, kubeschema.ErrModuleHash) {
		t.Fatal(err)
	}
	e2eenv.Need(t, err == nil, fmt.Sprintf("the Kubernetes schemas through GOPROXY: %v", err))
	return vs
}

// on129 is daemonset.yaml edited as its header says to for Kubernetes
// 1.29: the two appArmorProfile lines deleted.
func on129(t *testing.T, manifest []byte) []byte {
	t.Helper()
	lines := strings.SplitAfter(string(manifest), "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(l) == "appArmorProfile:" })
	if i < 0 || !strings.Contains(lines[i+1], "type: Unconfined") {
		t.Fatal("daemonset.yaml has no two appArmorProfile lines to delete for 1.29")
	}
	return []byte(strings.Join(slices.Delete(lines, i, i+2), ""))
}

// The DaemonSet and its namespace are valid objects for every supported
// release, checked against the release's own OpenAPI schema with strict
// field validation: as shipped from 1.30 on; on 1.29, 1.29 refuses the
// one field its header says to delete there, and nothing else, and the
// edit it describes is accepted.
func TestManifestsValidForSupportedReleases(t *testing.T) {
	daemonSet, err := os.ReadFile("kubernetes/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	namespace, err := os.ReadFile("kubernetes/namespace.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range validators(t) {
		t.Run(v.Release().Minor, func(t *testing.T) {
			if err := v.ValidateYAML(namespace); err != nil {
				t.Errorf("namespace.yaml: %v", err)
			}
			err := v.ValidateYAML(daemonSet)
			if v.Release().Minor != "1.29" {
				if err != nil {
					t.Errorf("daemonset.yaml: %v", err)
				}
				return
			}
			want := []kubeschema.Violation{{Path: "spec.template.spec.containers[0].securityContext.appArmorProfile", Problem: "unknown field"}}
			var e *kubeschema.Error
			if !errors.As(err, &e) || !slices.Equal(e.Violations, want) {
				t.Errorf("daemonset.yaml on 1.29: %v, want only %v refused (the header says to delete it there)", err, want)
			}
			if err := v.ValidateYAML(on129(t, daemonSet)); err != nil {
				t.Errorf("daemonset.yaml edited for 1.29: %v", err)
			}
		})
	}
}

// Without the appArmorProfile field (1.29), AppArmor is unconfined by the
// pod template's annotation, which 1.30 and later accept too.
func TestDaemonSetUnconfinedOn129(t *testing.T) {
	ds := readDaemonSet(t)
	ann := ds.Spec.Template.Annotations["container.apparmor.security.beta.kubernetes.io/"+ds.Spec.Template.Spec.Containers[0].Name]
	if ann != "unconfined" {
		t.Errorf("AppArmor annotation %q, want unconfined for 1.29", ann)
	}
}

// The image is pinned to the version the manifest names, the recorder is
// scheduled before workloads and not evicted for them.
func TestDaemonSetPinnedAndCritical(t *testing.T) {
	ds := readDaemonSet(t)
	version := ds.Labels["app.kubernetes.io/version"]
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(version) {
		t.Fatalf("app.kubernetes.io/version %q, want a release version", version)
	}
	image := ds.Spec.Template.Spec.Containers[0].Image
	if _, tag, _ := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":"); tag != version {
		t.Errorf("image %s, want the tag %s (never latest)", image, version)
	}
	if pc := ds.Spec.Template.Spec.PriorityClassName; pc != "system-node-critical" {
		t.Errorf("priorityClassName %q, want system-node-critical", pc)
	}
}

// docs/flight.md's table of validated releases names each release the
// tests validate against, with the module version of its schema.
func TestFlightDocListsValidatedReleases(t *testing.T) {
	doc, err := os.ReadFile("../docs/flight.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range kubeschema.Supported() {
		row := regexp.MustCompile(`(?m)^\|\s*` + regexp.QuoteMeta(r.Minor) + `\s*\|\s*` + regexp.QuoteMeta(r.Module) + `\s*\|`)
		if !row.Match(doc) {
			t.Errorf("docs/flight.md has no row for %s", r)
		}
	}
}
