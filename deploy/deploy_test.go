package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/retrivium/forensic/internal/e2eenv"
)

// capabilities are what recording needs, without the CAP_ prefix: the
// unit and the manifest must both grant exactly these.
var capabilities = []string{"BPF", "PERFMON", "SYS_ADMIN", "SYS_PTRACE", "KILL", "DAC_READ_SEARCH", "SYSLOG"}

// stateDir is where the deployments keep the recording.
const stateDir = "/var/lib/forensic"

func readDaemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	data, err := os.ReadFile("kubernetes/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ds := new(appsv1.DaemonSet)
	// Strict: a misspelt or misplaced field is an error, not ignored.
	if err := yaml.UnmarshalStrict(data, ds); err != nil {
		t.Fatalf("daemonset.yaml: %v", err)
	}
	if ds.Kind != "DaemonSet" || ds.APIVersion != "apps/v1" {
		t.Fatalf("daemonset.yaml is a %s %s", ds.APIVersion, ds.Kind)
	}
	return ds
}

// forensicBin is FORENSIC_BIN or a binary built from this module.
func forensicBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("FORENSIC_BIN")
	if bin == "" {
		_, err := exec.LookPath("go")
		e2eenv.Need(t, err == nil, "the go command, to build forensic and read its flags")
		bin = filepath.Join(t.TempDir(), "forensic")
		if out, err := exec.Command("go", "build", "-o", bin, "../cmd/forensic").CombinedOutput(); err != nil {
			t.Fatalf("build forensic: %v\n%s", err, out)
		}
	} else if !filepath.IsAbs(bin) {
		bin = filepath.Join("..", bin)
	}
	return bin
}

// recordHelp returns `forensic record --help`.
func recordHelp(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "record", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("forensic record --help: %v\n%s", err, out)
	}
	return string(out)
}

var helpFlag = regexp.MustCompile(`(?m)^\s+(?:-\w, )?(--[\w-]+)`)

// checkFlags checks that every flag args uses is one of `record --help`'s,
// and that record accepts their values (it parses every flag before it
// answers --help, and refuses a bad value as a usage error).
func checkFlags(t *testing.T, where string, args []string) {
	t.Helper()
	bin := forensicBin(t)
	help := recordHelp(t, bin)
	if out, err := exec.Command(bin, append(append([]string{"record"}, args...), "--help")...).CombinedOutput(); err != nil {
		t.Errorf("%s: forensic record refuses its flags: %v: %s", where, err, firstLine(string(out)))
	}
	have := map[string]bool{}
	for _, m := range helpFlag.FindAllStringSubmatch(help, -1) {
		have[m[1]] = true
	}
	if !have["--all"] || !have["--output"] {
		t.Fatalf("read no flags from record --help:\n%s", help)
	}
	shorts := map[string]string{"-o": "--output", "-a": "--all", "-f": "--force"}
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(a, "=")
		if long, ok := shorts[name]; ok {
			name = long
		}
		if !have[name] {
			t.Errorf("%s: record has no flag %s", where, name)
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// flagValue returns the value following flag in args.
func flagValue(args []string, flag string) string {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return ""
	}
	return args[i+1]
}

func TestDaemonSet(t *testing.T) {
	ds := readDaemonSet(t)
	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want the recorder alone", len(pod.Containers))
	}
	c := pod.Containers[0]
	if !pod.HostPID || !pod.HostNetwork || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("hostPID %v hostNetwork %v automount %v: want the node's processes and host name, no API token",
			pod.HostPID, pod.HostNetwork, pod.AutomountServiceAccountToken)
	}
	if pod.NodeSelector["nvidia.com/gpu.present"] != "true" {
		t.Errorf("node selector %v: want GPU nodes", pod.NodeSelector)
	}
	if !slices.ContainsFunc(pod.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Key == "nvidia.com/gpu" && tl.Operator == corev1.TolerationOpExists && tl.Effect == corev1.TaintEffectNoSchedule
	}) {
		t.Errorf("tolerations %v: want nvidia.com/gpu", pod.Tolerations)
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template", k, v)
		}
	}
	checkSecurity(t, c)
	checkMounts(t, pod, c)
	checkMetrics(t, ds, c)
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Error("a CPU limit: a throttled recorder loses calls")
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Error("no memory limit")
	}
	args := append(slices.Clone(c.Command[1:]), c.Args...)
	if args[0] != "record" || !slices.Contains(args, "--all") || !slices.Contains(args, "--flight") {
		t.Errorf("command %v: want record --all --flight", args)
	}
	checkFlags(t, "daemonset.yaml", args[1:])
}

