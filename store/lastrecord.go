package store

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// lastSamplesRead is how many of the last samples LastRecordEnd reads:
// samples are stored in the order their queries finished within a round,
// so the latest end lies among the last few.
const lastSamplesRead = 64

// LastRecordEnd returns the latest run-clock time of anything the file
// recorded (0 when it holds nothing timed): the last event chunk's latest
// return, the end of the last samples' queries, the last reading of the
// loss counters, and the latest process start or exit, library attach,
// kernel log line and marker. A recording that never wrote its stop record
// (killed with -9, its machine lost) ends there: its recorder was alive
// and writing until then, which the last call alone can understate by
// as long as the workload was quiet.
func (r *Reader) LastRecordEnd() (int64, error) {
	end, err := r.LastEventEnd()
	if err != nil {
		return 0, err
	}
	err = r.view(func(tx *bolt.Tx) error {
		for _, b := range []struct {
			name []byte
			n    int
			at   func([]byte) (int64, error)
		}{
			{bucketSamples, lastSamplesRead, sampleEnd},
			{bucketDrops, 1, timeOf},
		} {
			t, err := lastTimes(tx, b.name, b.n, b.at)
			if err != nil {
				return err
			}
			end = max(end, t)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return r.latestRecords(end)
}

// latestRecords returns the latest of end and the times of the records
// read whole (few, small): processes, libraries, kernel log, markers.
func (r *Reader) latestRecords(end int64) (int64, error) {
	procs, err := r.Processes()
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		end = max(end, p.Start)
		if p.Exit != nil {
			end = max(end, p.Exit.Time)
		}
	}
	libs, err := r.Libraries()
	if err != nil {
		return 0, err
	}
	for _, l := range libs {
		end = max(end, l.Time)
	}
	kmsg, err := r.KernelLog()
	if err != nil {
		return 0, err
	}
	for _, k := range kmsg {
		end = max(end, k.Time)
	}
	marks, err := r.Markers()
	if err != nil {
		return 0, err
	}
	for _, m := range marks {
		end = max(end, m.Time)
	}
	return end, nil
}

// lastTimes returns the latest time among the last n records of a bucket
// (0 when it is empty or absent: files of older versions).
func lastTimes(tx *bolt.Tx, name []byte, n int, at func([]byte) (int64, error)) (int64, error) {
	b := tx.Bucket(name)
	if b == nil {
		return 0, nil
	}
	var end int64
	c := b.Cursor()
	for k, v := c.Last(); k != nil && n > 0; k, v = c.Prev() {
		t, err := at(v)
		if err != nil {
			return 0, fmt.Errorf("%w: %s record: %v", ErrCorrupt, name, err)
		}
		end = max(end, t)
		n--
	}
	return end, nil
}

// sampleEnd is when a stored sample's query finished.
func sampleEnd(v []byte) (int64, error) {
	var s struct {
		End int64 `json:"end_ns"`
	}
	err := json.Unmarshal(v, &s)
	return s.End, err
}

// timeOf is a stored record's time_ns.
func timeOf(v []byte) (int64, error) {
	var s struct {
		Time int64 `json:"time_ns"`
	}
	err := json.Unmarshal(v, &s)
	return s.Time, err
}
