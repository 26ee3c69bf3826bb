package main

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"time"
)

// Flag values in the units people type: sizes like 4MiB, durations like
// 50ms. Each checks its range when it is set, so a bad value is a usage
// error naming the flag.

// sizeUnits are the suffixes a size may carry; all are powers of 1024.
var sizeUnits = []struct {
	name  string   // as written out
	names []string // as read, lower case
	shift uint
}{
	{"", []string{"", "b"}, 0},
	{"KiB", []string{"k", "kib"}, 10},
	{"MiB", []string{"m", "mib"}, 20},
	{"GiB", []string{"g", "gib"}, 30},
	{"TiB", []string{"t", "tib"}, 40},
}

// parseSize reads a byte count: a whole number, optionally followed by
// KiB, MiB, GiB or TiB (or K, M, G, T; case does not matter).
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("%q is not a size (write bytes, or a number with KiB, MiB or GiB)", s)
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %w", s, errors.Unwrap(err))
	}
	for _, u := range sizeUnits {
		for _, name := range u.names {
			if unit != name {
				continue
			}
			if n > (1<<64-1)>>u.shift {
				return 0, fmt.Errorf("%q is too large", s)
			}
			return n << u.shift, nil
		}
	}
	for _, u := range sizeUnits[1:] {
		if unit == u.names[0]+"b" {
			return 0, fmt.Errorf("%q: %s is ambiguous; write %s (1024-based)", s, t[i:], u.name)
		}
	}
	return 0, fmt.Errorf("%q: unknown unit %q (known: KiB, MiB, GiB, TiB)", s, t[i:])
}

// formatSize writes a size the way parseSize reads it, in the largest
// unit that divides it.
func formatSize(n uint64) string {
	for i := len(sizeUnits) - 1; i > 0; i-- {
		u := sizeUnits[i]
		if n != 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.name)
		}
	}
	return strconv.FormatUint(n, 10)
}

// sizeWords writes a size in a sentence: "16 bytes", "3MiB".
func sizeWords(n uint64) string {
	s := formatSize(n)
	if _, err := strconv.ParseUint(s, 10, 64); err == nil {
		return s + " bytes"
	}
	return s
}

// sizeFlag is a pflag.Value for a size, checked by check when set.
type sizeFlag struct {
	v     *uint64
	check func(uint64) error
}

func (f sizeFlag) String() string { return formatSize(*f.v) }
func (f sizeFlag) Type() string   { return "SIZE" }
func (f sizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err == nil && f.check != nil {
		err = f.check(n)
	}
	if err != nil {
		return err
	}
	*f.v = n
	return nil
}

// ringSize accepts what the kernel takes for a BPF ring buffer: a power of
// two of at least a page.
func ringSize(n uint64) error {
	page := uint64(os.Getpagesize())
	if n >= page && bits.OnesCount64(n) == 1 {
		return nil
	}
	return fmt.Errorf("%s is not a power of two of at least a page (%d bytes)%s", sizeWords(n), page, ringHint(n, page))
}

// ringHint suggests ring sizes near n that ringSize accepts: n MiB when
// n is so small that MiB were probably meant, else the powers of two
// around n.
func ringHint(n, page uint64) string {
	if n == 0 {
		return ""
	}
	if n < 1024 {
		n <<= 20 // "16" meant 16MiB
		if bits.OnesCount64(n) == 1 {
			return fmt.Sprintf("; did you mean %s?", formatSize(n))
		}
	}
	if n < page {
		return fmt.Sprintf("; did you mean %s?", formatSize(page))
	}
	below := uint64(1) << (bits.Len64(n) - 1)
	if bits.Len64(n) == 64 {
		return fmt.Sprintf("; did you mean %s?", formatSize(below))
	}
	return fmt.Sprintf("; did you mean %s or %s?", formatSize(below), formatSize(below<<1))
}

// diskReserve accepts 0 (write until the disk refuses) or at least a page:
// a smaller reserve cannot hold the stop record's commit.
func diskReserve(n uint64) error {
	page := uint64(os.Getpagesize())
	if n == 0 || n >= page {
		return nil
	}
	return fmt.Errorf("%d bytes is less than a page (%d bytes), too little for the stop record; did you mean %dMiB?", n, page, n)
}

// durationFlag is a pflag.Value for a duration of at least min (zero
// allowed only when zeroOK: "no limit").
type durationFlag struct {
	v      *time.Duration
	min    time.Duration
	zeroOK bool
}

func (f durationFlag) Type() string { return "DURATION" }
func (f durationFlag) String() string {
	if *f.v == 0 {
		return "0" // pflag shows no default for "0"
	}
	return f.v.String()
}
func (f durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return fmt.Errorf("%q has no unit (write for example %sms or %ss)", s, s, s)
		}
		return fmt.Errorf("%q is not a duration (for example 50ms, 2s, 10m)", s)
	}
	switch {
	case d == 0 && f.zeroOK:
	case d <= 0:
		return errors.New("must be more than 0")
	case d < f.min:
		return fmt.Errorf("%s is below the smallest allowed, %v", s, f.min)
	}
	*f.v = d
	return nil
}

// count writes n with the noun in the right number: "1 sample",
// "2 processes".
func count(n uint64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.FormatUint(n, 10) + " " + many
}

// human writes a duration at the precision a person reads: 0.43 ms,
// 12.5 ms, 340 ms, 3.2 s, 4 min 05 s, 2 h 03 min.
func human(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case d < 0:
		return "-" + human(-d)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", ms)
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.1f ms", ms)
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", ms)
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%d min %02d s", int(d.Minutes()), int(d.Seconds())%60)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%d h %02d min", int(d.Hours()), int(d.Minutes())%60)
}
