package bpf

import (
	"errors"
	"testing"
)

// threadRecord lays out a thread-name record as the probe writes it.
func threadRecord(pid, tid uint32, ts uint64, comm []byte) []byte {
	return Thread{Pid: pid, Tid: tid, TsExit: ts, Name: string(comm)}.Record()
}

func TestDecodeThreadNamesTheThread(t *testing.T) {
	tests := []struct {
		name string
		rec  []byte
		want Thread
		err  bool
	}{
		{"named thread", threadRecord(10, 12, 99, []byte("pt_autograd_0\x00junk")),
			Thread{Pid: 10, Tid: 12, TsExit: 99, Name: "pt_autograd_0"}, false},
		{"name of the full 15 bytes", threadRecord(1, 1, 5, []byte("abcdefghijklmno\x00")),
			Thread{Pid: 1, Tid: 1, TsExit: 5, Name: "abcdefghijklmno"}, false},
		{"no NUL: the name ends with the record", threadRecord(1, 2, 3, []byte("abcdefghijklmnop")),
			Thread{Pid: 1, Tid: 2, TsExit: 3, Name: "abcdefghijklmnop"}, false},
		{"empty name", threadRecord(7, 8, 9, nil), Thread{Pid: 7, Tid: 8, TsExit: 9}, false},
		{"short record", threadRecord(1, 1, 1, nil)[:threadSize-1], Thread{}, true},
		{"another kind", append([]byte{KindCall}, threadRecord(1, 1, 1, nil)[1:]...), Thread{}, true},
		{"empty", nil, Thread{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Thread
			err := DecodeThread(tt.rec, &got)
			if tt.err {
				if !errors.Is(err, ErrShortRecord) {
					t.Fatalf("DecodeThread: error %v, want ErrShortRecord", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("DecodeThread = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
