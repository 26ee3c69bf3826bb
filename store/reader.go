package store

import (
	"encoding/binary"

	"encoding/json"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"os"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
)

// LockWait is how long Open waits for a recorder's lock before it reports
// ErrLocked.
const LockWait = 200 * time.Millisecond

// Reader reads a run.db. Its methods may be called from one goroutine at a
// time.
type Reader struct {
	db      *bolt.DB
	path    string
	schema  uint32
	run     RunInfo
	symbols []string // by id
}

// Open opens path read-only and checks that it is a forensic run of a
// schema this package knows. Errors wrap the sentinels in errors.go.
func Open(path string) (r *Reader, err error) {
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", path, ErrNotFound)
		}
		return nil, err
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s: %w (a directory)", path, ErrNotRunDB)
	}
	if st.Size() == 0 {
		return nil, fmt.Errorf("%s: %w", path, ErrEmpty)
	}
	if err := checkFile(path, st.Size()); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer recoverCorrupt(&err)
	defer guardFaults()()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: LockWait})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("%s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("%s: %w: %v", path, ErrNotRunDB, err)
	}
	r = &Reader{db: db, path: path}
	if err := r.load(); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// recoverCorrupt turns a panic inside bbolt (it panics on some corrupt
// pages) into ErrCorrupt: bad input must never crash the CLI.
func recoverCorrupt(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("%w: %v", ErrCorrupt, p)
	}
}

// guardFaults makes a memory fault in this goroutine a panic instead of a
// crash, for as long as the returned function is not called. bbolt reads
// the file through mmap: a corrupt page reference past the end of the file
// faults (SIGBUS), and only this turns that into an error.
func guardFaults() func() {
	old := debug.SetPanicOnFault(true)
	return func() { debug.SetPanicOnFault(old) }
}

func (r *Reader) load() error {
	return r.db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if m == nil || string(m.Get(keyFormat)) != Format {
			return ErrForeign
		}
		v := m.Get(keySchema)
		if len(v) != 4 {
			return fmt.Errorf("%w: schema version missing", ErrCorrupt)
		}
		r.schema = binary.BigEndian.Uint32(v)
		if r.schema > SchemaVersion {
			return fmt.Errorf("%w (file has %d, this forensic reads up to %d)", ErrNewerSchema, r.schema, SchemaVersion)
		}
		if err := getJSON(m, keyRun, &r.run); err != nil {
			return err
		}
		s := tx.Bucket(bucketSymbols)
		if s == nil {
			return fmt.Errorf("%w: no symbols bucket", ErrCorrupt)
		}
		return s.ForEach(func(k, v []byte) error {
			if len(k) != 2 {
				return fmt.Errorf("%w: symbol key", ErrCorrupt)
			}
			id := int(binary.BigEndian.Uint16(k))
			for len(r.symbols) <= id {
				r.symbols = append(r.symbols, "")
			}
			r.symbols[id] = string(v)
			return nil
		})
	})
}

func getJSON(b *bolt.Bucket, key []byte, v any) error {
	data := b.Get(key)
	if data == nil {
		return fmt.Errorf("%w: %s record missing", ErrCorrupt, key)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: %s record: %v", ErrCorrupt, key, err)
	}
	return nil
}

// Close releases the file.
func (r *Reader) Close() error { return r.db.Close() }

// Path returns the file's path.
func (r *Reader) Path() string { return r.path }

// Schema returns the file's schema version.
func (r *Reader) Schema() uint32 { return r.schema }

// Run returns the run record.
func (r *Reader) Run() RunInfo { return r.run }

// SymbolName returns the name of a symbol id of this file.
func (r *Reader) SymbolName(id uint16) string {
	if int(id) < len(r.symbols) && r.symbols[id] != "" {
		return r.symbols[id]
	}
	return fmt.Sprintf("symbol#%d", id)
}

// Stop returns the stop record, or nil when the run ended abruptly.
func (r *Reader) Stop() (s *StopInfo, err error) {
	defer recoverCorrupt(&err)
	defer guardFaults()()
	err = r.db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if m.Get(keyStop) == nil {
			return nil
		}
		s = new(StopInfo)
		return getJSON(m, keyStop, s)
	})
	return s, err
}

// Inventory returns the platform inventory, or nil if none was stored.
func (r *Reader) Inventory() (inv *Inventory, err error) {
	defer recoverCorrupt(&err)
	defer guardFaults()()
	err = r.db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if m.Get(keyInventory) == nil {
			return nil
		}
		inv = new(Inventory)
		return getJSON(m, keyInventory, inv)
	})
	return inv, err
}

// Events calls fn for every call event in storage order, streaming: memory
// does not grow with the number of events. The Event is reused between
// calls.
func (r *Reader) Events(fn func(*Event) error) (err error) {
	defer recoverCorrupt(&err)
	defer guardFaults()()
	return r.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		if b == nil {
			return fmt.Errorf("%w: no events bucket", ErrCorrupt)
		}
		read := 0
		return b.ForEach(func(_, chunk []byte) error {
			err := DecodeChunk(chunk, func(e *Event) error {
				e.Name = r.SymbolName(e.Symbol)
				return fn(e)
			})
			// Chunks are read through bbolt's mmap, and every page read
			// stays resident: let them go every 16 MiB, so a pass over a
			// large run does not grow with the file.
			if read += len(chunk); read >= 16<<20 {
				read = 0
				r.dropMapped(tx)
			}
			return err
		})
	})
}

