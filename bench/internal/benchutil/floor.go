package benchutil

import (
	"errors"
	"fmt"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/recorder"
)

// Floor is the cheapest instrumentation that observes the same calls the
// way forensic does: an empty entry program and an empty return program
// (r0 = 0; exit), attached with one uprobe_multi and one uretprobe_multi
// link per library, cookies included, on the same symbols forensic
// attaches. What a call costs under the floor is the price of the trap
// itself; anything forensic costs beyond it is its own work.
type Floor struct {
	entry, ret *ebpf.Program
	links      []link.Link
	// Symbols is how many symbols the last Attach put probes on.
	Symbols int
}

// LoadFloor loads the two empty programs.
func LoadFloor() (*Floor, error) {
	if err := features.HaveBPFLinkUprobeMulti(); err != nil {
		return nil, fmt.Errorf("the floor needs uprobe_multi links (Linux 6.6+): %w", err)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, err
	}
	load := func(name string) (*ebpf.Program, error) {
		return ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         name,
			Type:         ebpf.Kprobe,
			AttachType:   ebpf.AttachTraceUprobeMulti,
			License:      "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		})
	}
	f := &Floor{}
	var err error
	if f.entry, err = load("floor_entry"); err != nil {
		return nil, fmt.Errorf("load empty entry program: %w", err)
	}
	if f.ret, err = load("floor_return"); err != nil {
		f.entry.Close()
		return nil, fmt.Errorf("load empty return program: %w", err)
	}
	return f, nil
}

// Attach puts the pair on every hooked symbol lib exports, skipping
// aliases (two names at one offset) exactly as the recorder does, with the
// symbol id as cookie. Return probes go first, as in bpf.Objects.Attach.
func (f *Floor) Attach(lib string) error {
	cov, err := recorder.CoverageOf(lib)
	if err != nil {
		return err
	}
	ids := make([]int, 0, len(cov.Attach))
	for id := range cov.Attach {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	seen := map[uint64]bool{}
	var offsets, cookies []uint64
	for _, id := range ids {
		off := cov.Attach[id]
		if seen[off] {
			continue
		}
		seen[off] = true
		offsets = append(offsets, off)
		cookies = append(cookies, uint64(id))
	}
	if len(offsets) == 0 {
		return fmt.Errorf("%s exports no hooked symbol", lib)
	}
	ex, err := link.OpenExecutable(lib)
	if err != nil {
		return err
	}
	opts := &link.UprobeMultiOptions{Addresses: offsets, Cookies: cookies}
	ret, err := ex.UretprobeMulti(nil, f.ret, opts)
	if err != nil {
		return fmt.Errorf("uretprobe_multi: %w", err)
	}
	ent, err := ex.UprobeMulti(nil, f.entry, opts)
	if err != nil {
		ret.Close()
		return fmt.Errorf("uprobe_multi: %w", err)
	}
	f.links = append(f.links, ret, ent)
	f.Symbols = len(offsets)
	return nil
}

// Detach removes the probes.
func (f *Floor) Detach() {
	bpf.CloseLinks(f.links)
	f.links = nil
}

// Close detaches and unloads.
func (f *Floor) Close() error {
	f.Detach()
	return errors.Join(f.entry.Close(), f.ret.Close())
}

// Stats sums the kernel's run time and count of the two empty programs
// (zero unless statistics are enabled).
func (f *Floor) Stats() ProgStat {
	var s ProgStat
	for _, p := range []*ebpf.Program{f.entry, f.ret} {
		if st, err := p.Stats(); err == nil {
			s.Runtime += st.Runtime
			s.Count += st.RunCount
		}
	}
	return s
}
