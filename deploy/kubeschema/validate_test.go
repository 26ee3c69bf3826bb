package kubeschema

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/retrivium/forensic/internal/e2eenv"
)

// validators returns a validator per supported release, downloading the
// schemas through GOPROXY on the first run.
func validators(t *testing.T) []*Validator {
	t.Helper()
	_, err := exec.LookPath("go")
	e2eenv.Need(t, err == nil, "the go command, to download the Kubernetes schemas")
	vs, err := FetchSupported(t.Context(), "go")
	if errors.Is(err, ErrModuleHash) {
		t.Fatal(err)
	}
	e2eenv.Need(t, err == nil, "the Kubernetes schemas through GOPROXY: "+firstLine(err))
	return vs
}

func firstLine(err error) string {
	if err == nil {
		return ""
	}
	line, _, _ := strings.Cut(err.Error(), "\n")
	return line
}

// daemonSet is a minimal valid DaemonSet with YAML lines added to its pod
// spec (indented 6 spaces), its container (8) and the container's
// securityContext (12).
func daemonSet(pod, container, securityContext string) string {
	return `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: probe
spec:
  selector:
    matchLabels: {app: probe}
  template:
    metadata:
      labels: {app: probe}
    spec:
      hostPID: true
` + pod + `      containers:
        - name: probe
          image: registry.example/probe:1.0.0
          resources:
            limits: {memory: 1Gi, cpu: 0.5}
          ports: [{containerPort: 9401}]
          livenessProbe: {httpGet: {path: /healthz, port: 9401}}
` + container + `          securityContext:
            privileged: true
` + securityContext
}

// less reports whether release a is older than b ("1.29" < "1.30").
func less(a, b string) bool {
	return strings.Compare(a, b) < 0 // both are "1.NN"
}

// A field is refused by every release older than the one that added it,
// with the error naming the field and the release, and accepted from
// that release on.
func TestRefusesFieldsNewerThanTheRelease(t *testing.T) {
	vs := validators(t)
	cases := []struct {
		name, pod, container, sc string
		path, since              string
	}{
		{name: "apparmor field", sc: "            appArmorProfile: {type: Unconfined}\n",
			path: "spec.template.spec.containers[0].securityContext.appArmorProfile", since: "1.30"},
		{name: "supplemental groups policy", pod: "      securityContext: {supplementalGroupsPolicy: Strict}\n",
			path: "spec.template.spec.securityContext.supplementalGroupsPolicy", since: "1.31"},
		{name: "pod-level resources", pod: "      resources: {limits: {memory: 2Gi}}\n",
			path: "spec.template.spec.resources", since: "1.32"},
		{name: "stop signal", container: "          lifecycle: {stopSignal: SIGUSR1}\n",
			path: "spec.template.spec.containers[0].lifecycle.stopSignal", since: "1.33"},
		{name: "field of no release", sc: "            hostnameOverride: x\n",
			path: "spec.template.spec.containers[0].securityContext.hostnameOverride", since: "9.99"},
	}
	for _, tc := range cases {
		manifest := daemonSet(tc.pod, tc.container, tc.sc)
		for _, v := range vs {
			t.Run(tc.name+"/"+v.Release().Minor, func(t *testing.T) {
				err := v.ValidateYAML([]byte(manifest))
				if !less(v.Release().Minor, tc.since) {
					if err != nil {
						t.Fatalf("refused from %s on: %v", tc.since, err)
					}
					return
				}
				want := Violation{Path: tc.path, Problem: "unknown field"}
				var e *Error
				if !errors.As(err, &e) || !slices.Equal(e.Violations, []Violation{want}) {
					t.Fatalf("got %v, want exactly %s", err, want)
				}
				if msg := err.Error(); !strings.Contains(msg, "Kubernetes "+v.Release().Minor+" (") ||
					!strings.Contains(msg, tc.path+": unknown field") {
					t.Errorf("error %q does not name the release and the field", msg)
				}
			})
		}
	}
}

// What no release accepts: misspelt fields, wrong types, a missing
// required field, an unknown kind.
func TestRefusesWhatNoReleaseAccepts(t *testing.T) {
	vs := validators(t)
	cases := []struct {
		name, manifest, want string
	}{
		{"misspelt field", daemonSet("", "", "            privilegd: true\n"),
			"spec.template.spec.containers[0].securityContext.privilegd: unknown field"},
		{"field one level too high", daemonSet("", "", "  hostNetwork: true\n"),
			"spec.hostNetwork: unknown field"},
		{"string for a boolean", daemonSet(`      hostNetwork: "yes"`+"\n", "", ""),
			"spec.template.spec.hostNetwork: got string, want boolean"},
		{"container without a name", strings.Replace(daemonSet("", "", ""), "- name: probe\n          image", "- image", 1),
			"spec.template.spec.containers[0]: missing property 'name'"},
		{"memory limit as a list", strings.Replace(daemonSet("", "", ""), "memory: 1Gi", "memory: [1Gi]", 1),
			"spec.template.spec.containers[0].resources.limits.memory: got array, want string"},
		{"second document of a stream", daemonSet("", "", "") + "---\n" + daemonSet("", "", "            privilegd: true\n"),
			"spec.template.spec.containers[0].securityContext.privilegd: unknown field"},
		{"comments only", "# nothing\n---\n", "no object in the manifest"},
		{"kind of another group", strings.Replace(daemonSet("", "", ""), "kind: DaemonSet", "kind: Pod", 1),
			"has no kind Pod in apps/v1"},
	}
	for _, tc := range cases {
		for _, v := range vs {
			t.Run(tc.name+"/"+v.Release().Minor, func(t *testing.T) {
				err := v.ValidateYAML([]byte(tc.manifest))
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want %q", err, tc.want)
				}
			})
		}
	}
}

// The minimal DaemonSet the refusals are made from is itself valid
// everywhere, so each refusal is the spliced field's.
func TestAcceptsAValidDaemonSet(t *testing.T) {
	for _, v := range validators(t) {
		if err := v.ValidateYAML([]byte(daemonSet("", "", ""))); err != nil {
			t.Errorf("%v", err)
		}
	}
}

// A module whose content is not the pinned one is refused.
func TestFetchRefusesAnotherModuleHash(t *testing.T) {
	validators(t) // the module is in the cache
	r := Supported()[0]
	r.Sum = "h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
	if _, err := Fetch(t.Context(), "go", r); !errors.Is(err, ErrModuleHash) {
		t.Fatalf("got %v, want %v", err, ErrModuleHash)
	}
}
