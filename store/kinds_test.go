package store

import (
	"reflect"
	"testing"
)

// Every field of a Batch is a kind of record in batchKinds: a field set
// alone is counted by exactly one row (so Commit writes it) and emptied by
// Reset, and Len counts it unless it rides along. A field added to Batch
// without its row fails here.
func TestBatchKindsCoverEveryField(t *testing.T) {
	typ := reflect.TypeOf(Batch{})
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		t.Run(f.Name, func(t *testing.T) {
			var b Batch
			fill(t, reflect.ValueOf(&b).Elem().Field(i))
			var rows []recordKind
			for _, k := range batchKinds {
				if k.count(&b) > 0 {
					rows = append(rows, k)
				}
			}
			if len(rows) != 1 {
				t.Fatalf("%d rows of batchKinds count Batch.%s, want 1", len(rows), f.Name)
			}
			want := 1
			if rows[0].rides {
				want = 0
			}
			if b.Len() != want {
				t.Errorf("Len %d with one %s record, want %d", b.Len(), rows[0].name, want)
			}
			b.Reset()
			if n := rows[0].count(&b); n != 0 {
				t.Errorf("after Reset, %d %s records remain", n, rows[0].name)
			}
		})
	}
}

// fill gives a Batch field one zero record: an element of a slice, a key
// of a map, a value behind a pointer.
func fill(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(reflect.Zero(v.Type().Key()), reflect.Zero(v.Type().Elem()))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	default:
		t.Fatalf("Batch field of kind %s is no kind of record", v.Kind())
	}
}
