package store

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Neighbours: processes NVML listed on a GPU that the recording does not
// follow, named from /proc once, when a stored sample first listed them,
// so that a budget can say whose memory they hold. Absent in files
// written before it existed (a reader then finds none).
//
//	neighbours  uint32 BE pid + uint64 BE time read -> JSON Neighbour

var bucketNeighbours = []byte("neighbours")

// Neighbour is a process NVML listed that the recording did not follow,
// as /proc showed it when the recorder looked.
type Neighbour struct {
	PID uint32 `json:"pid"`
	// Time is when /proc was read, on the run clock: just after the
	// sample that first listed the pid (in this segment).
	Time int64  `json:"time_ns"`
	Comm string `json:"comm,omitempty"`
	// Args is its command line (/proc/PID/cmdline), each argument as it
	// was, at most MaxNeighbourArgs bytes of it in all; ArgsCut says the
	// list was longer.
	Args    []string `json:"args,omitempty"`
	ArgsCut bool     `json:"args_cut,omitempty"`
	// UID is the process's real user id; User its name in the recorder's
	// /etc/passwd (absent when that file does not list it).
	UID  *uint32 `json:"uid,omitempty"`
	User string  `json:"user,omitempty"`
	// Cgroup is its cgroup v2 path; Container the container id the path
	// names (64 hex digits, when a container runtime made it); Pod the
	// Kubernetes pod, when the path names one.
	Cgroup    string `json:"cgroup,omitempty"`
	Container string `json:"container,omitempty"`
	Pod       *Pod   `json:"pod,omitempty"`
	// Error says why /proc could not be read (the process was gone).
	Error string `json:"error,omitempty"`
}

// MaxNeighbourArgs bounds the bytes of a neighbour's command line kept:
// a process the recording does not follow is named, not described.
const MaxNeighbourArgs = 1024

// putNeighbours writes a batch's neighbours, by pid and time read.
func putNeighbours(bk *bolt.Bucket, b *Batch) error {
	for i := range b.Neighbours {
		n := &b.Neighbours[i]
		if err := putJSON(bk, ProcessKey(n.PID, n.Time), n); err != nil {
			return err
		}
	}
	return nil
}

// Neighbours returns the processes NVML listed that the recording did not
// follow, by pid then time (none in a file written before they were
// recorded).
func (r *Reader) Neighbours() (out []Neighbour, err error) {
	err = r.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketNeighbours)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var n Neighbour
			if err := json.Unmarshal(v, &n); err != nil {
				return fmt.Errorf("%w: neighbours record: %v", ErrCorrupt, err)
			}
			out = append(out, n)
			return nil
		})
	})
	return out, err
}
