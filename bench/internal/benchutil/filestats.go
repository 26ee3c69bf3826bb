package benchutil

import (
	"encoding/binary"
	"errors"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// FileStats says where the bytes of a run.db go.
type FileStats struct {
	Events uint64 // call events stored (sum of the chunk counts)
	Chunks uint64
	File   int64 // file size
	InUse  int64 // pages up to bbolt's high-water mark (tx.Size)
	// Payload is the sum of the event chunks' encoded bytes, without
	// bbolt's keys, page headers or free space.
	Payload int64
}

// ReadFileStats opens a run.db read-only with bbolt and measures it.
func ReadFileStats(path string) (FileStats, error) {
	var fs FileStats
	st, err := os.Stat(path)
	if err != nil {
		return fs, err
	}
	fs.File = st.Size()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return fs, err
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		fs.InUse = tx.Size()
		b := tx.Bucket([]byte("events"))
		if b == nil {
			return errors.New("no events bucket")
		}
		return b.ForEach(func(_, v []byte) error {
			fs.Chunks++
			fs.Payload += int64(len(v))
			if len(v) > 1 {
				n, _ := binary.Uvarint(v[1:]) // format byte, then the count
				fs.Events += n
			}
			return nil
		})
	})
	return fs, err
}

// PerEvent divides by the event count.
func (fs FileStats) PerEvent(v int64) float64 {
	if fs.Events == 0 {
		return 0
	}
	return float64(v) / float64(fs.Events)
}
