package store

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Trees bbolt would walk forever or past the file are refused by Open
// before bbolt sees them. Each case rewrites the root bucket's page of a
// good run.
func TestOpenRefusesUnsafeTrees(t *testing.T) {
	tests := map[string]func(root []byte, id uint64){
		// bbolt's cursor reads element 0 of an empty branch anyway.
		"empty branch": func(p []byte, _ uint64) {
			binary.LittleEndian.PutUint16(p[8:], flagBranch)
			binary.LittleEndian.PutUint16(p[10:], 0)
		},
		"branch naming itself": func(p []byte, id uint64) {
			binary.LittleEndian.PutUint16(p[8:], flagBranch)
			binary.LittleEndian.PutUint16(p[10:], 1)
			binary.LittleEndian.PutUint32(p[pageHeaderSize:], branchElemSize)
			binary.LittleEndian.PutUint32(p[pageHeaderSize+4:], 0)
			binary.LittleEndian.PutUint64(p[pageHeaderSize+8:], id)
		},
		"page of another type": func(p []byte, _ uint64) { binary.LittleEndian.PutUint16(p[8:], 0x10) },
		"page says another id": func(p []byte, id uint64) { binary.LittleEndian.PutUint64(p, id+1) },
	}
	for name, corrupt := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "run.db")
			writeRun(t, path)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			meta, pageSize := newestMeta(t, data)
			id := binary.LittleEndian.Uint64(meta[16:])
			corrupt(data[id*pageSize:(id+1)*pageSize], id)
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			r, err := Open(path)
			if err == nil {
				r.Close()
				t.Fatal("Open accepted the file")
			}
			if !errors.Is(err, ErrNotRunDB) {
				t.Errorf("Open: %v, want ErrNotRunDB", err)
			}
		})
	}
}

// newestMeta returns the body of the meta page with the highest
// transaction id (the one bbolt uses) and the file's page size.
func newestMeta(t *testing.T, data []byte) ([]byte, uint64) {
	t.Helper()
	pageSize := uint64(binary.LittleEndian.Uint32(data[pageHeaderSize+8:]))
	a, b := data[pageHeaderSize:], data[pageSize+pageHeaderSize:]
	if binary.LittleEndian.Uint64(b[48:]) > binary.LittleEndian.Uint64(a[48:]) {
		return b, pageSize
	}
	return a, pageSize
}
