package store

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
)

// bbolt trusts its file: it maps it and follows page ids. A truncated or
// corrupt file can make it read past the end of the file (a fault that
// kills the process) or follow a cycle forever. Before Open hands a file to
// bbolt, checkFile walks the B+tree with plain reads and refuses anything
// bbolt could not traverse safely: page ids past the high-water mark, pages
// of the wrong type, elements outside their page, and pages reached twice.
// The walk reads each reachable page once.

// bbolt's on-disk layout (go.etcd.io/bbolt/internal/common).
const (
	pageHeaderSize = 16 // id u64, flags u16, count u16, overflow u32
	branchElemSize = 16 // pos u32, ksize u32, pgid u64
	leafElemSize   = 16 // flags u32, pos u32, ksize u32, vsize u32
	bucketHdrSize  = 16 // root pgid u64, sequence u64
	flagBranch     = 0x01
	flagLeaf       = 0x02
	bucketLeafFlag = 0x01
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	maxTreeDepth   = 64
)

type fileCheck struct {
	f        *os.File
	size     int64
	pageSize int64
	hwm      uint64 // pages below the high-water mark exist
	// seen has one bit per page below hwm: a page referenced twice is a
	// cycle or a corrupt tree. A bitset, not a map: a 100M-call run has
	// millions of pages.
	seen []uint64
	// bufs holds one page buffer per tree depth, reused: a page is done
	// with once the pages below it are, and a check of a 400 MB run read
	// (and allocated) all of it, one fresh buffer a page.
	bufs [][]byte
}

// mark records page id as seen and reports whether it already was.
func (c *fileCheck) mark(id uint64) bool {
	w, b := id/64, uint64(1)<<(id%64)
	was := c.seen[w]&b != 0
	c.seen[w] |= b
	return was
}

// checkFile validates the meta pages and the page tree of a bbolt file.
func checkFile(path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	c := &fileCheck{f: f, size: size}
	root, err := c.meta()
	if err != nil {
		return err
	}
	if err := c.tree(root, 0); err != nil {
		return fmt.Errorf("%w: %v", ErrNotRunDB, err)
	}
	return nil
}

// meta picks the newest valid meta page, as bbolt does, and returns the
// root bucket's page.
func (c *fileCheck) meta() (uint64, error) {
	hdr := make([]byte, 80)
	if _, err := c.f.ReadAt(hdr, 0); err != nil {
		return 0, fmt.Errorf("%w: %d bytes", ErrNotRunDB, c.size)
	}
	c.pageSize = int64(binary.LittleEndian.Uint32(hdr[24:]))
	if c.pageSize < 512 || c.pageSize > 1<<20 || c.pageSize&(c.pageSize-1) != 0 {
		return 0, ErrNotRunDB
	}
	var txid, pgid, root uint64
	found := false
	for i := int64(0); i < 2; i++ {
		b := make([]byte, 80)
		if _, err := c.f.ReadAt(b, i*c.pageSize); err != nil {
			continue
		}
		m := b[pageHeaderSize:]
		if binary.LittleEndian.Uint32(m[0:]) != boltMagic || binary.LittleEndian.Uint32(m[4:]) != boltVersion {
			continue
		}
		h := fnv.New64a()
		h.Write(m[:56]) // the meta fields before the checksum
		if h.Sum64() != binary.LittleEndian.Uint64(m[56:]) {
			continue
		}
		if t := binary.LittleEndian.Uint64(m[48:]); !found || t > txid {
			found = true
			txid, pgid, root = t, binary.LittleEndian.Uint64(m[40:]), binary.LittleEndian.Uint64(m[16:])
		}
	}
	if !found {
		return 0, ErrNotRunDB
	}
	if pgid > uint64(c.size/c.pageSize) {
		return 0, fmt.Errorf("%w: truncated (%d bytes, the file's meta page needs %d)", ErrNotRunDB, c.size, int64(pgid)*c.pageSize)
	}
	c.hwm = pgid
	c.seen = make([]uint64, (pgid+63)/64)
	return root, nil
}

