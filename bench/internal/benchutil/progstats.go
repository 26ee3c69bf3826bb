package benchutil

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
)

// ProgStat is the run time and run count the kernel accounted to one BPF
// program (kernel.bpf_stats_enabled, see ebpf.EnableStats).
type ProgStat struct {
	Name    string
	Runtime time.Duration
	Count   uint64
}

// ProcProgStats reads the statistics of every BPF program a process holds
// a file descriptor to (from /proc/PID/fdinfo), keyed by program id.
func ProcProgStats(pid int) (map[uint32]ProgStat, error) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[uint32]ProgStat{}
	for _, ent := range ents {
		f, err := os.Open(filepath.Join(dir, ent.Name()))
		if err != nil {
			continue
		}
		var id uint64
		var st ProgStat
		isProg, hasStats := false, false
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			switch k {
			case "prog_id":
				id, _ = strconv.ParseUint(v, 10, 32)
				isProg = true
			case "run_time_ns":
				n, _ := strconv.ParseInt(v, 10, 64)
				st.Runtime = time.Duration(n)
			case "run_cnt":
				st.Count, _ = strconv.ParseUint(v, 10, 64)
				hasStats = true
			}
		}
		f.Close()
		// A link's fdinfo names its program too, without statistics.
		if !isProg || !hasStats {
			continue
		}
		if p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id)); err == nil {
			if info, err := p.Info(); err == nil {
				st.Name = info.Name
			}
			p.Close()
		}
		out[uint32(id)] = st
	}
	return out, nil
}
