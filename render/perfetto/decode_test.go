package perfetto

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/retrivium/forensic/render/perfetto/traceproto"
)

// The tests read what Trace wrote as Perfetto's trace processor does,
// through the generated types: per-sequence state (cleared flag,
// defaults, interned names, incremental clock), timestamps resolved to
// CLOCK_MONOTONIC, slices built from begin/end pairs per track.

type dArgs map[string]any

type dSlice struct {
	track    uint64
	name     string
	cats     []string
	ts, dur  int64
	depth    int // nesting level on its track
	args     dArgs
	parentIx int // index of the enclosing slice, -1 at top level
}

type dInstant struct {
	track uint64
	name  string
	cats  []string
	ts    int64
	args  dArgs
}

type dPoint struct {
	ts    int64
	value int64
}

type decoded struct {
	primaryClock pb.BuiltinClock
	tracks       map[uint64]*pb.TrackDescriptor
	slices       []dSlice
	instants     []dInstant
	counters     map[uint64][]dPoint
	packets      int
	absolute     int // packets on an incremental sequence written with an absolute time
}

type dSeq struct {
	cleared  bool
	defaults *pb.TracePacketDefaults
	names    map[uint64]string
	cats     map[uint64]string
	annNames map[uint64]string
	delta    *int64 // the incremental clock's value, when the sequence has one
}

type openSlice struct{ ix int }

// decodeTrace decodes a whole trace and fails the test on anything a
// reader could not resolve.
func decodeTrace(t testing.TB, data []byte) *decoded {
	t.Helper()
	var tr pb.Trace
	if err := proto.Unmarshal(data, &tr); err != nil {
		t.Fatalf("trace does not decode: %v", err)
	}
	d := &decoded{tracks: map[uint64]*pb.TrackDescriptor{}, counters: map[uint64][]dPoint{}}
	seqs := map[uint32]*dSeq{}
	open := map[uint64][]openSlice{}
	for i, p := range tr.GetPacket() {
		d.packets++
		if err := noUnknown(p.ProtoReflect()); err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		if err := d.packet(p, seqs, open); err != nil {
			t.Fatalf("packet %d: %v\n%v", i, err, p)
		}
	}
	for track, o := range open {
		if len(o) > 0 {
			t.Errorf("track %#x: %d slices never end", track, len(o))
		}
	}
	for _, s := range d.slices {
		if d.tracks[s.track] == nil {
			t.Errorf("slice %q on undescribed track %#x", s.name, s.track)
		}
	}
	return d
}

func (d *decoded) packet(p *pb.TracePacket, seqs map[uint32]*dSeq, open map[uint64][]openSlice) error {
	if p.OptionalTrustedPacketSequenceId == nil {
		return fmt.Errorf("packet without a sequence id")
	}
	s := seqs[p.GetTrustedPacketSequenceId()]
	if s == nil {
		s = &dSeq{names: map[uint64]string{}, cats: map[uint64]string{}, annNames: map[uint64]string{}}
		seqs[p.GetTrustedPacketSequenceId()] = s
	}
	if p.GetSequenceFlags()&uint32(pb.TracePacket_SEQ_INCREMENTAL_STATE_CLEARED) != 0 {
		s.cleared = true
	}
	if !s.cleared {
		return fmt.Errorf("sequence %d used before its state was cleared", p.GetTrustedPacketSequenceId())
	}
	if p.TracePacketDefaults != nil {
		s.defaults = p.TracePacketDefaults
	}
	if in := p.GetInternedData(); in != nil {
		intern(s.names, in.GetEventNames())
		intern(s.cats, in.GetEventCategories())
		intern(s.annNames, in.GetDebugAnnotationNames())
	}
	switch data := p.Data.(type) {
	case *pb.TracePacket_ClockSnapshot:
		return d.clockSnapshot(s, data.ClockSnapshot)
	case *pb.TracePacket_TrackDescriptor:
		td := data.TrackDescriptor
		if d.tracks[td.GetUuid()] != nil {
			return fmt.Errorf("track %#x described twice", td.GetUuid())
		}
		d.tracks[td.GetUuid()] = td
		return nil
	case *pb.TracePacket_TrackEvent:
		ts, err := d.timestamp(p, s)
		if err != nil {
			return err
		}
		return d.trackEvent(s, data.TrackEvent, ts, open)
	}
	return fmt.Errorf("unexpected packet %T", p.Data)
}

// noUnknown fails on any field the generated types do not know: each
// field the writer puts down by number must be one of trace.proto's.
func noUnknown(m protoreflect.Message) error {
	if u := m.GetUnknown(); len(u) > 0 {
		return fmt.Errorf("%s has %d bytes of unknown fields", m.Descriptor().FullName(), len(u))
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil:
		case fd.IsList():
			for i := 0; i < v.List().Len() && err == nil; i++ {
				err = noUnknown(v.List().Get(i).Message())
			}
		default:
			err = noUnknown(v.Message())
		}
		return err == nil
	})
	return err
}

type internEntry interface {
	GetIid() uint64
	GetName() string
}

func intern[E internEntry](m map[uint64]string, entries []E) {
	for _, e := range entries {
		m[e.GetIid()] = e.GetName()
	}
}

