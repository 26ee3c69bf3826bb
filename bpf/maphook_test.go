package bpf

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/internal/e2eenv"
)

// mapperEnv makes the test binary, started as a child, a process that maps
// a file executable twice (as a loader maps a library's text) once its
// stdin says go, then exits.
const mapperEnv = "FX_TEST_MAP_FILE"

// contendedEnv makes the test binary, started as a child, a process that
// maps a file executable contendedMaps times while another of its threads
// keeps write-locking its address space.
const contendedEnv = "FX_TEST_MAP_CONTENDED"

const contendedMaps = 30

func TestMain(m *testing.M) {
	if path := os.Getenv(mapperEnv); path != "" {
		os.Exit(mapExec(path))
	}
	if path := os.Getenv(contendedEnv); path != "" {
		os.Exit(mapContended(path))
	}
	os.Exit(m.Run())
}

// mapContended maps path while threads change the protection of large
// populated regions over and over: each mprotect holds the address space's
// lock for writing, as attaching a uprobe to a file the process maps does.
func mapContended(path string) int {
	const threads, size = 4, 64 << 20
	for t := 0; t < threads; t++ {
		region, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			return 2
		}
		for i := 0; i < size; i += 4096 {
			region[i] = 1
		}
		go func() {
			runtime.LockOSThread()
			for i := 0; ; i++ {
				prot := syscall.PROT_READ
				if i%2 == 1 {
					prot |= syscall.PROT_WRITE
				}
				syscall.Mprotect(region, prot)
			}
		}()
	}
	var b [1]byte
	os.Stdin.Read(b[:])
	f, err := os.Open(path)
	if err != nil {
		return 2
	}
	defer f.Close()
	for i := 0; i < contendedMaps; i++ {
		mem, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_EXEC, syscall.MAP_PRIVATE)
		if err != nil {
			return 3
		}
		syscall.Munmap(mem)
	}
	return 0
}

func mapExec(path string) int {
	var b [1]byte
	os.Stdin.Read(b[:])
	f, err := os.Open(path)
	if err != nil {
		return 2
	}
	defer f.Close()
	for i := 0; i < 2; i++ {
		mem, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_EXEC, syscall.MAP_PRIVATE)
		if err != nil {
			return 3
		}
		syscall.Munmap(mem)
	}
	return 0
}

// startMapper starts a child that maps path when released; track decides
// whether it is a recorded process.
func startMapper(t *testing.T, o *Objects, path string, track bool) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), mapperEnv+"="+path)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if track {
		if err := o.Track(uint32(cmd.Process.Pid)); err != nil {
			t.Fatal(err)
		}
	}
	in.Write([]byte{1})
	in.Close()
	return cmd
}

// loadMapHook loads the probes with the map hook attached (and the
// lifecycle tracepoints, for exec and exit, when lifecycle is set) and
// opens the holds ring, all closed when the test ends.
func loadMapHook(t *testing.T, lifecycle bool) (*Objects, *ringbuf.Reader) {
	t.Helper()
	e2eenv.NeedRoot(t)
	o, err := Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	if lifecycle {
		links, err := o.AttachLifecycle()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { CloseLinks(links) })
	}
	hook, err := o.AttachMapHook()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hook.Close() })
	rd, err := o.NewHoldReader()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	return o, rd
}

func readHold(t *testing.T, rd *ringbuf.Reader, wait time.Duration) (Hold, bool) {
	t.Helper()
	rd.SetDeadline(time.Now().Add(wait))
	rec, err := rd.Read()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return Hold{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var h Hold
	if err := DecodeHold(rec.RawSample, &h); err != nil {
		t.Fatal(err)
	}
	return h, true
}

func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2]
	}
	return 0
}

// The map hook, in this kernel: a recorded process that maps a libcuda
// file executable is stopped and reported once; once the file is marked
// attached, nobody is held; other processes and other files never are.
func TestMapHookHolds(t *testing.T) {
	o, rd := loadMapHook(t, false)

	dir := t.TempDir()
	lib := filepath.Join(dir, "libcuda.so.1")
	other := filepath.Join(dir, "libcudart.so.12")
	for _, p := range []string{lib, other} {
		if err := os.WriteFile(p, make([]byte, 8192), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name  string
		path  string
		track bool
	}{{"untracked process", lib, false}, {"another file", other, true}} {
		cmd := startMapper(t, o, c.path, c.track)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%s: mapper: %v", c.name, err)
		}
		if h, ok := readHold(t, rd, 100*time.Millisecond); ok {
			t.Fatalf("%s: held: %+v", c.name, h)
		}
	}

	cmd := startMapper(t, o, lib, true)
	h, ok := readHold(t, rd, 5*time.Second)
	if !ok {
		t.Fatal("a recorded process mapping libcuda.so.1 was not held")
	}
	var st syscall.Stat_t
	syscall.Stat(lib, &st)
	dev := unix.Major(st.Dev)<<20 | unix.Minor(st.Dev) // the kernel's dev_t
	if h.Pid != uint32(cmd.Process.Pid) || h.Flags&HoldStopped == 0 || CString(h.Name[:]) != "libcuda.so.1" ||
		h.Ino != st.Ino || h.Dev != dev || h.Addr == 0 {
		t.Errorf("hold %+v; want pid %d, stopped, libcuda.so.1, dev %#x inode %d", h, cmd.Process.Pid, dev, st.Ino)
	}
	stopped := false
	for i := 0; i < 200 && !stopped; i++ {
		stopped = procState(cmd.Process.Pid) == 'T'
		time.Sleep(5 * time.Millisecond)
	}
	if !stopped {
		t.Errorf("held process is in state %c, want T (stopped)", procState(cmd.Process.Pid))
	}
	if err := o.MarkAttached(h.Dev, h.Ino); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("continued mapper: %v", err)
	}
	if h, ok := readHold(t, rd, 100*time.Millisecond); ok {
		t.Errorf("held again after the file was marked attached: %+v", h)
	}
}

