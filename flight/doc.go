// Package flight keeps a flight-mode recording: a recorder that runs until
// stopped and keeps, within a size bound, the recent past and a window
// around every failure.
//
// # Directory
//
//	DIR/index.json            the Index: recording id, retention, segments, dropped ranges
//	DIR/segments/NNNNNNNN.db  segment NNNNNNNN: a complete run.db of the recording
//	DIR/previous/             the recording found in DIR when the recorder restarted
//	                          (CreateOptions.KeepPrevious), same layout;
//	                          older ones in DIR/previous.2, ... (previous.go)
//
// Each segment is a run.db (package store) with the recording's run id and
// a flight record (store.FlightInfo) giving its sequence number; a closed
// segment has a stop record with reason "rotated" (the last one, its own).
// The recorder writes the inventory, the attached libraries and the live
// processes again at the start of each segment, so any segment can be read
// alone.
//
// # Retention
//
// All segments together, the live one included, never exceed
// Policy.MaxBytes. Before a segment starts (Dir.Start, making room for a
// whole segment) and as the live one grows (Dir.Update), Index.Plan picks
// closed segments to delete: first the oldest that no failure window
// [failure-KeepBefore, failure+KeepAfter] overlaps (reason "retention"),
// then, when that is not enough, the oldest protected ones ("window-cut":
// the bound wins), sparing again each cut segment that fits once the later
// cuts are made (a quiet failure's window outlives a busy newer one's
// that had to go anyway). Windows extend forward, so the segments written after a
// failure stay protected as they are written; the window of a failure
// whose segment was cut still protects its neighbours.
//
// # Disk pressure
//
// When the filesystem refuses a write before MaxBytes is reached,
// Dir.Pressure deletes one tier at a time, the least useful first:
// snapshots, segments no window overlaps (the bound lowered to what the
// filesystem holds, Index.DiskBound), earlier recordings, then segments
// inside windows; ErrNoRoom when only the live segment is left.
//
// # Durability
//
// The index is replaced atomically (WriteIndex). It names a segment before
// the file is created and drops a segment before the file is deleted, so a
// crash leaves at worst a named segment that does not exist (readers report
// it) or a file no index names (deleted when the next segment starts),
// never a stretch of the recording missing without a dropped range saying
// so.
//
// # Reading
//
// Open reads the directory as one recording (a store.Set): the segments in
// order, the live one reported as skipped (the recorder holds its lock),
// the dropped ranges as gaps.
package flight
