// Package store reads and writes run.db, the one file a recording produces.
//
// # Data model
//
// run.db is a bbolt database. Everything in it is on one clock: the run
// clock, CLOCK_MONOTONIC in nanoseconds, the clock of bpf_ktime_get_ns. The
// run record keeps one (clock, wall time) pair taken together at the start,
// so reports can show wall time. All sizes are bytes.
//
// The run and stop records each carry an Identity: host name, machine id,
// boot id, kernel, the job and rank of the workload, and a clock reading
// (CLOCK_MONOTONIC paired with CLOCK_REALTIME within a measured uncertainty,
// the kernel's adjtimex state, and chrony's or linuxptp's report when
// present). The stop reading's clock_error_ns bounds the wall-clock error of
// every event of the run: max(maxerror) + max(pairing uncertainty) + |the
// wall clock's step between the readings|, or null when the kernel marks the
// clock unsynchronized (docs/run-db.md).
//
// Top-level buckets, their keys and value encodings:
//
//	meta        "format"   the string "forensic-run" (anything else: a foreign file)
//	            "schema"   uint32 big-endian schema version (this package writes
//	                       SchemaVersion and reads every earlier one)
//	            "run"      JSON RunInfo: command, mode, options, clock pair, host
//	            "inventory" JSON Inventory: the platform, taken once per run
//	            "stop"     JSON StopInfo; absent when the recorder did not stop
//	                       cleanly (killed, crashed, disk full before it could write)
//	            "flight"   JSON FlightInfo: only in a segment of a flight-mode
//	                       recording (its sequence number and the retention)
//	            "committed" JSON Stats: only in a segment of a flight-mode
//	                       recording, the recorder's counters as of the last
//	                       commit, written in that commit's transaction
//	symbols     uint16 BE symbol id -> symbol name. Events carry ids; this
//	            bucket makes the file self-describing, so a newer forensic
//	            with a reordered symbol table still reads an old file.
//	libraries   uint32 BE sequence -> JSON Library: each libcuda file attached,
//	            its build id, which symbols of the table it exported or lacked, and
//	            which process mapped it and how long that process was held
//	            at the mapping
//	events      uint64 BE chunk sequence -> event chunk (binary, below)
//	samples     uint64 BE sequence -> JSON Sample: one NVML query on one GPU
//	processes   uint32 BE pid + uint64 BE first-seen time -> JSON Process,
//	            rewritten as the process forks, execs and exits, and as a thread
//	            of it fails for the first time (its name)
//	stacks      uint32 BE stack id -> JSON list of frames, {build_id, offset} or {ip}
//	kmsg        uint64 BE sequence -> JSON KernelLog (NVRM and Xid lines)
//	markers     uint64 BE sequence -> JSON Marker (forensic mark)
//	drops       uint64 BE sequence -> JSON Drops: the loss counters, read about
//	            once a second and at the stop, so a killed run keeps them
//	failures    uint64 BE sequence -> a one-event chunk: a copy of each failed
//	            call, so readers find failures without decoding every event
//	files       build id (hex) -> JSON File: the file a build id of the stored
//	            stacks belongs to, resolved when the stack was stored (absent in
//	            files written before it existed)
//	named       uint32 BE pid + uint32 BE tid + uint64 BE return time -> 0x01 and
//	            the deflated JSON of a NamedStack (named.go): the stack of a
//	            captured call, unwound and named by the recorder (schema 3)
//	captures    the same key -> a stack capture (binary, stacks.go): registers,
//	            mappings and user stack copied at the call's return; only
//	            under --keep-stack-bytes since schema 3
//	pystacks    the same key -> JSON PyStack: the Python frames of that call
//	            as read (only under --keep-stack-bytes since schema 3)
//	pycode      uint32 BE pid + uint64 BE code address + uint64 BE copy time ->
//	            JSON PyCode: a code object as a capture copied it (likewise)
//	stackrefs   uint64 BE sequence -> a chunk of StackRefs (binary, stacks.go):
//	            calls at a call site captured before, each naming the capture
//	neighbours  uint32 BE pid + uint64 BE time read -> JSON Neighbour
//	            (neighbours.go): a process NVML listed that the recording
//	            does not follow, named from /proc (absent in older files)
//
// The stack buckets exist only in files written since they were recorded;
// a reader finds no stacks in older files. A schema-2 file has raw
// captures and no named stacks: readers name them (package stackname).
//
// # Event chunks
//
// Call events dominate the file, so they are stored in chunks of about 1 KiB
// (at most 127 events; a commit writes as many as it needs), each a varint
// stream: a format byte, the event count, then
// per event the symbol id, pid, tid-pid, the exit time as a delta from the
// previous event's, the duration, the result, depth, flags, a presence mask
// and the present fields. A typical allocation event costs about 30 bytes.
// Presence bits 0-8 are cuda.Field's; bit 8 (schema 2) is an array
// argument: the elements read, then the access descriptors among them
// (location type, device, flags each). Bits 12-14 are the event's context,
// stack and device. Event flags are the probes' call flags, bit for bit
// (EventFrozen, ...).
// Events are stored in the order the ring buffer delivered them: exact per
// thread, and across CPUs nearly in time order; readers that need time order
// compare times rather than positions.
//
// # Durability
//
// The writer commits one bbolt transaction per flush (by default every
// 100 ms): data committed survives the recorder being killed. A full disk
// stops writing while there is still room for the stop record (see
// Writer.Reserve), so the file stays valid and says how it ended.
//
// # Errors
//
// Open returns one of the sentinel errors in errors.go for files that are
// not a readable run: missing, empty, not bbolt, another program's bbolt
// file, a newer schema, or locked by a live recorder.
package store
