package report

import "testing"

// LIVE AT THE FIRST FAILURE names what is live by its kind: an IPC
// mapping is not an allocation.
func TestLiveBytesDescribe(t *testing.T) {
	cases := []struct {
		l    LiveBytes
		want string
	}{
		{LiveBytes{Count: 1, Kinds: []KindCount{{"ipc-mapping", 1}}}, "1 mapping of imported memory (IPC)"},
		{LiveBytes{Count: 2, Kinds: []KindCount{{"pool-import", 2}}}, "2 mappings of imported memory (pool)"},
		{LiveBytes{Count: 3, Kinds: []KindCount{{"array", 1}, {"device-pointer", 2}}}, "1 array and 2 allocations"},
		{LiveBytes{Count: 3, Kinds: []KindCount{{"a", 1}, {"b", 1}, {"device-pointer", 1}}}, "1 a, 1 b and 1 allocation"},
		{LiveBytes{Count: 2}, "2 allocations"}, // an older report: no kinds
	}
	for _, c := range cases {
		if got := c.l.Describe(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.l.Kinds, got, c.want)
		}
	}
}
