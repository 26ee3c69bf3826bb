package analyze

import "github.com/retrivium/forensic/store"

// Source is a recording as the analysis reads it: one run.db
// (*store.Reader), or the segments of one recording read as one (flight
// mode). Its methods are the store reader's.
type Source interface {
	Path() string
	Schema() uint32
	Run() store.RunInfo
	SymbolNames() []string
	Stop() (*store.StopInfo, error)
	Inventory() (*store.Inventory, error)
	Processes() ([]store.Process, error)
	// Neighbours are the processes NVML listed that the recording did not
	// follow, named from /proc (none in files written before).
	Neighbours() ([]store.Neighbour, error)
	Libraries() ([]store.Library, error)
	KernelLog() ([]store.KernelLog, error)
	Markers() ([]store.Marker, error)
	Drops() ([]store.Drops, error)
	Events(fn func(*store.Event) error) error
	Failures(fn func(*store.Event) error) error
	Samples(fn func(*store.Sample) error) error
	// Readings is Samples with only what each sample read (a lighter
	// pass, for the headroom).
	Readings(fn func(*store.Reading) error) error
	Stack(id int32) ([]store.Frame, error)
	// Files are the files the recorder resolved stack build ids to.
	Files() ([]store.File, error)
	LastEventEnd() (int64, error)
	LastRecordEnd() (int64, error)
}

var _ Source = (*store.Reader)(nil)
