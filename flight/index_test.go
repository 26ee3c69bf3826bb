package flight

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestNewPolicy(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		max     int64
		seg     int64
		wantErr bool
	}{
		{1 << 30, 128 * mib, false},
		{256 * mib, 32 * mib, false},
		{16 * mib, 8 * mib, false},
		{100 << 30, 128 * mib, false},
		{16*mib - 1, 0, true},
		{0, 0, true},
	}
	for _, tt := range tests {
		p, err := NewPolicy(tt.max, 5*time.Minute, time.Minute)
		if (err != nil) != tt.wantErr || p.SegmentBytes != tt.seg {
			t.Errorf("NewPolicy(%d) = %+v, %v; want segments of %d bytes (error %v)", tt.max, p, err, tt.seg, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrPolicy) {
			t.Errorf("error %v is not ErrPolicy", err)
		}
	}
	if _, err := NewPolicy(1<<30, -time.Second, 0); !errors.Is(err, ErrPolicy) {
		t.Errorf("negative keep-before: %v", err)
	}
	p, _ := NewPolicy(1<<30, 0, 0)
	for _, c := range []struct {
		bytes int64
		age   time.Duration
		want  bool
	}{{0, 0, false}, {p.SegmentBytes - 1, time.Second, false}, {p.SegmentBytes, 0, true}, {1, DefaultSegmentAge, true}} {
		if got := p.Rotate(c.bytes, c.age); got != c.want {
			t.Errorf("Rotate(%d, %v) = %v, want %v", c.bytes, c.age, got, c.want)
		}
	}
}

func TestIndexRoundTrip(t *testing.T) {
	dir := t.TempDir()
	p := Policy{MaxBytes: 1 << 30, SegmentBytes: 128 << 20, SegmentAge: time.Minute, KeepBefore: 5 * time.Minute, KeepAfter: time.Minute}
	x := NewIndex("rec-7", p)
	x.Segments = []Segment{seg(3, 42, 35), live(4, 7)}
	x.Apply(Plan{})
	x.addDropped(Dropped{FirstSeq: 1, LastSeq: 2})
	for i := 0; i < 2; i++ { // the second replaces the first
		if err := WriteIndex(dir, x); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, x) {
		t.Errorf("read back\n %+v\nwant\n %+v", got, x)
	}
	if got.Policy() != p {
		t.Errorf("Policy() = %+v, want %+v", got.Policy(), p)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(names) != 1 {
		t.Errorf("directory holds %v, want only the index (no temporary file left)", names)
	}
}

func TestReadIndexRefuses(t *testing.T) {
	tests := map[string]string{
		"missing":      "",
		"not JSON":     "{segments",
		"another file": `{"format": "something-else", "version": 1}`,
		"newer":        `{"format": "forensic-flight", "version": 99}`,
		"a file outside the segments": `{"format": "forensic-flight", "version": 1,
			"segments": [{"file": "../../etc/run.db", "seq": 1}]}`,
		"out of order": `{"format": "forensic-flight", "version": 1,
			"segments": [{"file": "segments/00000002.db", "seq": 2}, {"file": "segments/00000001.db", "seq": 1}]}`,
		"live before the last": `{"format": "forensic-flight", "version": 1,
			"segments": [{"file": "segments/00000001.db", "seq": 1, "live": true}, {"file": "segments/00000002.db", "seq": 2}]}`,
	}
	for name, content := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if content != "" {
				os.WriteFile(filepath.Join(dir, IndexFile), []byte(content), 0o600)
			}
			if _, err := ReadIndex(dir); !errors.Is(err, ErrIndex) {
				t.Errorf("err = %v, want ErrIndex", err)
			}
		})
	}
}
