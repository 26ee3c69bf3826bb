package store

import (
	"encoding/binary"

	bolt "go.etcd.io/bbolt"
)

// recordKind is one kind of record a Batch carries: the bucket Commit
// writes it to, how many the batch holds, how to empty it keeping its
// storage, and how to write it. Len, Reset and Commit all follow
// batchKinds: adding a kind of record is a Batch field and one row there.
type recordKind struct {
	name   string
	bucket []byte
	count  func(*Batch) int
	// rides: the kind is stored with a batch's other records, never on
	// its own (Len leaves it out, so a batch of it alone is not written).
	rides bool
	reset func(*Batch)
	// put writes the batch's records of this kind into bk, the kind's
	// bucket (made when missing); it is called only when count > 0.
	put func(bk *bolt.Bucket, b *Batch) error
}

// batchKinds are the kinds of record, in the order Commit writes them.
var batchKinds = []recordKind{
	{name: "events", bucket: bucketEvents, count: func(b *Batch) int { return len(b.Events) },
		reset: func(b *Batch) { b.Events = b.Events[:0] }, put: putEvents},
	{name: "samples", bucket: bucketSamples, count: func(b *Batch) int { return len(b.Samples) },
		reset: func(b *Batch) { b.Samples = b.Samples[:0] }, put: putSamples},
	{name: "processes", bucket: bucketProcesses, count: func(b *Batch) int { return len(b.Processes) },
		reset: func(b *Batch) { b.Processes = b.Processes[:0] }, put: putProcesses},
	{name: "stacks", bucket: bucketStacks, count: func(b *Batch) int { return len(b.Stacks) },
		reset: func(b *Batch) { clear(b.Stacks) }, put: putFrames},
	{name: "kmsg", bucket: bucketKmsg, count: func(b *Batch) int { return len(b.Kmsg) },
		reset: func(b *Batch) { b.Kmsg = b.Kmsg[:0] }, put: func(bk *bolt.Bucket, b *Batch) error { return appendJSON(bk, b.Kmsg) }},
	{name: "markers", bucket: bucketMarkers, count: func(b *Batch) int { return len(b.Markers) },
		reset: func(b *Batch) { b.Markers = b.Markers[:0] }, put: func(bk *bolt.Bucket, b *Batch) error { return appendJSON(bk, b.Markers) }},
	{name: "drops", bucket: bucketDrops, count: func(b *Batch) int { return len(b.Drops) },
		reset: func(b *Batch) { b.Drops = b.Drops[:0] }, put: func(bk *bolt.Bucket, b *Batch) error { return appendJSON(bk, b.Drops) }},
	{name: "libraries", bucket: bucketLibraries, count: func(b *Batch) int { return len(b.Libraries) },
		reset: func(b *Batch) { b.Libraries = b.Libraries[:0] }, put: putLibraries},
	{name: "files", bucket: bucketFiles, count: func(b *Batch) int { return len(b.Files) },
		reset: func(b *Batch) { b.Files = b.Files[:0] }, put: putFiles},
	{name: "inventory", bucket: bucketMeta, count: func(b *Batch) int { return one(b.Inventory != nil) },
		reset: func(b *Batch) { b.Inventory = nil },
		put:   func(bk *bolt.Bucket, b *Batch) error { return putJSON(bk, keyInventory, b.Inventory) }},
	{name: "counts", bucket: bucketMeta, count: func(b *Batch) int { return one(b.Counts != nil) }, rides: true,
		reset: func(b *Batch) { b.Counts = nil }, put: putCounts},
	{name: "named", bucket: bucketNamed, count: func(b *Batch) int { return len(b.Named) },
		reset: func(b *Batch) { b.Named = b.Named[:0] }, put: putNamed},
	{name: "captures", bucket: bucketCaptures, count: func(b *Batch) int { return len(b.Captures) },
		reset: func(b *Batch) { b.Captures = b.Captures[:0] }, put: putCaptures},
	{name: "pystacks", bucket: bucketPyStacks, count: func(b *Batch) int { return len(b.PyStacks) },
		reset: func(b *Batch) { b.PyStacks = b.PyStacks[:0] }, put: putPyStacks},
	{name: "pycode", bucket: bucketPyCode, count: func(b *Batch) int { return len(b.PyCodes) },
		reset: func(b *Batch) { b.PyCodes = b.PyCodes[:0] }, put: putPyCodes},
	{name: "stackrefs", bucket: bucketStackRefs, count: func(b *Batch) int { return len(b.StackRefs) },
		reset: func(b *Batch) { b.StackRefs = b.StackRefs[:0] }, put: putStackRefs},
}

func one(ok bool) int {
	if ok {
		return 1
	}
	return 0
}

// putBatch writes every kind of record the batch holds, in one
// transaction.
func putBatch(tx *bolt.Tx, b *Batch) error {
	for _, k := range batchKinds {
		if k.count(b) == 0 {
			continue
		}
		bk, err := tx.CreateBucketIfNotExists(k.bucket)
		if err != nil {
			return err
		}
		if err := k.put(bk, b); err != nil {
			return err
		}
	}
	return nil
}

// putEvents writes the events in chunks and, since a reader looks for
// failed calls first, a copy of each failed call in the failures index,
// so it finds them without decoding every event.
func putEvents(eb *bolt.Bucket, b *Batch) error {
	eb.FillPercent = 1 // append-only keys
	for _, chunk := range EncodeChunks(b.Events) {
		seq, _ := eb.NextSequence() // fails only in a read-only tx
		if err := eb.Put(u64key(seq), chunk); err != nil {
			return err
		}
	}
	fb := eb.Tx().Bucket(bucketFailures)
	fb.FillPercent = 1
	for i := range b.Events {
		if b.Events[i].Result != 0 {
			seq, _ := fb.NextSequence()
			if err := fb.Put(u64key(seq), EncodeChunk(b.Events[i:i+1])); err != nil {
				return err
			}
		}
	}
	return nil
}

// putSamples writes the samples, assigning each its sequence number.
func putSamples(sb *bolt.Bucket, b *Batch) error {
	sb.FillPercent = 1
	for i := range b.Samples {
		s := &b.Samples[i]
		s.Seq, _ = sb.NextSequence()
		if err := putJSON(sb, u64key(s.Seq), s); err != nil {
			return err
		}
	}
	return nil
}

// putProcesses inserts or replaces each process by (PID, Start).
func putProcesses(pb *bolt.Bucket, b *Batch) error {
	for i := range b.Processes {
		p := &b.Processes[i]
		if err := putJSON(pb, ProcessKey(p.PID, p.Start), p); err != nil {
			return err
		}
	}
	return nil
}

// putFrames writes the stacks' frames by stack id.
func putFrames(stb *bolt.Bucket, b *Batch) error {
	for id, frames := range b.Stacks {
		if err := putJSON(stb, binary.BigEndian.AppendUint32(nil, uint32(id)), frames); err != nil {
			return err
		}
	}
	return nil
}

// putLibraries appends the libraries under a uint32 sequence.
func putLibraries(lb *bolt.Bucket, b *Batch) error {
	for _, l := range b.Libraries {
		seq, _ := lb.NextSequence()
		if err := putJSON(lb, binary.BigEndian.AppendUint32(nil, uint32(seq)), l); err != nil {
			return err
		}
	}
	return nil
}

// putFiles writes the files by build id: a build id stored again
// replaces its record.
func putFiles(fb *bolt.Bucket, b *Batch) error {
	for i := range b.Files {
		if err := putJSON(fb, []byte(b.Files[i].BuildID), &b.Files[i]); err != nil {
			return err
		}
	}
	return nil
}
