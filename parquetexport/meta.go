package parquetexport

import (
	"context"

	"github.com/retrivium/forensic/jobenv"
	"github.com/retrivium/forensic/store"
)

func (x *runExport) writeProcesses(ctx context.Context, path string) error {
	bw, err := newBatchWriter[processRow](ctx, path, x.opt)
	if err != nil {
		return err
	}
	for i := range x.list {
		row, _, err := bw.next()
		if err != nil {
			return bw.close(err)
		}
		x.fillProcess(row, &x.list[i])
	}
	return bw.close(nil)
}

// fillProcess fills a process row; its rows own their values (few rows),
// so pointers may point into the process record.
func (x *runExport) fillProcess(row *processRow, p *store.Process) {
	j := jobenv.Parse(p.Env)
	*row = processRow{PID: int64(p.PID), PPID: int64(p.PPID), StartNS: x.clock.unix(p.Start), StartRunClockNS: p.Start,
		Comm: p.Comm, Exe: p.Exe, Args: p.Args, Cgroup: p.Cgroup, Root: p.Root, AttachedLate: p.AttachedLate,
		Rank: i32p(j.Rank), LocalRank: i32p(j.LocalRank), WorldSize: i32p(j.WorldSize),
		Env: jsonString(p.Env), Devices: jsonString(p.Devices)}
	if row.Args == nil {
		row.Args = []string{}
	}
	if e := p.Exit; e != nil {
		t := x.clock.unix(e.Time)
		row.ExitNS, row.CoreDumped = &t, e.Core
		row.ExitCode, row.ExitSignal = i32p(e.Code), i32p(e.Signal)
	}
}

func (x *runExport) writeRuns(ctx context.Context, path string) error {
	bw, err := newBatchWriter[runRow](ctx, path, x.opt)
	if err != nil {
		return err
	}
	row, _, err := bw.next()
	if err == nil {
		err = x.fillRun(row)
	}
	return bw.close(err)
}

func (x *runExport) fillRun(row *runRow) error {
	run := x.run
	*row = runRow{Path: x.r.Path(), Mode: run.Mode, Command: run.Command, ForensicVersion: run.Version,
		FileSchema: int32(x.r.Schema()), Kernel: run.Kernel, StartNS: x.clock.unix(run.ClockStart),
		StartRunClockNS: run.ClockStart, ClockRealtimeNS: x.clock.real, ClockRunNS: x.clock.mono,
		ClockErrorNS: x.clock.errNS, ClockErrorWhy: x.clock.why, Ended: "abrupt",
		Calls: x.calls, Failures: x.failures, Samples: x.samples, Processes: int64(len(x.list)), Ranks: []int32{}}
	if row.Command == nil {
		row.Command = []string{}
	}
	if id := run.Identity; id != nil {
		row.MachineID, row.BootID = id.MachineID, id.BootID
		if id.Kernel != "" {
			row.Kernel = id.Kernel
		}
	}
	if s := x.stop; s != nil {
		end := x.clock.unix(s.Time)
		lost := int64(s.Stats.LostCalls)
		row.EndNS, row.Ended, row.StopReason, row.LostCalls = &end, "clean", &s.Reason, &lost
	} else if last, err := x.r.LastRecordEnd(); err != nil {
		return err
	} else if last > 0 {
		end := x.clock.unix(last)
		row.EndNS = &end
	}
	if j := jobOf(run, x.stop); j != nil {
		row.Rank, row.WorldSize, row.LocalRank = i32p(j.Rank), i32p(j.WorldSize), i32p(j.LocalRank)
		for _, k := range j.Ranks {
			row.Ranks = append(row.Ranks, int32(k))
		}
		row.JobID, row.PodUID, row.PodName, row.PodNamespace = j.JobID, j.PodUID, j.PodName, j.PodNamespace
	}
	return nil
}
