package recorder

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/jobenv"
	"github.com/retrivium/forensic/store"
)

// pairReads is how many (monotonic, realtime, monotonic) brackets are read
// to pair the run clock with the wall clock; the narrowest is kept.
const pairReads = 16

// toolTimeout bounds each time daemon query (chronyc, pmc): a daemon that
// does not answer must not delay the recording.
const toolTimeout = 500 * time.Millisecond

// errToolAbsent: the time daemon's tool is not installed.
var errToolAbsent = errors.New("not installed")

// identitySources are where a run's identity is read from. hostSources
// reads the machine; tests substitute files, clocks and tools.
type identitySources struct {
	// root prefixes /etc/machine-id, /proc/... and the pod's files.
	root     string
	hostname func() (string, error)
	kernel   func() string
	// clock reads a clock (unix.CLOCK_MONOTONIC, unix.CLOCK_REALTIME) in ns.
	clock    func(id int32) int64
	adjtimex func(*unix.Timex) (int, error)
	// tool runs a time daemon's command and returns its output, or
	// errToolAbsent when it is not installed.
	tool func(ctx context.Context, name string, args ...string) (string, error)
}

func hostSources() identitySources {
	return identitySources{
		root:     "/",
		hostname: os.Hostname,
		kernel: func() string {
			var uts unix.Utsname
			unix.Uname(&uts)
			return unix.ByteSliceToString(uts.Release[:])
		},
		clock: func(id int32) int64 {
			var ts unix.Timespec
			unix.ClockGettime(id, &ts)
			return ts.Nano()
		},
		adjtimex: unix.Adjtimex,
		tool:     runTool,
	}
}

func runTool(ctx context.Context, name string, args ...string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", errToolAbsent
	}
	ctx, cancel := context.WithTimeout(ctx, toolTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, args...).Output()
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("no answer within %v", toolTimeout)
	}
	return string(out), err
}

// startIdentity reads the run's identity when recording starts: the job is
// the spawned command's (the recorder's own environment and cgroup, which
// it inherits), the --pid target's, or none for --all.
func startIdentity(ctx context.Context, cfg Config) *store.Identity {
	src := hostSources()
	return readIdentity(ctx, src, jobOfTarget(src, cfg))
}

// stopIdentity reads the identity again at the stop. The job is read again
// from the target (kept from the start if it is gone); in --all mode it is
// what the recorded processes agree on. The stop reading's clock bound is
// the run's: it combines both readings.
func stopIdentity(ctx context.Context, cfg Config, start *store.Identity, procs []store.Process) *store.Identity {
	src := hostSources()
	var job *store.Job
	if cfg.All {
		job = jobOfProcesses(procs)
	} else if job = jobOfTarget(src, cfg); job == nil && start != nil {
		job = start.Job
	}
	id := readIdentity(ctx, src, job)
	if start != nil {
		id.Clock.ErrorNS, id.Clock.ErrorWhy = runClockError(start.Clock, id.Clock)
	}
	return id
}

func readIdentity(ctx context.Context, src identitySources, job *store.Job) *store.Identity {
	host, _ := src.hostname()
	return &store.Identity{
		Hostname:  host,
		MachineID: readTrimmed(filepath.Join(src.root, "etc/machine-id")),
		BootID:    readTrimmed(filepath.Join(src.root, "proc/sys/kernel/random/boot_id")),
		Kernel:    src.kernel(),
		Job:       job,
		Clock:     readClock(ctx, src),
	}
}

