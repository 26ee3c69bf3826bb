// Package elfnote reads the GNU build id of ELF files: the recorder stores
// it for every library it attaches to and every file a process maps, and
// the analyzer checks it before trusting a file to name stack frames.
package elfnote

import (
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
)

// BuildID returns the GNU build id of the ELF file at path, or "" when it
// has none or cannot be read.
func BuildID(path string) string {
	id, _ := Read(path)
	return id
}

// Read returns the GNU build id of the ELF file at path ("" when it has
// none), or the error that kept the file from being read: a caller that
// remembers build ids must not remember a failed read as "no build id".
func Read(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > 1<<20 {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := p.ReadAt(data, 0); err != nil {
			return "", err
		}
		if id := parse(data); id != "" {
			return id, nil
		}
	}
	return "", nil
}

// parse walks ELF notes (namesz, descsz, type, name, desc; 4-byte aligned)
// and returns the NT_GNU_BUILD_ID descriptor in hex.
func parse(b []byte) string {
	for len(b) >= 12 {
		nameSz := int(binary.LittleEndian.Uint32(b[0:]))
		descSz := int(binary.LittleEndian.Uint32(b[4:]))
		typ := binary.LittleEndian.Uint32(b[8:])
		if nameSz < 0 || descSz < 0 || nameSz > len(b) || descSz > len(b) {
			return ""
		}
		nameEnd := 12 + (nameSz+3)&^3
		descEnd := nameEnd + (descSz+3)&^3
		if descEnd > len(b) {
			return ""
		}
		if typ == 3 && nameSz == 4 && string(b[12:15]) == "GNU" {
			return hex.EncodeToString(b[nameEnd : nameEnd+descSz])
		}
		b = b[descEnd:]
	}
	return ""
}
