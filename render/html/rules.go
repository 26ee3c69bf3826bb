package html

// The analysis names the rule of evidence that decided how a value was
// used (report.Evidence.Rule). The page cannot link to forensic's
// docs/rules.md (it is read away from the repository), so it carries each
// rule's name with a one-line description: as a tooltip on the name and
// in a legend under the evidence that names it.

// rule is one rule of evidence and what it says, in one line.
type rule struct{ Name, Line string }

// rules are the rules of evidence, by the names of docs/rules.md's table
// and in its order, each said in one line (a test holds the names to the
// table).
func rules() []rule {
	return []rule{
		{"views-apart", "Framebuffer and BAR1 are different memory views: their values are never added, subtracted or compared; " +
			"free BAR1 is never room for an allocation, and free framebuffer never helps a mapping."},
		{"room-is-not-reserved", "An allocation that failed although the framebuffer had room is not blamed on reserved memory or " +
			"other processes, which NVML's free already leaves out: fragmentation, a per-process limit or an injected fault refused it."},
		{"bar1-only-on-aperture-paths", "BAR1 evidence counts only when the failed operation's path can use the aperture: " +
			"an IPC open or pool import of another process's memory, peer access, a third-party device's mapping, " +
			"or an access grant to a device other than the memory's owner."},
		{"attribution-by-result-code", "The attribution follows the operation that failed and what its result code means: " +
			"a resource or mapping code makes an allocation or mapping problem; an initialization, device, context or " +
			"permission code is not a memory problem; a sticky or unknown code leaves the evidence missing (sticky: no capacity)."},
		{"hidden-failure", "The first recorded failure is the first only if nothing could hide an earlier one: no call lost " +
			"or unfollowed before it, its process not already running when recording started, and no process that " +
			"ended badly before it without a failed call of its own."},
		{"reference-sample", "A request is judged against the one view that can hold it, on its GPU (its MIG instance for " +
			"framebuffer), in the sample the failure triggered, else the nearest usable one before it within three " +
			"sampling intervals (at least 300 ms)."},
		{"reconciled-with-traced-calls", "A sample a moment after (or before) the failure is corrected by what the " +
			"recorded processes allocated and released in between; a traced call overlapping the query makes a range; " +
			"a release the record cannot size (a late process's exit) in between leaves it open on that side."},
		{"peer-grant-cost", "A grant of a range to k peers through the owner's BAR1 aperture costs between one mapping of " +
			"the range and k, the driver's per-peer cost being unrecorded: BAR1 is judged exhausted or with room only when " +
			"both agree, else unknown."},
		{"recovered", "A failure is recovered when the same process later succeeded at the same operation on the same " +
			"device for at least the same size (a release: of the same handle); the first unrecovered one is judged as fully and leads the " +
			"verdict. With all recovered, a process that still ended badly leaves the evidence missing."},
		{"interrupted-is-not-crashed", "A run or workload stopped by SIGINT, SIGTERM or SIGHUP was interrupted, not " +
			"crashed: with no failed call, the attribution is none."},
		{"unknown-is-not-zero", "A value NVML could not read (a failed or unsupported query) is shown as unavailable " +
			"with its status, never as 0."},
		{"pool-limit", "An allocation from a memory pool created with a maxSize is judged against that limit first: " +
			"the pool's live traced allocations plus the request over maxSize is pool-exhausted, whatever the framebuffer had free."},
		{"least-free-between-samples", "The least free memory of a view is the least of its samples and, between two " +
			"samples, of each corrected by the traced calls since; exact only when both samples agree with the traced calls " +
			"and nothing of unknown size came between, else a bound on the side that leaves least free."},
		{"job-scope", "On a shared node, a selected job's verdict is its own processes' first failure; other jobs' " +
			"processes stay in the memory views as neighbours, never the subject, and their exits are not its gaps."},
	}
}

// ruleLine is the one-line description of the rule named name, or "" for
// a name the page does not know (a newer analysis).
func ruleLine(name string) string {
	for _, r := range rules() {
		if r.Name == name {
			return r.Line
		}
	}
	return ""
}

// rulesUsed are the rules the evidence rows name, once each, in the order
// of docs/rules.md; a name the page does not know comes last, said as
// such.
func rulesUsed(rows []evidenceRow) []rule {
	named := map[string]bool{}
	for _, r := range rows {
		if r.Rule != "" {
			named[r.Rule] = true
		}
	}
	var out []rule
	for _, r := range rules() {
		if named[r.Name] {
			out = append(out, r)
			delete(named, r.Name)
		}
	}
	for _, r := range rows {
		if named[r.Rule] {
			out = append(out, rule{Name: r.Rule, Line: "a rule this page does not describe: see forensic's docs/rules.md"})
			delete(named, r.Rule)
		}
	}
	return out
}