// A recorded process whose address space is locked by another of its
// threads when it maps libcuda is held all the same: every mapping is
// reported and the process stopped, inspected (the file named) or, when
// the hook could not look, marked uninspected with no file.
func TestMapHookHoldsWhileAddressSpaceLocked(t *testing.T) {
	o, rd := loadMapHook(t, false)
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	if err := os.WriteFile(lib, make([]byte, 8192), 0o755); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	syscall.Stat(lib, &st)
	dev := unix.Major(st.Dev)<<20 | unix.Minor(st.Dev)

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), contendedEnv+"="+lib)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if err := o.Track(uint32(cmd.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	in.Write([]byte{1})
	in.Close()
	uninspected := 0
	for i := 0; i < contendedMaps; i++ {
		h, ok := readHold(t, rd, 10*time.Second)
		if !ok {
			t.Fatalf("mapping %d of %d was not held (%d uninspected before)", i+1, contendedMaps, uninspected)
		}
		if h.Pid != uint32(cmd.Process.Pid) || h.Flags&HoldStopped == 0 {
			t.Fatalf("hold %+v; want pid %d, stopped", h, cmd.Process.Pid)
		}
		switch {
		case h.Flags&HoldUninspected != 0:
			uninspected++
			if h.Dev != 0 || h.Ino != 0 {
				t.Errorf("uninspected hold names a file: %+v", h)
			}
		case h.Dev != dev || h.Ino != st.Ino:
			t.Errorf("hold %+v; want dev %#x inode %d", h, dev, st.Ino)
		}
		syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("mapper: %v", err)
	}
	stats, err := o.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats.UninspectedMaps != uint64(uninspected) {
		t.Errorf("counter says %d uninspected mappings, the holds %d", stats.UninspectedMaps, uninspected)
	}
	t.Logf("%d of %d mappings held uninspected", uninspected, contendedMaps)
}

// A recorded process that executes a program and maps a libcuda file
// whose probes are in, before user space has read that exec, is held
// (marked unread) until user space marks that very exec read; after that,
// and after its exit, nothing of it is left to hold it.
func TestMapHookHoldsUntilTheExecIsRead(t *testing.T) {
	o, rd := loadMapHook(t, true)
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	if err := os.WriteFile(lib, make([]byte, 8192), 0o755); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(lib, &st); err != nil {
		t.Fatal(err)
	}
	if err := o.MarkAttached(unix.Major(st.Dev)<<20|unix.Minor(st.Dev), st.Ino); err != nil {
		t.Fatal(err)
	}

	// A shell, tracked, that executes the mapper once its stdin says so.
	cmd := exec.Command("/bin/sh", "-c", `read go; exec "$0"`, os.Args[0])
	cmd.Env = append(os.Environ(), mapperEnv+"="+lib)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := uint32(cmd.Process.Pid)
	if err := o.Track(pid); err != nil {
		t.Fatal(err)
	}
	if _, ok := o.UnreadExec(pid); ok {
		t.Fatal("an exec before the process was tracked is marked unread")
	}
	in.Write([]byte("go\n1"))
	in.Close()
	h, ok := readHold(t, rd, 5*time.Second)
	if !ok {
		t.Fatal("a process mapping an attached libcuda before its exec was read was not held")
	}
	if h.Pid != pid || h.Flags&HoldStopped == 0 || h.Flags&HoldUnread == 0 {
		t.Fatalf("hold %+v; want pid %d, stopped, unread", h, pid)
	}
	ts, ok := o.UnreadExec(pid)
	if !ok || ts == 0 || ts > h.Ts {
		t.Fatalf("unread exec at %d (%v); want one before the hold at %d", ts, ok, h.Ts)
	}
	o.MarkExecRead(pid, ts+1) // another exec's record
	if _, ok := o.UnreadExec(pid); !ok {
		t.Fatal("marking another exec read cleared this one")
	}
	o.MarkExecRead(pid, ts)
	if _, ok := o.UnreadExec(pid); ok {
		t.Fatal("the exec is still unread after it was marked read")
	}
	syscall.Kill(int(pid), syscall.SIGCONT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("continued mapper: %v", err)
	}
	if h, ok := readHold(t, rd, 100*time.Millisecond); ok {
		t.Errorf("held again after its exec was read: %+v", h)
	}

	// A process that executes a program and exits leaves no mark.
	sh := exec.Command("/bin/sh", "-c", `read go; exec true`)
	sin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	spid := uint32(sh.Process.Pid)
	if err := o.Track(spid); err != nil {
		t.Fatal(err)
	}
	sin.Write([]byte("go\n"))
	sin.Close()
	if err := sh.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, ok := o.UnreadExec(spid); ok {
		t.Error("an exited process's exec is still marked unread")
	}
}