func (d *decoded) clockSnapshot(s *dSeq, cs *pb.ClockSnapshot) error {
	if cs.PrimaryTraceClock != nil {
		d.primaryClock = cs.GetPrimaryTraceClock()
	}
	for _, c := range cs.GetClocks() {
		switch {
		case c.GetClockId() >= 64 && c.GetClockId() < 128:
			if !c.GetIsIncremental() {
				return fmt.Errorf("sequence clock %d is not incremental", c.GetClockId())
			}
			v := int64(c.GetTimestamp())
			s.delta = &v
		case c.GetClockId() != uint32(pb.BuiltinClock_BUILTIN_CLOCK_MONOTONIC):
			return fmt.Errorf("unexpected clock %d", c.GetClockId())
		}
	}
	return nil
}

// timestamp resolves a packet's time to CLOCK_MONOTONIC.
func (d *decoded) timestamp(p *pb.TracePacket, s *dSeq) (int64, error) {
	if p.Timestamp == nil {
		return 0, fmt.Errorf("track event without a timestamp")
	}
	clock := p.GetTimestampClockId()
	if clock == 0 && s.defaults != nil {
		clock = s.defaults.GetTimestampClockId()
	}
	switch {
	case clock == 0 || clock == uint32(pb.BuiltinClock_BUILTIN_CLOCK_MONOTONIC):
		if s.delta != nil {
			d.absolute++
		}
		return int64(p.GetTimestamp()), nil
	case clock >= 64 && clock < 128 && s.delta != nil:
		*s.delta += int64(p.GetTimestamp())
		return *s.delta, nil
	}
	return 0, fmt.Errorf("timestamp on clock %d, which the sequence does not define", clock)
}

func (d *decoded) trackEvent(s *dSeq, ev *pb.TrackEvent, ts int64, open map[uint64][]openSlice) error {
	track := ev.GetTrackUuid()
	if ev.TrackUuid == nil && s.defaults != nil {
		track = s.defaults.GetTrackEventDefaults().GetTrackUuid()
	}
	name := ev.GetName()
	if ev.GetNameIid() != 0 {
		if name = s.names[ev.GetNameIid()]; name == "" {
			return fmt.Errorf("event name iid %d not interned on its sequence", ev.GetNameIid())
		}
	}
	cats := ev.GetCategories()
	for _, iid := range ev.GetCategoryIids() {
		c, ok := s.cats[iid]
		if !ok {
			return fmt.Errorf("category iid %d not interned", iid)
		}
		cats = append(cats, c)
	}
	args, err := annotations(s, ev.GetDebugAnnotations())
	if err != nil {
		return err
	}
	switch ev.GetType() {
	case pb.TrackEvent_TYPE_SLICE_BEGIN:
		parent := -1
		if o := open[track]; len(o) > 0 {
			parent = o[len(o)-1].ix
		}
		d.slices = append(d.slices, dSlice{track: track, name: name, cats: cats, ts: ts, depth: len(open[track]), args: args, parentIx: parent})
		open[track] = append(open[track], openSlice{len(d.slices) - 1})
	case pb.TrackEvent_TYPE_SLICE_END:
		o := open[track]
		if len(o) == 0 {
			return fmt.Errorf("slice end on track %#x with no open slice", track)
		}
		sl := &d.slices[o[len(o)-1].ix]
		if ts < sl.ts {
			return fmt.Errorf("slice %q ends at %d before it begins at %d", sl.name, ts, sl.ts)
		}
		sl.dur = ts - sl.ts
		open[track] = o[:len(o)-1]
	case pb.TrackEvent_TYPE_INSTANT:
		d.instants = append(d.instants, dInstant{track: track, name: name, cats: cats, ts: ts, args: args})
	case pb.TrackEvent_TYPE_COUNTER:
		if ev.CounterValueField == nil {
			return fmt.Errorf("counter event without a value")
		}
		d.counters[track] = append(d.counters[track], dPoint{ts, ev.GetCounterValue()})
	default:
		return fmt.Errorf("event type %v", ev.GetType())
	}
	return nil
}

func annotations(s *dSeq, anns []*pb.DebugAnnotation) (dArgs, error) {
	args := dArgs{}
	for _, a := range anns {
		name := a.GetName()
		if a.GetNameIid() != 0 {
			var ok bool
			if name, ok = s.annNames[a.GetNameIid()]; !ok {
				return nil, fmt.Errorf("annotation name iid %d not interned", a.GetNameIid())
			}
		}
		switch v := a.Value.(type) {
		case *pb.DebugAnnotation_UintValue:
			args[name] = v.UintValue
		case *pb.DebugAnnotation_IntValue:
			args[name] = v.IntValue
		case *pb.DebugAnnotation_PointerValue:
			args[name] = v.PointerValue
		case *pb.DebugAnnotation_BoolValue:
			args[name] = v.BoolValue
		case *pb.DebugAnnotation_StringValue:
			args[name] = v.StringValue
		default:
			return nil, fmt.Errorf("annotation %q has value %T", name, a.Value)
		}
	}
	return args, nil
}

// trackByName returns the uuid of the one track with that name.
func (d *decoded) trackByName(t testing.TB, name string) uint64 {
	t.Helper()
	var found []uint64
	for id, td := range d.tracks {
		if td.GetName() == name {
			found = append(found, id)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d tracks named %q", len(found), name)
	}
	return found[0]
}

// threadOf returns the pid and tid of a thread track.
func (d *decoded) threadOf(track uint64) (pid, tid int32, ok bool) {
	td := d.tracks[track]
	if td == nil || td.Thread == nil {
		return 0, 0, false
	}
	return td.GetThread().GetPid(), td.GetThread().GetTid(), true
}
