package pystack

// lineAt returns the source line of the bytecode at byte offset addr in a
// code object, or 0 when the table says the instruction has no line or
// the table is cut before it. It implements PyCode_Addr2Line.
func lineAt(format lineFormat, table []byte, firstLine int32, addr int64) int {
	if addr < 0 {
		return int(firstLine)
	}
	switch format {
	case lines310:
		return line310(table, firstLine, addr)
	case lines311:
		return line311(table, firstLine, addr)
	}
	return 0
}

// line310 walks 3.10's co_linetable: byte pairs (bytecode delta, signed
// line delta); a line delta of -128 means the range has no line.
func line310(table []byte, firstLine int32, addr int64) int {
	line := int(firstLine)
	end := int64(0)
	for i := 0; i+1 < len(table); i += 2 {
		start := end
		end += int64(table[i])
		ld := int8(table[i+1])
		noLine := ld == -128
		if !noLine {
			line += int(ld)
		}
		if start <= addr && addr < end {
			if noLine {
				return 0
			}
			return line
		}
	}
	return 0
}

// Location table codes (Objects/locations.md, 3.11+): the first byte of an
// entry is 1ccccLLL, code c and length L+1 code units.
const (
	locNone      = 15 // no location
	locLong      = 14 // svarint line delta, varint end line delta, varint columns
	locNoColumns = 13 // svarint line delta
	locOneLine0  = 10 // 10, 11, 12: line delta 0, 1, 2; two column bytes
)

// line311 walks the 3.11+ location table.
func line311(table []byte, firstLine int32, addr int64) int {
	line := int(firstLine)
	end := int64(0)
	for i := 0; i < len(table); {
		first := table[i]
		if first&0x80 == 0 {
			return 0 // not the start of an entry: a corrupt or cut table
		}
		code := int(first >> 3 & 15)
		start := end
		end += int64(first&7+1) * 2
		switch {
		case code == locLong || code == locNoColumns:
			d, ok := svarint(table[i+1:])
			if !ok {
				return 0 // the table is cut inside this entry
			}
			line += d
		case code >= locOneLine0 && code < locNoColumns:
			line += code - locOneLine0
		}
		if start <= addr && addr < end {
			if code == locNone {
				return 0
			}
			return line
		}
		// Skip to the next entry: the next byte with the high bit set.
		for i++; i < len(table) && table[i]&0x80 == 0; i++ {
		}
	}
	return 0
}

// varint reads the location table's unsigned varint: 6-bit groups, least
// significant first, bit 6 set on all but the last. ok is false when the
// bytes end before the last group.
func varint(b []byte) (v uint, ok bool) {
	for i, shift := 0, uint(0); i < len(b) && shift < 64; i, shift = i+1, shift+6 {
		v |= uint(b[i]&63) << shift
		if b[i]&64 == 0 {
			return v, true
		}
	}
	return v, false
}

// svarint is varint with the sign in the lowest bit.
func svarint(b []byte) (int, bool) {
	u, ok := varint(b)
	if u&1 != 0 {
		return -int(u >> 1), ok
	}
	return int(u >> 1), ok
}
