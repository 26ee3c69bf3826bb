package report

// The timeline is what the HTML report draws. It is built by the analysis
// pass, in fixed sizes, so it scales with the recording, not with the
// number of calls: a process with more than MaxMarks calls is drawn as a
// histogram of CallBins time bins, every sample series is reduced to
// SeriesBuckets time buckets that keep their minimum and maximum (so peaks
// survive), and failed calls are kept one by one up to MaxFailureMarks
// (beyond that they are binned too, and BinnedFailures says how many).
const (
	MaxMarks        = 2000
	CallBins        = 480
	SeriesBuckets   = 1000
	MaxFailureMarks = 20000
	// LeadCalls is how many calls of the failing process up to the first
	// failure the timeline keeps.
	LeadCalls = 16
)

// Timeline is the recording on one time axis: the calls of each process
// and, per GPU, the sampled memory views and the traced live bytes.
type Timeline struct {
	StartNS, EndNS int64
	Processes      []ProcessTrack
	GPUs           []GPUTrack
	// DrawnFailures and BinnedFailures count failed calls kept as marks
	// and failed calls only counted in bins.
	DrawnFailures  int
	BinnedFailures uint64
	// LiveCapped says the traced series stopped because too many
	// allocations were live at once to follow.
	LiveCapped bool
	// Lead are the last calls of the first failure's process up to and
	// including it, oldest first (at most LeadCalls).
	Lead []CallMark
}

// CallMark is one call drawn as its own mark.
type CallMark struct {
	StartNS, EndNS int64
	PID, TID       uint32
	Symbol         string
	Operation      string
	Result         int32
	ResultName     string
	Size           *uint64
	CUDADevice     int32
	// GPU is the NVML index of the call's GPU (the one Live is of); nil
	// when not known.
	GPU *int
	// Live is the traced device allocations on the call's GPU right after
	// it; nil when not known.
	Live *uint64
	// First marks the first failure; Unrecovered the first failure the
	// process did not recover from, when the first was recovered.
	First, Unrecovered bool
}

// ProcessTrack is one process row of the timeline.
type ProcessTrack struct {
	PID           uint32
	Name          string
	Calls, Failed uint64
	// Marks are every call, oldest first; nil when the process made more
	// than MaxMarks calls (Bins then shows them).
	Marks []CallMark
	// Bins count calls per time bin (CallBins of them), always.
	Bins []uint32
	// Fails are failed calls kept as marks; FailBins counts the others
	// per bin (nil when none were binned).
	Fails    []CallMark
	FailBins []uint32
}

// GPUTrack is what the samples and traced calls say about one GPU.
type GPUTrack struct {
	Index int
	UUID  string
	Name  string
	// Framebuffer and BAR1 are drawn in separate panels with their own
	// axes: they are different views and are never stacked or added.
	Framebuffer ViewSeries
	BAR1        ViewSeries
	// Traced is the device memory the recorded processes allocated
	// through traced calls and had not freed; nil when none.
	Traced *Series
	// MIGSamples counts MIG-scope samples (in the table, not drawn).
	MIGSamples int
}

// ViewSeries is one memory view of one GPU over the run.
type ViewSeries struct {
	// Used, Free and Reserved are nil when no sample had the field.
	Used, Free, Reserved *Series
	// Total is the largest total seen (configuration, not capacity).
	Total uint64
	// API names the NVML function and structure version.
	API string
	// Unusable are the times of samples that had no values (bounded), and
	// Status counts them per NVML status.
	Unusable []int64
	Status   map[string]int
}

// Series is a value series reduced to a fixed number of time buckets.
type Series struct {
	Buckets []Bucket
	Points  int
	Gaps    int
	Peak    uint64
}

// Bucket is one time bucket of a series: its lowest and highest value and
// when they were seen, and how many unusable samples fell in it.
type Bucket struct {
	N, Gaps    int32
	MinT, MaxT int64
	Min, Max   uint64
}
