// Package cuda describes the part of the CUDA driver API that forensic
// attaches its probes to, in two tables that every other part follows:
//
//   - [Symbols], one row per libcuda symbol to attach to: its operation class,
//     which argument holds the size, which is the out pointer, what the
//     probes must read, and whether the call's path can use the BAR1
//     aperture. The BPF capture configuration, the event decoder and the
//     analyzer are all derived from it; nothing else lists symbols.
//   - [Results], one row per CUresult: its name and what it means for a
//     verdict (a resource or mapping problem, not a memory problem at all, a
//     sticky error left by something untraced). Nothing else lists codes.
//
// The package is pure data and decoding: no eBPF, no NVML, no I/O.
package cuda
