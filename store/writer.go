package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Bucket names.
var (
	bucketMeta      = []byte("meta")
	bucketSymbols   = []byte("symbols")
	bucketLibraries = []byte("libraries")
	bucketEvents    = []byte("events")
	bucketSamples   = []byte("samples")
	bucketProcesses = []byte("processes")
	bucketStacks    = []byte("stacks")
	bucketKmsg      = []byte("kmsg")
	bucketMarkers   = []byte("markers")
	bucketDrops     = []byte("drops")
	bucketFailures  = []byte("failures")
	bucketFiles     = []byte("files")

	allBuckets = [][]byte{bucketMeta, bucketSymbols, bucketLibraries, bucketEvents, bucketSamples,
		bucketProcesses, bucketStacks, bucketKmsg, bucketMarkers, bucketDrops, bucketFailures, bucketFiles}

	keyFormat    = []byte("format")
	keySchema    = []byte("schema")
	keyRun       = []byte("run")
	keyInventory = []byte("inventory")
	keyStop      = []byte("stop")
)

// DefaultReserve is the free space below which the writer stops committing
// records, keeping room for the stop record.
const DefaultReserve = 8 << 20

// Writer appends a recording to a new run.db. It is not safe for
// concurrent use: one goroutine owns it.
type Writer struct {
	db   *bolt.DB
	path string
	// Reserve is the free space (bytes) on the file's filesystem below which
	// Commit refuses with ErrDiskFull, so that Stop still finds room.
	Reserve uint64
	// freeSpace reports the filesystem's free bytes; replaced in tests.
	freeSpace func() (uint64, error)
	full      bool
	file      fileID // the file bbolt maps, for releaseMapped
}

// CreateOptions adjust Create.
type CreateOptions struct {
	// Force replaces an existing finished run (or empty file) instead of
	// refusing; it never removes a recording in progress, a directory or a
	// file that is not a forensic run (ErrNotReplaced).
	Force bool
	// Owner, when set, is given the new file (it stays mode 0600).
	Owner *Owner
}

// Create makes a new run.db at path, mode 0600 (it names processes and
// their arguments), and writes the run record and the symbol names.
func Create(path string, opts CreateOptions, run RunInfo, symbols []string) (*Writer, error) {
	if opts.Force {
		if err := removeForReplace(path); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("%s: %w", path, ErrExists)
		}
		return nil, err
	}
	if o := opts.Owner; o != nil {
		err = f.Chown(o.UID, o.GID)
	}
	var st os.FileInfo
	if err == nil {
		st, err = f.Stat()
	}
	f.Close()
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        time.Second,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	w := &Writer{db: db, path: path, Reserve: DefaultReserve, file: fileIDOf(st),
		freeSpace: func() (uint64, error) { return fsFree(dir) }}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		m := tx.Bucket(bucketMeta)
		if err := m.Put(keyFormat, []byte(Format)); err != nil {
			return err
		}
		if err := m.Put(keySchema, binary.BigEndian.AppendUint32(nil, SchemaVersion)); err != nil {
			return err
		}
		if err := putJSON(m, keyRun, run); err != nil {
			return err
		}
		s := tx.Bucket(bucketSymbols)
		for i, name := range symbols {
			if err := s.Put(binary.BigEndian.AppendUint16(nil, uint16(i)), []byte(name)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		os.Remove(path)
		return nil, fmt.Errorf("initialize %s: %w", path, diskErr(err))
	}
	return w, nil
}

func fsFree(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// diskErr maps a write failure for lack of space to ErrDiskFull.
func diskErr(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG) {
		return fmt.Errorf("%w: %v", ErrDiskFull, err)
	}
	return err
}

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, data)
}

