package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
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
	file    fileID // the file bbolt maps, for releaseMapped
	schema  uint32
	run     RunInfo
	symbols []string // by id
	// releaseEvery is how many bytes of events a pass reads between
	// releases of the mapped pages.
	releaseEvery int
}

// releaseEvery is the default Reader.releaseEvery: 16 MiB.
const releaseEvery = 16 << 20

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
	r = &Reader{path: path, file: fileIDOf(st), releaseEvery: releaseEvery}
	err = guarded(func() error {
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: LockWait})
		if err != nil {
			if errors.Is(err, bolt.ErrTimeout) {
				return ErrLocked
			}
			return fmt.Errorf("%w: %v", ErrNotRunDB, err)
		}
		r.db = db
		return nil
	})
	if err == nil {
		err = r.load()
	}
	if err != nil {
		if r.db != nil {
			r.db.Close()
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// guarded runs fn, which reads through bbolt, so that bad input never
// crashes the CLI: a panic inside bbolt (it panics on some corrupt pages)
// and a memory fault on its mapping of the file (a page reference past
// the end of the file faults with SIGBUS; only a fault turned into a panic
// can be recovered) both become ErrCorrupt.
func guarded(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrCorrupt, p)
		}
	}()
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	return fn()
}

// view runs fn in a read transaction, guarded. Every read of the file
// goes through it.
func (r *Reader) view(fn func(*bolt.Tx) error) error {
	return guarded(func() error { return r.db.View(fn) })
}

func (r *Reader) load() error {
	return r.view(func(tx *bolt.Tx) error {
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
	err = r.view(func(tx *bolt.Tx) error {
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
	err = r.view(func(tx *bolt.Tx) error {
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
	return r.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		if b == nil {
			return fmt.Errorf("%w: no events bucket", ErrCorrupt)
		}
		rel := releaser{r: r}
		return b.ForEach(func(_, chunk []byte) error {
			rel.read(len(chunk))
			return DecodeChunk(chunk, func(e *Event) error {
				e.Name = r.SymbolName(e.Symbol)
				return fn(e)
			})
		})
	})
}

// ErrNoFailureIndex: the file has no failures bucket (written before it
// existed); read every event instead.
var ErrNoFailureIndex = errors.New("no failure index")

// Failures calls fn for every failed call, in storage order, from the
// failures index (a copy the writer keeps of each failed event).
func (r *Reader) Failures(fn func(*Event) error) (err error) {
	return r.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketFailures)
		if b == nil {
			return ErrNoFailureIndex
		}
		rel := releaser{r: r}
		return b.ForEach(func(_, chunk []byte) error {
			rel.read(len(chunk))
			return DecodeChunk(chunk, func(e *Event) error {
				e.Name = r.SymbolName(e.Symbol)
				return fn(e)
			})
		})
	})
}

// releaser lets go of the pages a long pass has read: records are read
// through bbolt's mapping of the file and every page read stays resident,
// so without it a pass over a large run would grow with the file.
type releaser struct {
	r     *Reader
	bytes int
}

// read counts n more bytes read, releasing the mapped pages every
// Reader.releaseEvery bytes.
func (x *releaser) read(n int) {
	if x.bytes += n; x.bytes >= x.r.releaseEvery {
		x.bytes = 0
		releaseMapped(x.r.file)
	}
}

// LastEventEnd returns the latest return time in the last event chunk
// (0 when there are no events): where the record ends.
func (r *Reader) LastEventEnd() (end int64, err error) {
	err = r.view(func(tx *bolt.Tx) error {
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
	return r.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b == nil {
			return fmt.Errorf("%w: no %s bucket", ErrCorrupt, bucket)
		}
		rel := releaser{r: r}
		return b.ForEach(func(k, v []byte) error {
			rel.read(len(v))
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

// Reading is what a memory sample read, without the rest of the sample
// (its per-process list, its triggers): a light pass over the samples.
type Reading struct {
	Round  uint64  `json:"round"` // the round the sample was taken in
	GPU    GPURef  `json:"gpu"`
	Kind   string  `json:"kind"`
	Scope  string  `json:"scope"`
	Status Status  `json:"status"`
	Start  int64   `json:"start_ns"`
	End    int64   `json:"end_ns"`
	Total  *uint64 `json:"total_bytes,omitempty"`
	Free   *uint64 `json:"free_bytes,omitempty"`
}

// Readings calls fn for the reading of every framebuffer and BAR1 sample
// in sequence order, streaming. It decodes only those samples (a sample's
// kind is read from its record's opening bytes) and only the fields a
// Reading has: a light pass over the samples.
func (r *Reader) Readings(fn func(*Reading) error) error {
	return r.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSamples)
		if b == nil {
			return fmt.Errorf("%w: no %s bucket", ErrCorrupt, bucketSamples)
		}
		rel := releaser{r: r}
		return b.ForEach(func(_, v []byte) error {
			rel.read(len(v))
			if k := peekKind(v); k != "" && k != KindFramebuffer && k != KindBAR1 {
				return nil
			}
			var rd Reading
			if err := json.Unmarshal(v, &rd); err != nil {
				return fmt.Errorf("%w: %s record: %v", ErrCorrupt, bucketSamples, err)
			}
			if rd.Kind != KindFramebuffer && rd.Kind != KindBAR1 {
				return nil
			}
			return fn(&rd)
		})
	})
}

// peekKind reads a sample record's kind from its opening bytes, where the
// writer puts it; "" when it is not there (then the record is decoded).
func peekKind(v []byte) string {
	const key = `"kind":"`
	head := v[:min(len(v), 256)]
	i := bytes.Index(head, []byte(key))
	if i < 0 {
		return ""
	}
	rest := head[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// Processes returns every recorded process, ordered by pid then start.
func (r *Reader) Processes() ([]Process, error) { return collect[Process](r, bucketProcesses) }

// Libraries returns the libcuda files attached.
func (r *Reader) Libraries() ([]Library, error) { return collect[Library](r, bucketLibraries) }

// Files returns the files the recorder resolved the stored stacks' build
// ids to, one per build id. A file written before the files bucket
// existed has none: the result is empty, not an error.
func (r *Reader) Files() (files []File, err error) {
	err = r.view(func(tx *bolt.Tx) error {
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
	err = r.view(func(tx *bolt.Tx) error {
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
