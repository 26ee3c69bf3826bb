package recorder

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Capability is one capability recording uses, and what for.
type Capability struct {
	// Name is the capability's name (CAP_KILL); Bit its number.
	Name string
	Bit  uint
	// Or is a capability that serves instead (CAP_SYS_ADMIN covers
	// CAP_BPF and CAP_PERFMON on kernels before 5.8), 0 when none.
	Or uint
	// Needed: recording cannot go on without it; else it only loses
	// something, which Why says. OthersNeed: needed when recording other
	// users' processes (--all, --pid), not a workload of one's own.
	Needed     bool
	OthersNeed bool
	Why        string
}

// Capabilities are those recording uses, in the order the checks report
// them.
var Capabilities = []Capability{
	{Name: "CAP_BPF", Bit: unix.CAP_BPF, Or: unix.CAP_SYS_ADMIN, Needed: true,
		Why: "load the probes and their maps"},
	{Name: "CAP_PERFMON", Bit: unix.CAP_PERFMON, Or: unix.CAP_SYS_ADMIN, Needed: true,
		Why: "attach the probes to libcuda (uprobes) and to the scheduler's tracepoints"},
	{Name: "CAP_KILL", Bit: unix.CAP_KILL, OthersNeed: true,
		Why: "continue (SIGCONT) a process held at its first mapping of a new libcuda, or frozen by --freeze-on-failure, whoever owns it: without it a held process would stay stopped"},
	{Name: "CAP_SYS_ADMIN", Bit: unix.CAP_SYS_ADMIN,
		Why: "multi-uprobe links and task storage on this kernel's BPF, /proc/PID/map_files: without it attaching may fail and some libraries are not found"},
	{Name: "CAP_SYS_PTRACE", Bit: unix.CAP_SYS_PTRACE,
		Why: "read /proc/PID/root, maps and environ of other users' processes: without it their libraries, stacks and pods are missing"},
	{Name: "CAP_DAC_READ_SEARCH", Bit: unix.CAP_DAC_READ_SEARCH,
		Why: "open libraries in directories root may not search (a 0700 home, another mount namespace)"},
	{Name: "CAP_SYSLOG", Bit: unix.CAP_SYSLOG,
		Why: "read /dev/kmsg (NVRM and Xid lines) under kernel.dmesg_restrict=1"},
}

// ErrCapabilities: a capability recording cannot do without is missing.
var ErrCapabilities = errors.New("recording needs more privileges")

// CheckCapabilities checks the effective capabilities against those
// recording uses (has reads one; nil: this process's); others says that
// other users' processes are recorded (--all, --pid). Each missing
// capability recording cannot do without is one line of the error; each
// other one missing is one line of warnings, to say at the start.
func CheckCapabilities(has func(bit uint) bool, others bool) (warnings []string, err error) {
	if has == nil {
		var ok bool
		if has, ok = effectiveCaps(); !ok {
			return nil, fmt.Errorf("%w: the process's capabilities cannot be read", ErrCapabilities)
		}
	}
	var missing []string
	for _, c := range Capabilities {
		if has(c.Bit) || (c.Or != 0 && has(c.Or)) {
			continue
		}
		line := fmt.Sprintf("no %s: needed to %s", c.Name, c.Why)
		if c.Needed || (c.OthersNeed && others) {
			missing = append(missing, line)
		} else {
			warnings = append(warnings, fmt.Sprintf("no %s (%s)", c.Name, c.Why))
		}
	}
	if len(missing) > 0 {
		return warnings, fmt.Errorf("%w (run it as root, with sudo):\n  %s", ErrCapabilities, strings.Join(missing, "\n  "))
	}
	return warnings, nil
}

// effectiveCaps reads this process's effective capability set.
func effectiveCaps() (func(uint) bool, bool) {
	var hdr unix.CapUserHeader
	var data [2]unix.CapUserData
	hdr.Version = unix.LINUX_CAPABILITY_VERSION_3
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil, false
	}
	return func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }, true
}
