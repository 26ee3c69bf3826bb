package perfetto

import (
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of Perfetto's trace format, as in traceproto/trace.proto
// (TestFieldNumbers checks each against the generated descriptors). The
// hot packets are written with protowire, not through the generated types,
// so that writing a call allocates nothing.
const (
	fTracePacket = 1 // Trace.packet

	// TracePacket.
	fTimestamp        = 8
	fTimestampClockID = 58
	fTrackEvent       = 11
	fTrackDescriptor  = 60
	fClockSnapshot    = 6
	fSequenceID       = 10
	fInternedData     = 12
	fSequenceFlags    = 13
	fPacketDefaults   = 59

	// TracePacketDefaults and TrackEventDefaults.
	fDefaultsClockID    = 58
	fDefaultsTrackEvent = 11
	fDefaultsTrackUUID  = 11

	// ClockSnapshot and ClockSnapshot.Clock.
	fClocks        = 1
	fPrimaryClock  = 2
	fClockID       = 1
	fClockTime     = 2
	fClockIncrease = 3

	// InternedData; each entry is {iid = 1, name = 2}.
	fInternCategories = 1
	fInternNames      = 2
	fInternAnnNames   = 3
	fInternIID        = 1
	fInternName       = 2

	// TrackEvent.
	fCategoryIIDs     = 3
	fCategories       = 22
	fNameIID          = 10
	fName             = 23
	fType             = 9
	fTrackUUID        = 11
	fCounterValue     = 30
	fDebugAnnotations = 4

	// DebugAnnotation.
	fAnnNameIID = 1
	fAnnName    = 10
	fAnnBool    = 2
	fAnnUint    = 3
	fAnnInt     = 4
	fAnnString  = 6
	fAnnPointer = 7

	// TrackDescriptor, ProcessDescriptor, ThreadDescriptor, CounterDescriptor.
	fTrackUUIDDesc   = 1
	fTrackParent     = 5
	fTrackName       = 2
	fTrackProcess    = 3
	fTrackThread     = 4
	fTrackCounter    = 8
	fProcessPID      = 1
	fProcessCmdline  = 2
	fProcessName     = 6
	fThreadPID       = 1
	fThreadTID       = 2
	fThreadName      = 5
	fCounterUnit     = 3
	counterUnitBytes = 3 // CounterDescriptor.UNIT_SIZE_BYTES
)

// Enum values written.
const (
	typeSliceBegin = 1
	typeSliceEnd   = 2
	typeInstant    = 3
	typeCounter    = 4

	seqStateCleared = 1 // TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
	seqNeedsState   = 2 // TracePacket.SEQ_NEEDS_INCREMENTAL_STATE

	clockMonotonic = 3 // BUILTIN_CLOCK_MONOTONIC: the run's clock
	// clockDelta is the sequence-scoped incremental clock (ids 64..127 are
	// scoped to a sequence): a packet's timestamp on it is the time since
	// the previous packet's on the same sequence.
	clockDelta = 64
)

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendStringField(b []byte, num protowire.Number, v string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

// appendInt64Field writes an int64 field (varint of its two's complement,
// as protobuf's int64 and int32 are encoded).
func appendInt64Field(b []byte, num protowire.Number, v int64) []byte {
	return appendVarintField(b, num, uint64(v))
}

// annotation is one debug annotation (an argument shown with an event).
// Its name is interned on hot packets (nameIID) or written out (name).
type annotation struct {
	nameIID uint64
	name    string
	kind    protowire.Number // fAnnUint, fAnnInt, fAnnPointer, fAnnBool or fAnnString
	u       uint64
	s       string
}

// appendAnnotation appends one DebugAnnotation as a TrackEvent field.
func appendAnnotation(b []byte, a *annotation) []byte {
	var inner [64]byte
	m := inner[:0]
	if a.nameIID != 0 {
		m = appendVarintField(m, fAnnNameIID, a.nameIID)
	} else {
		m = appendStringField(m, fAnnName, a.name)
	}
	if a.kind == fAnnString {
		m = appendStringField(m, fAnnString, a.s)
	} else {
		m = appendVarintField(m, a.kind, a.u)
	}
	return appendBytesField(b, fDebugAnnotations, m)
}
