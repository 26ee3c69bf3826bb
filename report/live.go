package report

import (
	"fmt"
	"strings"
)

// kindNoun names n resources of a kind in words.
func kindNoun(kind string, n int) string {
	var one, many string
	switch kind {
	case "device-pointer":
		one, many = "allocation", "allocations"
	case "mipmapped-array":
		one, many = "mipmapped array", "mipmapped arrays"
	case "memory-handle":
		one, many = "physical allocation (cuMemCreate or an imported handle)", "physical allocations (cuMemCreate or imported handles)"
	case "host-pointer":
		one, many = "pinned host allocation", "pinned host allocations"
	case "host-registration":
		one, many = "host registration", "host registrations"
	case "ipc-mapping":
		one, many = "mapping of imported memory (IPC)", "mappings of imported memory (IPC)"
	case "pool-import":
		one, many = "mapping of imported memory (pool)", "mappings of imported memory (pool)"
	case "peer-access":
		one, many = "peer access mapping", "peer access mappings"
	case "peer-access-range":
		one, many = "peer access grant", "peer access grants"
	default: // array, and kinds of newer versions
		one, many = kind, kind+"s"
	}
	if n == 1 {
		return fmt.Sprintf("1 %s", one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Describe says in words what the live resources are: "3 allocations",
// "1 mapping of imported memory (IPC)", "2 allocations and 1 array". A
// report of an older version, with no kinds, counts allocations.
func (l *LiveBytes) Describe() string {
	if len(l.Kinds) == 0 {
		return Plural(l.Count, "allocation")
	}
	parts := make([]string, len(l.Kinds))
	for i, k := range l.Kinds {
		parts[i] = kindNoun(k.Kind, k.Count)
	}
	return And(parts)
}

// And joins parts as a list in a sentence: "a", "a and b", "a, b and c".
func And(parts []string) string {
	if len(parts) <= 1 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}
