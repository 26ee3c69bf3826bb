package deploy

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// newerThan129 are pod template fields Kubernetes 1.29 does not know
// (strict field validation refuses them), with the release that added
// them. The k8s.io/api types the manifest is decoded into are newer than
// 1.29, so they accept these; this list is what keeps the manifest
// within 1.29 to 1.33.
var newerThan129 = map[string]string{
	"appArmorProfile":          "1.30",
	"recursiveReadOnly":        "1.30",
	"supplementalGroupsPolicy": "1.31",
	"image":                    "1.31 (as a volume source)",
	"resources":                "1.32 (at the pod level)",
	"stopSignal":               "1.33",
	"hostnameOverride":         "1.34",
}

// fieldPaths lists the JSON paths of every key in v.
func fieldPaths(prefix string, v any, out *[]string) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			*out = append(*out, prefix+"."+k)
			fieldPaths(prefix+"."+k, e, out)
		}
	case []any:
		for _, e := range t {
			fieldPaths(prefix+"[]", e, out)
		}
	}
}

// The DaemonSet uses no pod template field newer than 1.29 but
// appArmorProfile, which 1.29 gets from the annotation instead (the
// manifest says to delete the field there); everything else reads the
// same from 1.29 to 1.33.
func TestDaemonSetWithin129To133(t *testing.T) {
	ds := readDaemonSet(t)
	data, err := json.Marshal(ds.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	var tree any
	json.Unmarshal(data, &tree)
	var paths []string
	fieldPaths("template", tree, &paths)
	sawAppArmor := false
	for _, p := range paths {
		last := p[strings.LastIndex(p, ".")+1:]
		since, newer := newerThan129[last]
		switch {
		case !newer:
		case last == "resources" && strings.Contains(p, "containers[]"):
		case last == "image" && !strings.Contains(p, "volumes[]"):
		case last == "appArmorProfile" && strings.HasSuffix(p, "containers[].securityContext.appArmorProfile"):
			sawAppArmor = true
		default:
			t.Errorf("%s needs Kubernetes %s", p, since)
		}
	}
	ann := ds.Spec.Template.Annotations["container.apparmor.security.beta.kubernetes.io/"+ds.Spec.Template.Spec.Containers[0].Name]
	if sawAppArmor && ann != "unconfined" {
		t.Errorf("appArmorProfile without the annotation 1.29 reads (%q)", ann)
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
