// Package fleet puts the failures of many runs in order: which run failed
// first when a job's ranks were recorded on several hosts, how sure that
// order is, and which ranks have no run at all.
//
// It is pure logic over plain values (no run.db, no NVML): the caller
// reads each run and hands over its host, boot, rank, clock mapping and
// first failure. The rule is documented in docs/multi-run.md.
package fleet
