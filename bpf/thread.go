package bpf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unsafe"
)

// KindThread (enum fx_kind) is the record that names the thread of a
// failed call, sent right after the call's record.
const KindThread = uint8(forensicFxKindFX_KIND_THREAD)

// threadSize is the length of a thread-name record (struct fx_thread).
const threadSize = int(unsafe.Sizeof(forensicFxThread{}))

// Thread is the name a thread had at the return of one of its failed
// calls: its comm, as pthread_setname_np or prctl(PR_SET_NAME) set it.
type Thread struct {
	Pid, Tid uint32
	TsExit   uint64 // the failed call's return, as in its call record
	Name     string
}

// DecodeThread interprets a thread-name record. It accepts any bytes: a
// record too short for the layout is an error, and a name the kernel
// left without its NUL ends at the record's end.
func DecodeThread(rec []byte, t *Thread) error {
	if len(rec) < threadSize || rec[0] != KindThread {
		return fmt.Errorf("%w: thread record of %d bytes", ErrShortRecord, len(rec))
	}
	var h forensicFxThread // for its offsets only
	le := binary.LittleEndian
	name := rec[unsafe.Offsetof(h.Comm) : int(unsafe.Offsetof(h.Comm))+len(h.Comm)]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	*t = Thread{Pid: le.Uint32(rec[unsafe.Offsetof(h.Pid):]), Tid: le.Uint32(rec[unsafe.Offsetof(h.Tid):]),
		TsExit: le.Uint64(rec[unsafe.Offsetof(h.TsExit):]), Name: string(name)}
	return nil
}

// Record lays the thread's name out as the probe writes it, the inverse
// of DecodeThread (tests build ring records with it); a name longer than
// the record holds is cut.
func (t Thread) Record() []byte {
	var h forensicFxThread // for its offsets only
	le := binary.LittleEndian
	rec := make([]byte, threadSize)
	rec[0] = KindThread
	le.PutUint32(rec[unsafe.Offsetof(h.Pid):], t.Pid)
	le.PutUint32(rec[unsafe.Offsetof(h.Tid):], t.Tid)
	le.PutUint64(rec[unsafe.Offsetof(h.TsExit):], t.TsExit)
	copy(rec[unsafe.Offsetof(h.Comm):threadSize], t.Name)
	return rec
}
