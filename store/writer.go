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
// Each field is a kind of record, a row of batchKinds (kinds.go).
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
	// Counts, when set, are the recorder's counters as of this batch,
	// stored with it (meta/committed, flight.go).
	Counts *Stats
}

// Len is the number of records in the batch (Counts ride along and are
// not counted).
func (b *Batch) Len() int {
	n := 0
	for _, k := range batchKinds {
		if !k.rides {
			n += k.count(b)
		}
	}
	return n
}

// Reset empties the batch, keeping its storage.
func (b *Batch) Reset() {
	for _, k := range batchKinds {
		k.reset(b)
	}
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
	err := w.db.Update(func(tx *bolt.Tx) error { return putBatch(tx, b) })
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