func readTrimmed(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// readClock pairs the clocks, asks the kernel for its error bound and the
// time daemons for their state, and derives this reading's bound.
func readClock(ctx context.Context, src identitySources) *store.ClockReading {
	c := &store.ClockReading{Reads: pairReads}
	c.MonotonicNS, c.RealtimeNS, c.PairUncertaintyNS = pairClocks(src.clock, pairReads)
	var tx unix.Timex
	if state, err := src.adjtimex(&tx); err != nil {
		c.AdjtimexError = err.Error()
	} else {
		c.Adjtimex = adjtimexOf(state, &tx)
	}
	if out, err := src.tool(ctx, "chronyc", "-c", "tracking"); !errors.Is(err, errToolAbsent) {
		c.Chrony = parseChrony(out, err)
	}
	if out, err := src.tool(ctx, "pmc", "-u", "-b", "0", "GET TIME_STATUS_NP"); !errors.Is(err, errToolAbsent) {
		c.PTP = parsePMC(out, err)
	}
	c.ErrorNS, c.ErrorWhy = readingError(c)
	return c
}

// pairClocks reads monotonic, realtime, monotonic n times and keeps the
// narrowest bracket: the realtime reading was taken somewhere inside it, so
// pairing it with the bracket's midpoint is off by at most half its width.
func pairClocks(clock func(int32) int64, n int) (mono, real, uncertainty int64) {
	best := int64(-1)
	for i := 0; i < n; i++ {
		a := clock(unix.CLOCK_MONOTONIC)
		w := clock(unix.CLOCK_REALTIME)
		b := clock(unix.CLOCK_MONOTONIC)
		if width := b - a; best < 0 || width < best {
			best = width
			mono, real = a+width/2, w
			uncertainty = (width + 1) / 2
		}
	}
	return mono, real, uncertainty
}

// timeState names adjtimex's return value.
func timeState(state int) string {
	switch state {
	case unix.TIME_OK:
		return "TIME_OK"
	case unix.TIME_INS:
		return "TIME_INS"
	case unix.TIME_DEL:
		return "TIME_DEL"
	case unix.TIME_OOP:
		return "TIME_OOP"
	case unix.TIME_WAIT:
		return "TIME_WAIT"
	case unix.TIME_ERROR:
		return "TIME_ERROR"
	}
	return strconv.Itoa(state)
}

// statusFlags names the set bits of adjtimex's status word, in bit order.
func statusFlags(status int32) []string {
	names := [...]string{"STA_PLL", "STA_PPSFREQ", "STA_PPSTIME", "STA_FLL", "STA_INS", "STA_DEL", "STA_UNSYNC",
		"STA_FREQHOLD", "STA_PPSSIGNAL", "STA_PPSJITTER", "STA_PPSWANDER", "STA_PPSERROR", "STA_CLOCKERR",
		"STA_NANO", "STA_MODE", "STA_CLK"}
	var out []string
	for i, n := range names {
		if status&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// adjtimexOf converts the kernel's answer. maxerror and esterror are in
// microseconds; offset is in nanoseconds under STA_NANO, else microseconds;
// freq is in ppm with a 16-bit fraction.
func adjtimexOf(state int, tx *unix.Timex) *store.Adjtimex {
	a := &store.Adjtimex{State: timeState(state), Status: tx.Status, StatusFlags: statusFlags(tx.Status),
		Unsync:     tx.Status&unix.STA_UNSYNC != 0,
		MaxErrorNS: tx.Maxerror * 1000, EstErrorNS: tx.Esterror * 1000,
		OffsetNS: tx.Offset, FreqPPB: tx.Freq * 1000 >> 16, TAI: tx.Tai}
	if tx.Status&unix.STA_NANO == 0 {
		a.OffsetNS *= 1000
	}
	return a
}

// readingError is the bound of one reading on its own: the kernel's
// maxerror plus the pairing uncertainty, or nil when the kernel says the
// clock is not synchronized (STA_UNSYNC, TIME_ERROR) or could not be asked.
func readingError(c *store.ClockReading) (*int64, string) {
	a := c.Adjtimex
	switch {
	case a == nil:
		return nil, "the kernel's clock state could not be read (adjtimex: " + c.AdjtimexError + ")"
	case a.Unsync:
		return nil, "the kernel marks the wall clock unsynchronized (STA_UNSYNC): no time daemon vouches for it"
	case a.State == "TIME_ERROR":
		return nil, "the kernel reports the wall clock in error (TIME_ERROR)"
	}
	e := a.MaxErrorNS + c.PairUncertaintyNS
	return &e, ""
}

// runClockError is the run's bound from the start and stop readings:
// max(maxerror) + max(pairing uncertainty) + |the wall clock's step between
// them|. Events are converted with the start pair; monotonic and realtime
// run at the same rate, so a difference between their elapsed times is a
// step of the wall clock, added in full.
func runClockError(start, stop *store.ClockReading) (*int64, string) {
	if start == nil || stop == nil {
		return nil, "no clock reading at the start"
	}
	e0, why := readingError(start)
	if e0 == nil {
		return nil, "at the start: " + why
	}
	e1, why := readingError(stop)
	if e1 == nil {
		return nil, "at the stop: " + why
	}
	step := (stop.RealtimeNS - start.RealtimeNS) - (stop.MonotonicNS - start.MonotonicNS)
	if step < 0 {
		step = -step
	}
	e := max(start.Adjtimex.MaxErrorNS, stop.Adjtimex.MaxErrorNS) +
		max(start.PairUncertaintyNS, stop.PairUncertaintyNS) + step
	return &e, ""
}

// parseChrony reads `chronyc -c tracking`: reference id, reference name,
// stratum, reference time, system time offset, last offset, RMS offset,
// frequency, residual frequency, skew, root delay, root dispersion, update
// interval, leap status (seconds as decimals).
func parseChrony(out string, runErr error) *store.TimeDaemon {
	d := &store.TimeDaemon{Command: "chronyc -c tracking", Raw: strings.TrimSpace(out)}
	if runErr != nil {
		d.Error = runErr.Error()
	}
	f := strings.Split(d.Raw, ",")
	if len(f) < 14 {
		if d.Error == "" {
			d.Error = fmt.Sprintf("unexpected output (%d fields, want 14)", len(f))
		}
		return d
	}
	d.Reference = f[1]
	if n, err := strconv.Atoi(f[2]); err == nil {
		d.Stratum = &n
	}
	d.OffsetNS = secondsNS(f[4])
	d.RootDelayNS = secondsNS(f[10])
	d.RootDispersionNS = secondsNS(f[11])
	d.Leap = strings.TrimSpace(f[13])
	synced := d.Leap != "" && d.Leap != "Not synchronised"
	d.Synchronized = &synced
	return d
}

func secondsNS(s string) *int64 {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return nil
	}
	ns := int64(math.Round(v * 1e9))
	return &ns
}

// parsePMC reads linuxptp's `pmc -u -b 0 'GET TIME_STATUS_NP'`:
// master_offset (ns), gmPresent and gmIdentity.
func parsePMC(out string, runErr error) *store.TimeDaemon {
	d := &store.TimeDaemon{Command: "pmc -u -b 0 'GET TIME_STATUS_NP'", Raw: strings.TrimSpace(out)}
	if runErr != nil {
		d.Error = runErr.Error()
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "master_offset":
			if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				d.OffsetNS = &v
			}
		case "gmPresent":
			present := f[1] == "true"
			d.Synchronized = &present
		case "gmIdentity":
			d.Reference = f[1]
		}
	}
	if d.Synchronized == nil && d.Error == "" {
		d.Error = "no TIME_STATUS_NP response (is ptp4l running?)"
	}
	return d
}

