// Package eventlog writes one JSON line per failed CUDA driver call, for
// log shippers (Fluent Bit, Vector, Promtail/Alloy for Loki): the event
// stream of `forensic record --events FILE|-`. Each line is a complete
// JSON object ending in a newline, written with one Write, so that a
// shipper tailing the file never reads half an event. The fields are
// listed in docs/flight.md.
package eventlog

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// KindFailedCall is the event field of a failed call's line.
const KindFailedCall = "failed_call"

// Failure is one failed call, as its event line says it.
type Failure struct {
	// Time is the call's wall-clock time (RFC 3339, nanoseconds, UTC).
	Time time.Time `json:"time"`
	// Event is KindFailedCall.
	Event string `json:"event"`
	// Run is the recording's run id.
	Run string `json:"run"`
	// Class is the symbol's class: allocation, host-allocation, mapping,
	// context, free, other.
	Class  string `json:"class"`
	Symbol string `json:"symbol"`
	// Result is the CUresult name; ResultCode its number.
	Result     string `json:"result"`
	ResultCode int32  `json:"result_code"`
	// Size is the bytes the call asked for, when it names a size.
	Size *uint64 `json:"size_bytes,omitempty"`
	PID  uint32  `json:"pid"`
	TID  uint32  `json:"tid"`
	// Command is the process's executable name (comm, or the
	// executable's base name).
	Command string `json:"command,omitempty"`
	// Namespace and Pod name the Kubernetes pod, when known.
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	// GPU is the NVML index of the call's device, -1 when not known;
	// GPUUUID its UUID.
	GPU     int    `json:"gpu"`
	GPUUUID string `json:"gpu_uuid,omitempty"`
}

// Writer writes event lines to an io.Writer. It is safe for concurrent
// use.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// New returns a Writer of event lines to w.
func New(w io.Writer) *Writer { return &Writer{w: w} }

// Failed writes a failed call's line (its Event is set to
// KindFailedCall).
func (w *Writer) Failed(f Failure) error {
	f.Event = KindFailedCall
	f.Time = f.Time.UTC()
	b, err := json.Marshal(&f)
	if err != nil {
		return fmt.Errorf("event line: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(append(w.buf[:0], b...), '\n')
	if _, err := w.w.Write(w.buf); err != nil {
		return fmt.Errorf("event line: %w", err)
	}
	return nil
}