func u64key(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// ProcessKey is the processes bucket key of a process.
func ProcessKey(pid uint32, start int64) []byte {
	k := binary.BigEndian.AppendUint32(nil, pid)
	return binary.BigEndian.AppendUint64(k, uint64(start))
}

// Batch is what one commit writes. The recorder fills it between flushes.
type Batch struct {
	Events    []Event
	Samples   []Sample
	Processes []Process // inserted or replaced by (PID, Start)
	Stacks    map[int32][]Frame
	Kmsg      []KernelLog
	Markers   []Marker
	Drops     []Drops
	Libraries []Library
	Files     []File // by build id; a build id stored again replaces its record
	Inventory *Inventory
	// Stack captures (stacks.go).
	Captures  []Capture
	PyStacks  []PyStack
	PyCodes   []PyCode
	StackRefs []StackRef
	// Named stacks (named.go): captures unwound and named by the recorder.
	Named []NamedStack
	// Neighbours (neighbours.go): processes NVML listed that the
	// recording does not follow, named from /proc.
	Neighbours []Neighbour
	// Counts, when set, are the recorder's counters as of this batch,
	// stored with it (meta/committed, flight.go).
	Counts *Stats
}

// Len is the number of records in the batch.
func (b *Batch) Len() int {
	n := len(b.Events) + len(b.Samples) + len(b.Processes) + len(b.Stacks) + len(b.Kmsg) +
		len(b.Markers) + len(b.Drops) + len(b.Libraries) + len(b.Files) +
		len(b.Captures) + len(b.PyStacks) + len(b.PyCodes) + len(b.StackRefs) + len(b.Named) + len(b.Neighbours)
	if b.Inventory != nil {
		n++
	}
	return n
}

// Reset empties the batch, keeping its storage.
func (b *Batch) Reset() {
	b.Events = b.Events[:0]
	b.Samples = b.Samples[:0]
	b.Processes = b.Processes[:0]
	clear(b.Stacks)
	b.Kmsg = b.Kmsg[:0]
	b.Markers = b.Markers[:0]
	b.Drops = b.Drops[:0]
	b.Libraries = b.Libraries[:0]
	b.Files = b.Files[:0]
	b.Inventory = nil
	b.Captures = b.Captures[:0]
	b.PyStacks = b.PyStacks[:0]
	b.PyCodes = b.PyCodes[:0]
	b.StackRefs = b.StackRefs[:0]
	b.Named = b.Named[:0]
	b.Neighbours = b.Neighbours[:0]
	b.Counts = nil
}

// appendJSON stores each record under the bucket's next sequence number.
// The sequence is bbolt's own: it rolls back with a failed transaction.
func appendJSON[T any](b *bolt.Bucket, recs []T) error {
	for i := range recs {
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		if err := putJSON(b, u64key(seq), recs[i]); err != nil {
			return err
		}
	}
	return nil
}

// Commit writes the batch in one transaction. Sample sequence numbers are
// assigned here. After ErrDiskFull the writer accepts only Stop.
func (w *Writer) Commit(b *Batch) error {
	if w.full {
		return ErrDiskFull
	}
	if b.Len() == 0 {
		return nil
	}
	if w.Reserve > 0 && w.freeSpace != nil {
		if free, err := w.freeSpace(); err == nil && free < w.Reserve {
			w.full = true
			return fmt.Errorf("%w: %d bytes left on the filesystem of %s", ErrDiskFull, free, w.path)
		}
	}
	err := w.db.Update(func(tx *bolt.Tx) error {
		if len(b.Events) > 0 {
			eb := tx.Bucket(bucketEvents)
			eb.FillPercent = 1 // append-only keys
			for _, chunk := range EncodeChunks(b.Events) {
				seq, _ := eb.NextSequence() // fails only in a read-only tx
				if err := eb.Put(u64key(seq), chunk); err != nil {
					return err
				}
			}
			// Failed calls are also indexed on their own, so a reader finds
			// them without decoding every event.
			fb := tx.Bucket(bucketFailures)
			fb.FillPercent = 1
			for i := range b.Events {
				if b.Events[i].Result != 0 {
					seq, _ := fb.NextSequence()
					if err := fb.Put(u64key(seq), EncodeChunk(b.Events[i:i+1])); err != nil {
						return err
					}
				}
			}
		}
		sb := tx.Bucket(bucketSamples)
		sb.FillPercent = 1
		for i := range b.Samples {
			s := &b.Samples[i]
			s.Seq, _ = sb.NextSequence()
			if err := putJSON(sb, u64key(s.Seq), s); err != nil {
				return err
			}
		}
		pb := tx.Bucket(bucketProcesses)
		for i := range b.Processes {
			p := &b.Processes[i]
			if err := putJSON(pb, ProcessKey(p.PID, p.Start), p); err != nil {
				return err
			}
		}
		stb := tx.Bucket(bucketStacks)
		for id, frames := range b.Stacks {
			if err := putJSON(stb, binary.BigEndian.AppendUint32(nil, uint32(id)), frames); err != nil {
				return err
			}
		}
		if err := appendJSON(tx.Bucket(bucketKmsg), b.Kmsg); err != nil {
			return err
		}
		if err := appendJSON(tx.Bucket(bucketMarkers), b.Markers); err != nil {
			return err
		}
		if err := appendJSON(tx.Bucket(bucketDrops), b.Drops); err != nil {
			return err
		}
		lb := tx.Bucket(bucketLibraries)
		for _, l := range b.Libraries {
			seq, _ := lb.NextSequence()
			if err := putJSON(lb, binary.BigEndian.AppendUint32(nil, uint32(seq)), l); err != nil {
				return err
			}
		}
		filesB := tx.Bucket(bucketFiles)
		for i := range b.Files {
			if err := putJSON(filesB, []byte(b.Files[i].BuildID), &b.Files[i]); err != nil {
				return err
			}
		}
		if b.Inventory != nil {
			if err := putJSON(tx.Bucket(bucketMeta), keyInventory, b.Inventory); err != nil {
				return err
			}
		}
		if err := putCounts(tx, b.Counts); err != nil {
			return err
		}
		if err := putNamed(tx, b.Named); err != nil {
			return err
		}
		if err := putNeighbours(tx, b.Neighbours); err != nil {
			return err
		}
		return putStacks(tx, b)
	})
	if err != nil {
		err = diskErr(err)
		if errors.Is(err, ErrDiskFull) {
			w.full = true
		}
		return err
	}
	// bbolt reads the B+tree through its mapping of the file, and every
	// page it touched stays resident: over a long run the recorder's memory
	// would grow with run.db. Let them go after each commit.
	releaseMapped(w.file)
	return nil
}

// Resume lets a writer that refused with ErrDiskFull commit again, once
// the caller has made room (a flight recorder deletes old segments). The
// transaction that failed was rolled back: the file holds what the
// commits before it wrote.
func (w *Writer) Resume() { w.full = false }

// Stop writes the stop record: the run ended cleanly and this is how.
func (w *Writer) Stop(s StopInfo) error {
	err := w.db.Update(func(tx *bolt.Tx) error {
		return putJSON(tx.Bucket(bucketMeta), keyStop, s)
	})
	return diskErr(err)
}

// Close closes the file. Records not committed are not written.
func (w *Writer) Close() error {
	return w.db.Close()
}