// jobOfTarget reads the job of the spawned command (the recorder's own
// environment and cgroup) or of the --pid target; nil in --all mode.
func jobOfTarget(src identitySources, cfg Config) *store.Job {
	proc := filepath.Join(src.root, "proc")
	switch {
	case len(cfg.Command) > 0:
		self := readProc(proc, uint32(os.Getpid()))
		return jobOf("spawn", FilterEnv(os.Environ()), self.Cgroup, podNamespaceFile(src.root))
	case cfg.PID != 0:
		pi := readProc(proc, uint32(cfg.PID))
		if !pi.Readable {
			return nil
		}
		root := filepath.Join(proc, strconv.Itoa(cfg.PID), "root")
		return jobOf("pid", pi.Env, pi.Cgroup, podNamespaceFile(root))
	}
	return nil
}

// podNamespaceFile is where a pod's service account names its namespace.
func podNamespaceFile(root string) string {
	return filepath.Join(root, "var/run/secrets/kubernetes.io/serviceaccount/namespace")
}

// jobOf builds the job identity from an (allowlisted) environment, a
// cgroup path and a pod's namespace file; nil when none names anything.
func jobOf(source string, env map[string]string, cgroup, nsFile string) *store.Job {
	j := &store.Job{Source: source, Env: map[string]string{}}
	for _, k := range jobenv.Variables() {
		if v, ok := env[k]; ok {
			j.Env[k] = v
		}
	}
	p := jobenv.Parse(env)
	j.Rank, j.RankFrom, j.WorldSize, j.WorldSizeFrom = p.Rank, p.RankFrom, p.WorldSize, p.WorldSizeFrom
	j.LocalRank, j.JobID = p.LocalRank, p.JobID
	j.PodUID = cmpOr(env["POD_UID"], podUIDFromCgroup(cgroup))
	j.PodName = env["POD_NAME"]
	j.PodNamespace = env["POD_NAMESPACE"]
	if j.PodNamespace == "" && j.PodUID != "" {
		j.PodNamespace = readTrimmed(nsFile)
	}
	if len(j.Env) == 0 && j.PodUID == "" && j.PodNamespace == "" {
		return nil
	}
	if len(j.Env) == 0 {
		j.Env = nil
	}
	return j
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// podUID matches a pod UID in a kubelet cgroup path: cgroupfs
// (/kubepods/burstable/pod<uid>/...) or systemd (kubepods-burstable-pod<uid
// with underscores>.slice).
var podUID = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})`)

// podUIDFromCgroup returns the pod UID a kubepods cgroup path names, with
// dashes, or "".
func podUIDFromCgroup(cgroup string) string {
	if !strings.Contains(cgroup, "kubepods") {
		return ""
	}
	m := podUID.FindStringSubmatch(cgroup)
	if m == nil {
		return ""
	}
	return strings.ReplaceAll(m[1], "_", "-")
}

// podOf names the pod of a process whose cgroup path carries a pod UID
// (nil otherwise): its namespace from the environment (POD_NAMESPACE, the
// downward API's usual name) or the pod's service account, its name from
// the environment (POD_NAME) or the container's /etc/hostname, which the
// kubelet writes with the pod's name (unless the pod sets another host
// name). root is the process's root directory (/proc/PID/root).
func podOf(root, cgroup string, env map[string]string) *store.Pod {
	uid := podUIDFromCgroup(cgroup)
	if uid == "" {
		return nil
	}
	p := &store.Pod{UID: uid, Namespace: env["POD_NAMESPACE"], Name: env["POD_NAME"]}
	if p.Namespace == "" {
		p.Namespace = readTrimmed(podNamespaceFile(root))
	}
	if p.Name == "" {
		p.Name = readTrimmed(filepath.Join(root, "etc/hostname"))
	}
	return p
}

// jobOfProcesses is the --all run's job: the values every recorded
// process that names a job agrees on, and the distinct ranks seen (one
// recorder per node often records several ranks).
func jobOfProcesses(procs []store.Process) *store.Job {
	var jobs []*store.Job
	for _, p := range procs {
		if j := jobOf("processes", p.Env, p.Cgroup, ""); j != nil {
			jobs = append(jobs, j)
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	out := &store.Job{Source: "processes"}
	same := func(get func(*store.Job) string) string {
		v := get(jobs[0])
		for _, j := range jobs[1:] {
			if get(j) != v {
				return ""
			}
		}
		return v
	}
	intStr := func(p *int) string {
		if p == nil {
			return ""
		}
		return strconv.Itoa(*p)
	}
	out.JobID = same(func(j *store.Job) string { return j.JobID })
	out.PodUID = same(func(j *store.Job) string { return j.PodUID })
	out.PodName = same(func(j *store.Job) string { return j.PodName })
	out.PodNamespace = same(func(j *store.Job) string { return j.PodNamespace })
	if ws := same(func(j *store.Job) string { return intStr(j.WorldSize) + "/" + j.WorldSizeFrom }); ws != "" && ws[0] != '/' {
		out.WorldSize, out.WorldSizeFrom = jobs[0].WorldSize, jobs[0].WorldSizeFrom
	}
	for _, j := range jobs {
		if j.Rank != nil && !slices.Contains(out.Ranks, *j.Rank) {
			out.Ranks = append(out.Ranks, *j.Rank)
		}
	}
	slices.Sort(out.Ranks)
	if len(out.Ranks) == 1 && same(func(j *store.Job) string { return intStr(j.Rank) }) != "" {
		out.Rank, out.RankFrom = jobs[0].Rank, jobs[0].RankFrom
	}
	return out
}

// processRecords returns the records of the processes seen so far. It
// reads the event reader's state: call it once the reader has stopped.
func (s *Session) processRecords() []store.Process {
	if s.h == nil {
		return nil
	}
	out := make([]store.Process, 0, len(s.h.procs))
	for _, p := range s.h.procs {
		out = append(out, p.rec)
	}
	return out
}
