package report

// Headroom is the least free memory of one GPU view at any moment of the
// run: how close the run came to exhausting it. It comes from the NVML
// samples of that view, corrected between samples by the traced calls
// (a sample taken before and one after a short burst of allocations
// both miss the burst; the traced calls do not).
type Headroom struct {
	// GPU is the NVML index; GPUUUID its UUID when the inventory has it.
	GPU     int    `json:"gpu"`
	GPUUUID string `json:"gpu_uuid,omitempty"`
	// MIG is the MIG instance, for a framebuffer sampled per instance.
	MIG *int `json:"mig_index,omitempty"`
	// View is "framebuffer" or "bar1". The two are never combined.
	View string `json:"view"`
	// LeastFree is the least free memory found, in bytes; Total the
	// view's total in the sample it comes from.
	LeastFree uint64 `json:"least_free_bytes"`
	Total     uint64 `json:"total_bytes"`
	// Percent is LeastFree as a percentage of Total.
	Percent float64 `json:"least_free_percent"`
	// AtNS is when (run clock): the return of Call when the least free
	// lay between samples, else the start of the sample that read it.
	AtNS int64  `json:"at_ns"`
	Wall string `json:"wall_time,omitempty"`
	// Source is "sample" (an NVML reading as read) or "sample and traced
	// calls" (a reading corrected by the traced calls made since or
	// before it).
	Source string `json:"source"`
	// Exact says the figure is the free memory at that moment to the
	// byte. When false it is a bound, and Note says why: memory no traced
	// call sized changed near it (a context, a process not recorded,
	// a release of unknown size), a traced call overlapped the sample's
	// query, or only one sample lies beside it.
	Exact bool   `json:"exact"`
	Note  string `json:"note,omitempty"`
	// Call is the traced call that brought free memory there (for a
	// reading: the call that took traced usage to the level it read, when
	// that was the highest since the sample before), with its stack when
	// one was captured; nil when none did.
	Call *Failure `json:"call"`
}