// page reads page id with its overflow pages into the buffer of depth,
// valid until the next page read at that depth.
func (c *fileCheck) page(id uint64, depth int) ([]byte, error) {
	if id < 2 || id >= c.hwm {
		return nil, fmt.Errorf("page %d outside the file's %d pages", id, c.hwm)
	}
	if c.mark(id) {
		return nil, fmt.Errorf("page %d is referenced twice", id)
	}
	var h [pageHeaderSize]byte
	hdr := h[:]
	if _, err := c.f.ReadAt(hdr, int64(id)*c.pageSize); err != nil {
		return nil, err
	}
	if got := binary.LittleEndian.Uint64(hdr); got != id {
		return nil, fmt.Errorf("page %d says it is page %d", id, got)
	}
	overflow := uint64(binary.LittleEndian.Uint32(hdr[12:]))
	if id+overflow >= c.hwm {
		return nil, fmt.Errorf("page %d overflows past the file", id)
	}
	for i := uint64(1); i <= overflow; i++ {
		c.mark(id + i)
	}
	for len(c.bufs) <= depth {
		c.bufs = append(c.bufs, nil)
	}
	n := int64(overflow+1) * c.pageSize
	if int64(cap(c.bufs[depth])) < n {
		c.bufs[depth] = make([]byte, n)
	}
	buf := c.bufs[depth][:n]
	if _, err := c.f.ReadAt(buf, int64(id)*c.pageSize); err != nil {
		return nil, err
	}
	return buf, nil
}

func (c *fileCheck) tree(id uint64, depth int) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("page tree deeper than %d", maxTreeDepth)
	}
	p, err := c.page(id, depth)
	if err != nil {
		return err
	}
	return c.node(p, depth, false)
}

// node validates one branch or leaf page held in p, which is an inline
// bucket's value when inline is set.
func (c *fileCheck) node(p []byte, depth int, inline bool) error {
	if len(p) < pageHeaderSize {
		return fmt.Errorf("short page")
	}
	flags := binary.LittleEndian.Uint16(p[8:])
	count := int(binary.LittleEndian.Uint16(p[10:]))
	switch flags {
	case flagBranch:
		// bbolt's cursor reads a branch's first element whatever its
		// count, and an inline bucket's page ids all name the inline page
		// itself: an empty branch, or any branch inline, is a descent
		// that never ends.
		if count == 0 || inline {
			return fmt.Errorf("empty or inline branch page")
		}
		if pageHeaderSize+count*branchElemSize > len(p) {
			return fmt.Errorf("branch page elements overrun the page")
		}
		for i := 0; i < count; i++ {
			off := pageHeaderSize + i*branchElemSize
			pos := int(binary.LittleEndian.Uint32(p[off:]))
			ksize := int(binary.LittleEndian.Uint32(p[off+4:]))
			if off+pos+ksize > len(p) || pos < 0 || ksize < 0 {
				return fmt.Errorf("branch key outside its page")
			}
			if err := c.tree(binary.LittleEndian.Uint64(p[off+8:]), depth+1); err != nil {
				return err
			}
		}
	case flagLeaf:
		if pageHeaderSize+count*leafElemSize > len(p) {
			return fmt.Errorf("leaf page elements overrun the page")
		}
		for i := 0; i < count; i++ {
			off := pageHeaderSize + i*leafElemSize
			eflags := binary.LittleEndian.Uint32(p[off:])
			pos := int64(binary.LittleEndian.Uint32(p[off+4:]))
			ksize := int64(binary.LittleEndian.Uint32(p[off+8:]))
			vsize := int64(binary.LittleEndian.Uint32(p[off+12:]))
			end := int64(off) + pos + ksize + vsize
			if end > int64(len(p)) {
				return fmt.Errorf("leaf element outside its page")
			}
			if eflags&bucketLeafFlag == 0 {
				continue
			}
			v := p[int64(off)+pos+ksize : end]
			if len(v) < bucketHdrSize {
				return fmt.Errorf("bucket header too short")
			}
			if root := binary.LittleEndian.Uint64(v); root != 0 {
				if err := c.tree(root, depth+1); err != nil {
					return err
				}
			} else if err := c.node(v[bucketHdrSize:], depth+1, true); err != nil {
				// An inline bucket carries its single leaf page in the value.
				return err
			}
		}
	default:
		return fmt.Errorf("page of unexpected type %#x in the tree", flags)
	}
	return nil
}
