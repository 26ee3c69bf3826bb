package report

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// HumanBytes formats bytes in binary units (MiB = 2^20 bytes), up to TiB.
func HumanBytes(v uint64) string {
	switch {
	case v >= 1<<40:
		return fmt.Sprintf("%.2f TiB", float64(v)/(1<<40))
	case v >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(v)/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(v)/(1<<10))
	}
	return fmt.Sprintf("%d B", v)
}

// Duration formats nanoseconds at a precision a person reads: "850 ns",
// "12.5 µs", "0.43 ms", "250 ms", "1.25 s", "3m20s".
func Duration(ns int64) string {
	neg := ""
	if ns < 0 {
		neg, ns = "-", -ns
	}
	var s string
	switch {
	case ns < 1_000:
		s = strconv.FormatInt(ns, 10) + " ns"
	case ns < 100_000:
		s = trimZeros(fmt.Sprintf("%.1f", float64(ns)/1e3)) + " µs"
	case ns < 100_000_000:
		s = trimZeros(fmt.Sprintf("%.2f", float64(ns)/1e6)) + " ms"
	case ns < 1_000_000_000:
		s = fmt.Sprintf("%.0f ms", float64(ns)/1e6)
	case ns < 60_000_000_000:
		s = trimZeros(fmt.Sprintf("%.2f", float64(ns)/1e9)) + " s"
	default:
		s = time.Duration(ns).Round(time.Second).String()
	}
	return neg + s
}

func trimZeros(s string) string {
	if !strings.Contains(s, ".") {
		return s
	}
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// Plural writes a count with its noun: "1 sample", "2 processes".
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	switch {
	case strings.HasSuffix(noun, "s"), strings.HasSuffix(noun, "x"), strings.HasSuffix(noun, "ch"), strings.HasSuffix(noun, "sh"):
		noun += "es"
	case strings.HasSuffix(noun, "y") && !strings.HasSuffix(noun, "ey"):
		noun = noun[:len(noun)-1] + "ies"
	default:
		noun += "s"
	}
	return strconv.Itoa(n) + " " + noun
}

// Ranks names a list of ranks: "rank 3", "ranks 1, 4".
func Ranks(ranks []int) string {
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = strconv.Itoa(r)
	}
	if len(ranks) == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ", ")
}

// Were is the verb that agrees with a count: "was" for 1, else "were"
// ("1 call was lost", "2 calls were lost").
func Were(n int) string {
	if n == 1 {
		return "was"
	}
	return "were"
}

// Rel formats a run-clock time as seconds into the run ("+1.234 s").
func Rel(t, start int64) string {
	return fmt.Sprintf("%+.3f s", float64(t-start)/1e9)
}

// Wrap breaks line into lines of at most width columns at spaces, for
// messages a person reads in a terminal. Continuation lines start with
// indent. A word longer than a line (a path) is never cut: it overhangs,
// so it can still be copied. The spacing inside each line is kept.
func Wrap(line string, width int, indent string) []string {
	var out []string
	for width > 0 && utf8.RuneCountInString(line) > width {
		cut := breakAt(line, width)
		if cut < 0 {
			break
		}
		out = append(out, strings.TrimRight(line[:cut], " "))
		line = indent + strings.TrimLeft(line[cut:], " ")
	}
	return append(out, line)
}

// breakAt is the byte index of the space to break line at so that the
// part before it fits width columns: the last such space after the line's
// leading spaces, else the first space after an overlong word; -1 when
// there is none.
func breakAt(line string, width int) int {
	lead := len(line) - len(strings.TrimLeft(line, " "))
	fit, over := -1, -1
	col := 0
	for i, r := range line {
		if r == ' ' && i > lead && strings.TrimSpace(line[i:]) != "" {
			if col <= width {
				fit = i
			} else if over < 0 {
				over = i
			}
		}
		col++
	}
	if fit >= 0 {
		return fit
	}
	return over
}

// MappingNoContext is a Failure's GPUMapping for a call made on a thread
// with no current context: it ran on no GPU.
const MappingNoContext = "no-context"

// MappingWords says in words how a CUDA device was matched to an NVML GPU:
// a Failure's GPUMapping or a device's Method, as every renderer writes it.
func MappingWords(method string) string {
	switch method {
	case "uuid":
		return "matched by UUID"
	case "pci-bus-id":
		return "matched by PCI bus id"
	case "visible-devices-uuid":
		return "matched through CUDA_VISIBLE_DEVICES, by UUID"
	case "visible-devices-index+order-pci-bus-id":
		return "matched through CUDA_VISIBLE_DEVICES and PCI bus order"
	case "visible-devices-index+order-same-model":
		return "matched through CUDA_VISIBLE_DEVICES, on identical GPUs in NVML order"
	case "single-gpu":
		return "the only GPU"
	case "order-pci-bus-id":
		return "matched by PCI bus order"
	case "order-same-model":
		return "matched on identical GPUs in NVML order"
	case MappingNoContext:
		return "the thread had no current context"
	case "", "unknown":
		return "not matched"
	}
	return "matched by " + method
}

// RankRanges names ranks in numeric order with runs of consecutive ranks
// contracted: "rank 3", "ranks 0–76, 78–127".
func RankRanges(ranks []int) string { return RankRangesAtMost(ranks, 0) }

// RankRangesAtMost is RankRanges with at most most ranges named (0: all):
// a longer list keeps its first and last ranges around "…", after the
// count: "896 ranks: 0–4, 6–12, …, 1022, 1023".
func RankRangesAtMost(ranks []int, most int) string {
	rs := slices.Clone(ranks)
	slices.Sort(rs)
	rs = slices.Compact(rs)
	var parts []string
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, strconv.Itoa(rs[i]))
		case j == i+1:
			parts = append(parts, strconv.Itoa(rs[i]), strconv.Itoa(rs[j]))
		default:
			parts = append(parts, strconv.Itoa(rs[i])+"–"+strconv.Itoa(rs[j]))
		}
		i = j + 1
	}
	switch {
	case len(rs) == 1:
		return "rank " + parts[0]
	case most > 2 && len(parts) > most:
		keep := append(append(parts[:most-2:most-2], "…"), parts[len(parts)-2:]...)
		return fmt.Sprintf("%d ranks: %s", len(rs), strings.Join(keep, ", "))
	}
	return "ranks " + strings.Join(parts, ", ")
}
