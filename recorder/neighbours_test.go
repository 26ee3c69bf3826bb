package recorder

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/retrivium/forensic/store"
)

// neighbourProc writes a /proc/PID directory with the files a neighbour is
// named from.
func neighbourProc(t *testing.T, root string, pid, cmdline, status, cg string) {
	t.Helper()
	dir := filepath.Join(root, pid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"cmdline": cmdline, "status": status, "cgroup": cg, "comm": "python3\n",
		"stat": pid + " (python3) S 1 1 1 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0\n"}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNeighbourIsNamedByCommandLineUserAndContainer(t *testing.T) {
	root := t.TempDir()
	passwd := filepath.Join(root, "passwd")
	os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n"), 0o644)
	id := strings.Repeat("ab", 32)
	neighbourProc(t, root, "41", "python3\x00serve.py\x00--port\x00\x00", "Name:\tpython3\nUid:\t1000\t1000\t1000\t1000\n", "0::/system.slice/docker-"+id+".scope\n")
	neighbourProc(t, root, "42", "daemon\x00", "Name:\tdaemon\nUid:\t4242\t0\t0\t0\n", "0::/user.slice\n")
	neighbourProc(t, root, "43", "train\x00"+strings.Repeat("x", 2000)+"\x00", "Uid:\t0\t0\t0\t0\n", "0::/\n")
	uid := func(v uint32) *uint32 { return &v }
	for _, c := range []struct {
		name string
		pid  uint32
		want store.Neighbour
	}{
		{"a user's process in a container", 41, store.Neighbour{PID: 41, Time: 7, Comm: "python3",
			Args: []string{"python3", "serve.py", "--port", ""}, UID: uid(1000), User: "alice",
			Cgroup: "/system.slice/docker-" + id + ".scope", Container: id}},
		{"a uid passwd does not list", 42, store.Neighbour{PID: 42, Time: 7, Comm: "python3",
			Args: []string{"daemon"}, UID: uid(4242), Cgroup: "/user.slice"}},
		{"a long command line, clipped", 43, store.Neighbour{PID: 43, Time: 7, Comm: "python3",
			Args: []string{"train", strings.Repeat("x", store.MaxNeighbourArgs-len("train"))}, ArgsCut: true,
			UID: uid(0), User: "root", Cgroup: "/"}},
		{"a process gone before the recorder looked", 44, store.Neighbour{PID: 44, Time: 7}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := &neighbourNamer{proc: root, passwd: []string{filepath.Join(root, "no-such-passwd"), passwd}}
			got := n.name([]uint32{c.pid}, 7)[0]
			if c.pid == 44 {
				if got.Error == "" || got.UID != nil || got.Args != nil {
					t.Errorf("%+v: want an error and nothing else", got)
				}
				return
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestNeighbourIsNamedOncePerSegmentAndNeverWhenRecorded(t *testing.T) {
	q := newQueue()
	q.addProcesses([]store.Process{{PID: 10}})
	u := func(pids ...uint32) []store.Sample {
		s := store.Sample{}
		for _, p := range pids {
			s.Processes = append(s.Processes, store.ProcUsage{PID: p})
		}
		return []store.Sample{s}
	}
	steps := []struct {
		round []store.Sample
		want  []uint32
	}{
		{u(10, 20), []uint32{20}},
		{u(10, 20, 30), []uint32{30}},
		{u(20, 30), nil},
	}
	for i, s := range steps {
		if got := q.unnamed(s.round); !reflect.DeepEqual(got, s.want) {
			t.Errorf("round %d: named %v, want %v", i, got, s.want)
		}
	}
	// A new segment of a flight recording stands alone: a neighbour
	// still listed is named again in it.
	var b store.Batch
	q.seg.begin(&b)
	if got := q.unnamed(u(20)); !reflect.DeepEqual(got, []uint32{20}) {
		t.Errorf("after a new segment: named %v, want [20]", got)
	}
}

// BenchmarkNameNeighbour is what naming one neighbour costs the sampler:
// the recorder's own process read from the real /proc.
func BenchmarkNameNeighbour(b *testing.B) {
	n := &neighbourNamer{proc: "/proc", passwd: []string{"/proc/1/root/etc/passwd", "/etc/passwd"}}
	pid := []uint32{uint32(os.Getpid())}
	for b.Loop() {
		if ns := n.name(pid, 1); ns[0].UID == nil {
			b.Fatalf("not named: %+v", ns[0])
		}
	}
}
