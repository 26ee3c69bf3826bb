package store

import (
	"path/filepath"
	"reflect"
	"testing"
)

func TestNeighboursReadBackAndAreAbsentFromOlderFiles(t *testing.T) {
	dir := t.TempDir()
	uid := uint32(1000)
	a := Neighbour{PID: 42, Time: 2e9, Comm: "serve", Args: []string{"serve", "--port", "80"}, UID: &uid, User: "alice",
		Cgroup: "/docker/x", Pod: &Pod{UID: "u", Namespace: "ns", Name: "p"}}
	b := Neighbour{PID: 7, Time: 3e9, Comm: "gone", Error: "not readable"}
	cases := []struct {
		name  string
		batch Batch
		want  []Neighbour
	}{
		{"written, read by pid then time", Batch{Neighbours: []Neighbour{a, b}}, []Neighbour{b, a}},
		{"a file without them (older) has none", Batch{Markers: []Marker{{Time: 1, Label: "x"}}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name+".db")
			w, err := Create(path, CreateOptions{}, testRun(), nil)
			if err != nil {
				t.Fatal(err)
			}
			w.Reserve = 0
			if err := w.Commit(&c.batch); err != nil {
				t.Fatal(err)
			}
			w.Close()
			r, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			got, err := r.Neighbours()
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Errorf("Neighbours() = %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestSetNamesEachNeighbourAsEachSegmentRead(t *testing.T) {
	dir := t.TempDir()
	n1 := Neighbour{PID: 42, Time: 1.5e9, Comm: "serve"}
	n2 := Neighbour{PID: 42, Time: 2.5e9, Comm: "serve"} // named again in the next segment
	var paths []string
	for i, ns := range [][]Neighbour{{n1}, {n2}} {
		p, _ := writeSegment(t, dir, segSpec{seq: uint64(i + 1), stop: StopRotated, batch: Batch{Neighbours: ns}}, false)
		paths = append(paths, p)
	}
	got, err := openSet(t, paths).Neighbours()
	if err != nil || !reflect.DeepEqual(got, []Neighbour{n1, n2}) {
		t.Errorf("Neighbours() = %+v, %v; want both readings", got, err)
	}
}
