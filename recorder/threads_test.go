package recorder

import (
	"reflect"
	"testing"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/store"
)

func threadName(pid, tid uint32, at uint64, name string) []byte {
	return bpf.Thread{Pid: pid, Tid: tid, TsExit: at, Name: name}.Record()
}

// The name a thread had at its first failed call is kept in its process's
// record; a later failure of the same thread (renamed meanwhile) keeps the
// first name, another thread gets its own, an empty name and a bad record
// none.
func TestHandlerNamesThreadAtFirstFailure(t *testing.T) {
	h, q, _, _ := testHandler(t, nil)
	h.addRoot(store.Process{PID: 100, Args: []string{"train"}})
	h.run(&ring{recs: [][]byte{
		allocCall(t, 100, 1<<30, 2, -1, 1000),
		threadName(100, 100, 2000, "pt_autograd_0"),
		threadName(100, 100, 3000, "renamed"),
		threadName(100, 101, 4000, "worker-3"),
		threadName(100, 102, 5000, ""),
		threadName(100, 103, 6000, "cut")[:20],
	}})
	b := q.take(nil, 0)
	if q.stats.DecodeErrors != 1 {
		t.Errorf("%d decode errors, want 1 (the short record)", q.stats.DecodeErrors)
	}
	var got []store.Thread
	for _, p := range b.Processes {
		if p.PID == 100 {
			got = p.Threads
		}
	}
	want := []store.Thread{{TID: 100, Name: "pt_autograd_0", Time: 2000}, {TID: 101, Name: "worker-3", Time: 4000}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("threads %+v, want %+v", got, want)
	}
}
