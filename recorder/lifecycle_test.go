package recorder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/retrivium/forensic/store"
)

// The stop record says every reason the recording ended for, whichever
// the session saw first: a write error wins over the wait's reason and
// keeps a start error beside it, and a workload that ended while another
// reason won is still recorded.
func TestStopInfoReportsEveryReason(t *testing.T) {
	full := fmt.Errorf("%w: no space left on device", store.ErrDiskFull)
	for _, tc := range []struct {
		name       string
		reason     string
		startErr   error
		writeErr   error
		exited     bool // the workload exited, unseen by Wait
		wantReason string
		wantError  []string
	}{
		{"workload exit", "workload-exited", nil, nil, false, "workload-exited", nil},
		{"duration", "duration", nil, nil, false, "stopped", nil},
		{"cancelled", "cancelled", nil, nil, false, "stopped", nil},
		{"never waited", "", nil, nil, false, "stopped", nil},
		{"disk full after the workload exited", "workload-exited", nil, full, false, "disk-full", []string{"disk full"}},
		{"write error on a signal", "signal", nil, errors.New("input/output error"), false, "write-error", []string{"input/output"}},
		{"start error", "", errors.New("start x: no such file"), nil, false, "error", []string{"start x"}},
		{"start and write errors", "", errors.New("start x"), full, false, "disk-full", []string{"start x", "disk full"}},
		{"signal won, workload exited too", "signal", nil, nil, true, "signal", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Session{reason: tc.reason, startErr: tc.startErr, wr: &writer{err: tc.writeErr}, ctx: context.Background()}
			if tc.exited {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				s.workload, s.waitErr = cmd, make(chan error, 1)
				s.waitErr <- cmd.Wait()
			}
			info := s.stopInfo(store.Stats{}, store.DelayStats{}, store.DelayStats{})
			if info.Reason != tc.wantReason {
				t.Errorf("reason %q, want %q", info.Reason, tc.wantReason)
			}
			for _, w := range tc.wantError {
				if !strings.Contains(info.Error, w) {
					t.Errorf("error %q does not say %q", info.Error, w)
				}
			}
			if len(tc.wantError) == 0 && info.Error != "" {
				t.Errorf("error %q, want none", info.Error)
			}
			if got := info.Workload != nil; got != tc.exited {
				t.Errorf("workload exit recorded: %v, want %v", got, tc.exited)
			}
		})
	}
}
