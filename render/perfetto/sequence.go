package perfetto

import (
	"bufio"

	"google.golang.org/protobuf/encoding/protowire"
)

// packetWriter writes trace packets, each as a Trace.packet field, and
// keeps what every packet sequence shares: the interning tables.
//
// A packet sequence (trusted_packet_sequence_id) is what one writer
// thread would emit in Perfetto's own SDK: interned names and packet
// defaults are scoped to it. The exporter uses one sequence per recorded
// thread, one for the NVML samples and one for everything else.
type packetWriter struct {
	w      *bufio.Writer
	bytes  int64 // written so far
	nextID uint32
	// Interning: an id per string, trace-wide (an id never names two
	// strings), per table; each sequence notes which ids it has sent.
	tables [internTables]map[string]uint64
	// Scratch buffers reused by every packet.
	pkt, ev, intern, hdr []byte
}

// The interning tables used.
const (
	internNames      = iota // InternedData.event_names
	internCategories        // InternedData.event_categories
	internAnnNames          // InternedData.debug_annotation_names
	internTables
)

var internField = [internTables]protowire.Number{fInternNames, fInternCategories, fInternAnnNames}

// sequence is one packet sequence.
type sequence struct {
	id uint32
	// incremental: timestamps are deltas on the sequence's clockDelta;
	// last is that clock's value (the time of the latest packet on it).
	incremental bool
	last        int64
	sent        [internTables][]bool // by iid: interned on this sequence
}

func newPacketWriter(w *bufio.Writer) *packetWriter {
	pw := &packetWriter{w: w, nextID: 1}
	for i := range pw.tables {
		pw.tables[i] = map[string]uint64{}
	}
	return pw
}

// newSequence starts a packet sequence. Its first packet clears the
// sequence's state and sets its defaults: the track events go to track
// (when non-zero) and timestamps are deltas on an incremental clock that
// starts at base (incremental), or absolute CLOCK_MONOTONIC. The first
// sequence also names CLOCK_MONOTONIC the trace's clock (primary).
func (pw *packetWriter) newSequence(base int64, track uint64, incremental, primary bool) (*sequence, error) {
	s := &sequence{id: pw.nextID, incremental: incremental, last: base}
	pw.nextID++
	var d []byte
	clock := uint64(clockMonotonic)
	if incremental {
		clock = clockDelta
	}
	d = appendVarintField(d, fDefaultsClockID, clock)
	if track != 0 {
		d = appendBytesField(d, fDefaultsTrackEvent, appendVarintField(nil, fDefaultsTrackUUID, track))
	}
	var cs []byte
	mono := appendVarintField(appendVarintField(nil, fClockID, clockMonotonic), fClockTime, uint64(base))
	cs = appendBytesField(cs, fClocks, mono)
	if incremental {
		delta := appendVarintField(nil, fClockID, clockDelta)
		delta = appendVarintField(delta, fClockTime, uint64(base))
		delta = appendVarintField(delta, fClockIncrease, 1)
		cs = appendBytesField(cs, fClocks, delta)
	}
	if primary {
		cs = appendVarintField(cs, fPrimaryClock, clockMonotonic)
	}
	p := appendVarintField(nil, fSequenceID, uint64(s.id))
	p = appendVarintField(p, fSequenceFlags, seqStateCleared)
	p = appendBytesField(p, fPacketDefaults, d)
	p = appendBytesField(p, fClockSnapshot, cs)
	return s, pw.write(p)
}

// iid returns the interned id of name in table t, and queues its
// definition for the next packet on s when s has not sent it yet.
func (pw *packetWriter) iid(s *sequence, t int, name string) uint64 {
	id, ok := pw.tables[t][name]
	if !ok {
		id = uint64(len(pw.tables[t]) + 1)
		pw.tables[t][name] = id
	}
	sent := s.sent[t]
	if id < uint64(len(sent)) && sent[id] {
		return id
	}
	for uint64(len(sent)) <= id {
		sent = append(sent, false)
	}
	sent[id] = true
	s.sent[t] = sent
	var e [96]byte
	entry := appendVarintField(e[:0], fInternIID, id)
	entry = appendStringField(entry, fInternName, name)
	pw.intern = appendBytesField(pw.intern, internField[t], entry)
	return id
}

// startPacket begins a packet on s at time t in the scratch buffer: the
// timestamp (a delta on an incremental sequence; absolute CLOCK_MONOTONIC
// for a time before the sequence's latest, which a delta cannot say) and
// the sequence id.
func (pw *packetWriter) startPacket(s *sequence, t int64) []byte {
	p := pw.pkt[:0]
	switch {
	case s.incremental && t >= s.last:
		p = appendVarintField(p, fTimestamp, uint64(t-s.last))
		s.last = t
	case s.incremental:
		p = appendVarintField(p, fTimestamp, uint64(t))
		p = appendVarintField(p, fTimestampClockID, clockMonotonic)
	default:
		p = appendVarintField(p, fTimestamp, uint64(t))
	}
	return appendVarintField(p, fSequenceID, uint64(s.id))
}

// finishPacket adds the queued interned data and the track event body ev
// (field num: fTrackEvent or fTrackDescriptor) to packet p and writes it.
//
// Only a packet that defines interned data says SEQ_NEEDS_INCREMENTAL_STATE:
// the flag lets a reader skip packets after a loss in the trace buffer,
// which a file written whole never has, and trace_processor applies a
// sequence's defaults and interned names to every packet on it with or
// without the flag; leaving it out saves two bytes per packet.
func (pw *packetWriter) finishPacket(p []byte, num protowire.Number, ev []byte) error {
	if len(pw.intern) > 0 {
		p = appendBytesField(p, fInternedData, pw.intern)
		p = appendVarintField(p, fSequenceFlags, seqNeedsState)
		pw.intern = pw.intern[:0]
	}
	p = appendBytesField(p, num, ev)
	pw.pkt = p
	return pw.write(p)
}

// write writes one packet body as a Trace.packet field.
func (pw *packetWriter) write(p []byte) error {
	h := protowire.AppendTag(pw.hdr[:0], fTracePacket, protowire.BytesType)
	h = protowire.AppendVarint(h, uint64(len(p)))
	pw.hdr = h
	if _, err := pw.w.Write(h); err != nil {
		return err
	}
	_, err := pw.w.Write(p)
	pw.bytes += int64(len(h) + len(p))
	return err
}

// descriptor writes a TrackDescriptor packet on s (no timestamp: a
// descriptor holds for the whole trace).
func (pw *packetWriter) descriptor(s *sequence, desc []byte) error {
	p := appendVarintField(pw.pkt[:0], fSequenceID, uint64(s.id))
	return pw.finishPacket(p, fTrackDescriptor, desc)
}
