package recorder

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/retrivium/forensic/store"
)

// gateScript holds the workload until the recorder has put its pid in the
// tracked set, so its first call is recorded. If the recorder dies first,
// the workload does not run unrecorded.
const gateScript = `read -r _ <&3 || exit 125; exec 3<&-; exec "$@"`

// gatedCommand is a started workload waiting at the gate.
type gatedCommand struct {
	cmd  *exec.Cmd
	gate *os.File
}

// startGated starts the command behind the gate.
func startGated(cfg *Config) (*gatedCommand, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	cmd := exec.Command("/bin/sh", append([]string{"-c", gateScript, "forensic-gate"}, cfg.Command...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = cfg.Stdin, cfg.Stdout, cfg.Stderr
	cmd.ExtraFiles = []*os.File{pr}
	cmd.SysProcAttr, cmd.Env = cfg.workloadUser().procAttr(os.Environ())
	if err := cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("start %s: %w", cfg.Command[0], err)
	}
	return &gatedCommand{cmd: cmd, gate: pw}, nil
}

// release lets the workload run.
func (g *gatedCommand) release() error {
	_, err := g.gate.Write([]byte("go\n"))
	g.gate.Close()
	if err != nil {
		return fmt.Errorf("release workload: %w", err)
	}
	return nil
}

// abort kills a workload that never passed the gate.
func (g *gatedCommand) abort() {
	g.gate.Close()
	g.cmd.Process.Kill()
	g.cmd.Wait()
}

// exitOf converts a workload's wait result into an exit record and the
// status forensic itself exits with.
func exitOf(cmd *exec.Cmd) (*store.Exit, int) {
	ps := cmd.ProcessState
	if ps == nil {
		return nil, 127
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		return nil, ps.ExitCode()
	}
	e := store.ExitFromWaitStatus(now(), int32(ws))
	if ws.Signaled() {
		return e, 128 + int(ws.Signal())
	}
	return e, ws.ExitStatus()
}
