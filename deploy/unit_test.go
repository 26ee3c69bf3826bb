package deploy

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const unitFile = "systemd/forensic-flight.service"

// unit is a systemd unit file: section -> key -> values (in order; a key
// may be given more than once).
type unit map[string]map[string][]string

func readUnit(t *testing.T) unit {
	t.Helper()
	f, err := os.Open(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u, section := unit{}, ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		case section != "" && strings.Contains(line, "="):
			k, v, _ := strings.Cut(line, "=")
			u[section][k] = append(u[section][k], v)
		default:
			t.Fatalf("%s:%d: %q is not a key=value line in a section", unitFile, n, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// get returns the last value of a key ("" when absent).
func (u unit) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

func TestSystemdUnit(t *testing.T) {
	u := readUnit(t)
	s := "Service"
	exec := strings.Fields(u.get(s, "ExecStart"))
	if len(exec) < 3 || exec[0] != "/usr/local/bin/forensic" || exec[1] != "record" || !slices.Contains(exec, "--all") ||
		!slices.Contains(exec, "--flight") {
		t.Fatalf("ExecStart %v: want forensic record --all --flight", exec)
	}
	checkFlags(t, unitFile, exec[2:])
	if out := flagValue(exec, "-o"); !strings.HasPrefix(out, stateDir+"/") {
		t.Errorf("-o %q outside the state directory", out)
	}
	for key, want := range map[string]string{
		"StateDirectory": "forensic", "StateDirectoryMode": "0700", "UMask": "0077", "Restart": "always",
		"User": "root", "ProtectSystem": "strict", "ReadWritePaths": stateDir, "NoNewPrivileges": "yes",
		"KillSignal": "SIGTERM", "LimitMEMLOCK": "infinity",
	} {
		if got := u.get(s, key); got != want {
			t.Errorf("%s=%q, want %q", key, got, want)
		}
	}
	for _, key := range []string{"CapabilityBoundingSet", "AmbientCapabilities"} {
		var caps []string
		for _, c := range strings.Fields(u.get(s, key)) {
			caps = append(caps, strings.TrimPrefix(c, "CAP_"))
		}
		if !equalSets(caps, capabilities) {
			t.Errorf("%s %v, want %v", key, caps, capabilities)
		}
	}
	// What recording cannot work under (see the unit's comments).
	for _, key := range []string{"PrivateDevices", "ProtectKernelLogs", "ProtectClock", "ProtectKernelTunables", "ProtectProc", "PrivateNetwork"} {
		if v := u.get(s, key); v != "" && v != "no" && v != "default" {
			t.Errorf("%s=%s breaks recording", key, v)
		}
	}
	if u.get("Install", "WantedBy") != "multi-user.target" {
		t.Errorf("WantedBy=%q", u.get("Install", "WantedBy"))
	}
}

// systemd-analyze verify checks every directive; it prints what it
// ignores and still exits 0, so any output fails the test. ExecStart must
// name an executable that exists: a copy of the unit runs the test binary.
func TestSystemdAnalyzeVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed; TestSystemdUnit checked the keys")
	}
	data, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copy := filepath.Join(t.TempDir(), filepath.Base(unitFile))
	data = bytes.ReplaceAll(data, []byte("/usr/local/bin/forensic"), []byte(self))
	if err := os.WriteFile(copy, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", copy).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// The image builds the CLI of this module with this module's Go, runs it
// from a small Debian, holds no GPU library, and serves the port the
// DaemonSet scrapes.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var froms, lines []string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		lines = append(lines, line)
		if strings.HasPrefix(line, "FROM ") {
			froms = append(froms, line)
		}
	}
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	if len(froms) != 2 || !strings.HasPrefix(froms[0], "FROM golang:"+string(goVersion[1])+"-") ||
		!strings.HasSuffix(froms[0], " AS build") || !regexp.MustCompile(`^FROM debian:\w+-slim$`).MatchString(froms[1]) {
		t.Errorf("stages %v: want golang:%s-* AS build, then debian:*-slim", froms, goVersion[1])
	}
	// Build and run stages on the same Debian release (the C library).
	if rel := strings.TrimPrefix(strings.Fields(froms[0])[1], "golang:"+string(goVersion[1])+"-"); !strings.Contains(froms[1], rel+"-slim") {
		t.Errorf("build on %s, run on %s", froms[0], froms[1])
	}
	text := strings.Join(lines, "\n")
	for _, want := range []string{"go build -trimpath -o /out/forensic ./cmd/forensic",
		"COPY --from=build /out/forensic /usr/local/bin/forensic",
		`ENTRYPOINT ["/usr/local/bin/forensic"]`,
		"EXPOSE " + strings.TrimPrefix(flagValue(readDaemonSet(t).Spec.Template.Spec.Containers[0].Args, "--metrics-addr"), ":")} {
		if !strings.Contains(text, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if regexp.MustCompile(`(?i)nvidia|libcuda|cuda-`).MatchString(text) {
		t.Error("the image installs GPU libraries; they come from the node")
	}
}