// ErrNoFailureIndex: the file has no failures bucket (written before it
// existed); read every event instead.
var ErrNoFailureIndex = errors.New("no failure index")

// Failures calls fn for every failed call, in storage order, from the
// failures index (a copy the writer keeps of each failed event).
func (r *Reader) Failures(fn func(*Event) error) (err error) {
	defer recoverCorrupt(&err)
	defer guardFaults()()
	return r.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketFailures)
		if b == nil {
			return ErrNoFailureIndex
		}
		return b.ForEach(func(_, chunk []byte) error {
			return DecodeChunk(chunk, func(e *Event) error {
				e.Name = r.SymbolName(e.Symbol)
				return fn(e)
			})
		})
	})
}

// LastEventEnd returns the latest return time in the last event chunk
// (0 when there are no events): where the record ends.
func (r *Reader) LastEventEnd() (end int64, err error) {
	defer recoverCorrupt(&err)
	defer guardFaults()()
	err = r.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		if b == nil {
			return fmt.Errorf("%w: no events bucket", ErrCorrupt)
		}
		_, chunk := b.Cursor().Last()
		if chunk == nil {
			return nil
		}
		return DecodeChunk(chunk, func(e *Event) error {
			end = max(end, e.End)
			return nil
		})
	})
	return end, err
}

// forEachJSON decodes every value of a bucket into a T.
func forEachJSON[T any](r *Reader, bucket []byte, fn func(*T) error) (err error) {
	defer recoverCorrupt(&err)
	defer guardFaults()()
	return r.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b == nil {
			return fmt.Errorf("%w: no %s bucket", ErrCorrupt, bucket)
		}
		return b.ForEach(func(k, v []byte) error {
			var t T
			if err := json.Unmarshal(v, &t); err != nil {
				return fmt.Errorf("%w: %s record: %v", ErrCorrupt, bucket, err)
			}
			return fn(&t)
		})
	})
}

func collect[T any](r *Reader, bucket []byte) ([]T, error) {
	var out []T
	err := forEachJSON(r, bucket, func(t *T) error { out = append(out, *t); return nil })
	return out, err
}

// Samples calls fn for every NVML sample in sequence order, streaming.
func (r *Reader) Samples(fn func(*Sample) error) error {
	return forEachJSON(r, bucketSamples, fn)
}

// Processes returns every recorded process, ordered by pid then start.
func (r *Reader) Processes() ([]Process, error) { return collect[Process](r, bucketProcesses) }

// Libraries returns the libcuda files attached.
func (r *Reader) Libraries() ([]Library, error) { return collect[Library](r, bucketLibraries) }

// Files returns the files the recorder resolved the stored stacks' build
// ids to, one per build id. A file written before the files bucket
// existed has none: the result is empty, not an error.
func (r *Reader) Files() (files []File, err error) {
	defer recoverCorrupt(&err)
	defer guardFaults()()
	err = r.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketFiles)
		if b == nil {
			return nil
		}
		return b.ForEach(func(_, v []byte) error {
			var f File
			if err := json.Unmarshal(v, &f); err != nil {
				return fmt.Errorf("%w: files record: %v", ErrCorrupt, err)
			}
			files = append(files, f)
			return nil
		})
	})
	return files, err
}

// KernelLog returns the kernel log lines recorded.
func (r *Reader) KernelLog() ([]KernelLog, error) { return collect[KernelLog](r, bucketKmsg) }

// Markers returns the markers, in the order they were added.
func (r *Reader) Markers() ([]Marker, error) { return collect[Marker](r, bucketMarkers) }

// Drops returns the readings of the loss counters.
func (r *Reader) Drops() ([]Drops, error) { return collect[Drops](r, bucketDrops) }

// Stack returns the frames of a stack id, or nil if not stored.
func (r *Reader) Stack(id int32) (frames []Frame, err error) {
	defer recoverCorrupt(&err)
	defer guardFaults()()
	err = r.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketStacks)
		if b == nil {
			return nil
		}
		v := b.Get(binary.BigEndian.AppendUint32(nil, uint32(id)))
		if v == nil {
			return nil
		}
		if err := json.Unmarshal(v, &frames); err != nil {
			return fmt.Errorf("%w: stack %d: %v", ErrCorrupt, id, err)
		}
		return nil
	})
	return frames, err
}

// SymbolNames returns the file's symbol names, indexed by symbol id ("" for
// an unused id).
func (r *Reader) SymbolNames() []string { return append([]string(nil), r.symbols...) }

// dropMapped tells the kernel this process no longer needs the resident
// pages of bbolt's read-only shared mapping of the file. Nothing is lost:
// the next touch reads a page back from the page cache.
func (r *Reader) dropMapped(tx *bolt.Tx) { dropMapped(r.db, tx) }

// dropMapped releases the resident pages of bbolt's shared mapping of the
// file. bbolt only reads through the mapping (it writes with pwrite), so
// the pages are clean and nothing is lost. The range is what the
// transaction sees (its high-water mark), which bbolt keeps mapped: the
// file itself may be longer than the mapping (bbolt grows it ahead), and
// MADV_DONTNEED past the mapping would zero whatever memory lies there.
func dropMapped(db *bolt.DB, tx *bolt.Tx) {
	size := tx.Size()
	if size <= 0 {
		return
	}
	start := db.Info().Data
	pg := uintptr(os.Getpagesize())
	length := uintptr(size) &^ (pg - 1) // whole pages only, never past it
	if length == 0 {
		return
	}
	unix.Syscall(unix.SYS_MADVISE, start, length, unix.MADV_DONTNEED)
}