func checkSecurity(t *testing.T, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Fatal("not privileged: the device cgroup denies /dev/nvidia* and /dev/kmsg otherwise")
	}
	var add []string
	for _, c := range sc.Capabilities.Add {
		add = append(add, string(c))
	}
	if !equalSets(add, capabilities) || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("capabilities add %v drop %v, want %v over none", add, sc.Capabilities.Drop, capabilities)
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeUnconfined ||
		sc.AppArmorProfile == nil || sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined {
		t.Error("seccomp and AppArmor must be unconfined (bpf(2), perf_event_open(2), tracing other containers)")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the root filesystem is writable; the recorder writes only its state directory")
	}
}

func checkMounts(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	hostPaths := map[string]string{} // volume name -> host path
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounts := map[string]corev1.VolumeMount{} // mount path -> mount
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	want := []struct {
		path, host string
		readOnly   bool
	}{
		{stateDir, stateDir, false},
		{"/sys/kernel/btf", "/sys/kernel/btf", true},
		{"/etc/machine-id", "/etc/machine-id", true},
		{"/driver/lib", "/usr/lib/x86_64-linux-gnu", true},
		{"/host/sys/fs/cgroup", "/sys/fs/cgroup", true},
	}
	for _, w := range want {
		m, ok := mounts[w.path]
		if !ok || hostPaths[m.Name] != w.host || m.ReadOnly != w.readOnly {
			t.Errorf("mount %s: %+v from %q, want the node's %s (read-only %v)", w.path, m, hostPaths[m.Name], w.host, w.readOnly)
		}
	}
	var nvml string
	for _, e := range c.Env {
		if e.Name == "NVML_LIBRARY" {
			nvml = e.Value
		}
	}
	args := c.Args
	if flagValue(args, "--libnvidia-ml") != "$(NVML_LIBRARY)" || filepath.Dir(nvml) != "/driver/lib" {
		t.Errorf("--libnvidia-ml %q, NVML_LIBRARY %q: want the library in the driver mount", flagValue(args, "--libnvidia-ml"), nvml)
	}
	if out := flagValue(args, "-o"); !strings.HasPrefix(out, stateDir+"/") {
		t.Errorf("-o %q is not in the state mount %s", out, stateDir)
	}
}

func checkMetrics(t *testing.T, ds *appsv1.DaemonSet, c corev1.Container) {
	t.Helper()
	addr := flagValue(c.Args, "--metrics-addr")
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || ":"+strconv.Itoa(int(c.Ports[0].ContainerPort)) != addr {
		t.Errorf("ports %+v, --metrics-addr %q: want one port named metrics, the one served", c.Ports, addr)
	}
	if ds.Spec.Template.Annotations["prometheus.io/port"] != strings.TrimPrefix(addr, ":") {
		t.Errorf("prometheus.io/port %q, want %s", ds.Spec.Template.Annotations["prometheus.io/port"], addr)
	}
	p := c.LivenessProbe
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "metrics" {
		t.Errorf("liveness probe %+v: want /healthz on the metrics port", p)
	}
}

func equalSets(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestNamespaceAllowsPrivileged(t *testing.T) {
	data, err := os.ReadFile("kubernetes/namespace.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ns corev1.Namespace
	if err := yaml.UnmarshalStrict(data, &ns); err != nil {
		t.Fatal(err)
	}
	if ns.Name != readDaemonSet(t).Namespace || ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace %s %v: want the DaemonSet's, admitting privileged pods", ns.Name, ns.Labels)
	}
}
