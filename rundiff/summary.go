package rundiff

// A run's calls are not kept while it is read: a 10M-call run has
// millions of allocations and mappings, and two runs of one job agree
// for most of them. The first pass (the analysis) keeps, per process, a
// Summary: the number of calls and, per block of blockLen calls, a hash
// of their steps and one of their call sites. Comparing two summaries
// block by block finds the block where two sequences first depart, and
// the blocks where their call sites differ, without any call; a second
// pass (Run.load) reads only those windows of calls. Memory is a few
// bytes per thousand calls, plus the windows.

// blockBits sizes the summary's blocks (1,024 calls).
const blockBits = 10

// blockLen is the number of calls a summary block covers.
const blockLen = 1 << blockBits

// maxSiteBlocks bounds the blocks read to look for a call from another
// call site before two sequences depart; past it the diff says so.
const maxSiteBlocks = 8

// Summary is one process's allocation and mapping calls as the first
// pass saw them: how many, and a hash of each block of them.
type Summary struct {
	n      int
	blocks []block
}

// block is the hashes of blockLen consecutive calls (fewer in the last).
type block struct {
	// calls hashes each call's step (symbol name, size, outcome): what
	// sameCall compares; sites each call's call site (0: unknown).
	calls, sites uint64
	// known counts the calls whose call site is known.
	known uint32
}

// Len is the number of calls summarized.
func (s *Summary) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// FNV-1a's 64-bit constants, the hashes' start and multiplier.
const (
	hashStart = 14695981039346656037
	hashMul   = 1099511628211
)

// add summarizes the next call: step is stepHash of it, site the hash of
// its call site's key (0 when unknown).
func (s *Summary) add(step, site uint64) {
	if s.n&(blockLen-1) == 0 {
		s.blocks = append(s.blocks, block{calls: hashStart, sites: hashStart})
	}
	b := &s.blocks[len(s.blocks)-1]
	b.calls = (b.calls ^ step) * hashMul
	b.sites = (b.sites ^ mix(site)) * hashMul
	if site != 0 {
		b.known++
	}
	s.n++
}

// mix spreads a value's bits over the whole word (splitmix64's finish),
// so that two fields hashed together do not cancel out.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// stepHash hashes what makes two calls the same step (sameCall): the
// symbol's name (by its hash, so that runs numbering symbols apart
// agree), the size and whether it has one, and whether it failed.
func stepHash(name uint64, c Call) uint64 {
	flags := uint64(0)
	if c.HasSize {
		flags |= 1
	}
	if c.Failed {
		flags |= 2
	}
	return mix(mix(name^c.Size) ^ flags)
}

// textHash is FNV-1a of a string (a symbol name, a call site's key);
// never 0 for a non-empty one, in practice.
func textHash(s string) uint64 {
	if s == "" {
		return 0
	}
	h := uint64(hashStart)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * hashMul
	}
	return h
}

// window is a range of a sequence's calls to read: [from, to).
type window struct{ from, to int }

// plan is what comparing two processes' calls needs: whether their steps
// are the same throughout, else the first call that may differ (the start
// of the first block whose steps differ); and the blocks before that one
// where both have known call sites that differ.
type plan struct {
	same       bool
	from       int
	siteBlocks []int
	// sitesCut: more blocks had differing call sites than were read.
	sitesCut bool
}

// planPair compares two summaries block by block.
func planPair(bad, good *Summary) plan {
	var bb, gb []block
	if bad != nil {
		bb = bad.blocks
	}
	if good != nil {
		gb = good.blocks
	}
	common := min(len(bb), len(gb))
	j := 0
	for j < common && bb[j].calls == gb[j].calls {
		j++
	}
	p := plan{same: j == len(bb) && j == len(gb) && bad.Len() == good.Len()}
	last := common - 1 // the last block whose call sites may matter
	if !p.same {
		// The departure's block is read whole for the departure.
		p.from = min(j<<blockBits, bad.Len(), good.Len())
		last = min(last, j-1)
	}
	for i := 0; i <= last; i++ {
		if bb[i].sites == gb[i].sites || bb[i].known == 0 || gb[i].known == 0 {
			continue
		}
		if len(p.siteBlocks) == maxSiteBlocks {
			p.sitesCut = true
			break
		}
		p.siteBlocks = append(p.siteBlocks, i)
	}
	return p
}

// windows are the calls of one side a plan reads, for a sequence of n
// calls: the departure's block and the lookahead after it, and the blocks
// where call sites differ.
func (p plan) windows(n int) []window {
	var out []window
	if !p.same {
		out = append(out, window{p.from, min(n, p.from+blockLen+lookahead+1)})
	}
	for _, b := range p.siteBlocks {
		out = append(out, window{b << blockBits, min(n, (b+1)<<blockBits)})
	}
	return out
}
