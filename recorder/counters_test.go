package recorder

import (
	"reflect"
	"testing"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/store"
)

// Every probe counter lands in the store.Stats field of the same name and
// kind, and in no other: setting one counter changes exactly that field.
func TestStoreCountersByName(t *testing.T) {
	ct := reflect.TypeOf(bpf.Stats{})
	for i := 0; i < ct.NumField(); i++ {
		name := ct.Field(i).Name
		var c bpf.Stats
		f := reflect.ValueOf(&c).Elem().Field(i)
		if f.CanInt() {
			f.SetInt(1_000_000_007)
		} else {
			f.SetUint(1_000_000_007)
		}
		var got store.Stats
		storeCounters(&got, &c)
		v := reflect.ValueOf(got)
		var changed []string
		for j := 0; j < v.NumField(); j++ {
			if !v.Field(j).IsZero() {
				changed = append(changed, v.Type().Field(j).Name)
			}
		}
		if len(changed) != 1 || changed[0] != name {
			t.Errorf("bpf.Stats.%s fills %v, want store.Stats.%s alone", name, changed, name)
			continue
		}
		if n := v.FieldByName(name); n.CanInt() && n.Int() != 1_000_000_007 || n.CanUint() && n.Uint() != 1_000_000_007 {
			t.Errorf("%s = %v, want 1000000007", name, n)
		}
	}
}
