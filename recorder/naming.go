package recorder

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/retrivium/forensic/internal/elfnote"
	"github.com/retrivium/forensic/stackname"
	"github.com/retrivium/forensic/store"
	"github.com/retrivium/forensic/unwind"
)

// namerQueue bounds the captures waiting to be named. The probes' rate
// limit (a process's first failure, then new call sites at 64 a second
// per CPU after a burst of 256) keeps it far from full; when it is full
// the event reader waits, as it does for the writer, and the probes count
// what the ring could not take.
const namerQueue = 4096

// maxCodesPerProcess bounds the code objects kept per process for naming
// Python frames; beyond it the oldest half is let go (a frame whose code
// object is gone is named "?", never wrongly).
const maxCodesPerProcess = 8192

// nameJob is one message to the namer, in ring order: a code object
// copied by a capture, a capture to name (with its process's interpreter
// and the Python frames read with it), or a process that exited.
type nameJob struct {
	code    *store.PyCode
	capture *store.Capture
	interp  *store.Python
	pyStack *store.PyStack
	forget  uint32
}

// namer unwinds and names stack captures while their processes' files are
// still there, off the event reader's goroutine (which must keep up with
// a failure storm and has already asked for each failure's sample), and
// queues the named stacks for run.db. It alone uses its state.
type namer struct {
	q     *queue
	unw   *unwind.Unwinder
	codes map[uint32][]store.PyCode // per process: code objects copied so far
}

// namerFilesKept bounds the files the namer keeps parsed (a process's
// executable and libraries: a few tens each).
const namerFilesKept = 256

func newNamer(q *queue, files *fileIndex) *namer {
	u := unwind.New(namerFiles{files: files}, 0)
	u.Retain(namerFilesKept)
	return &namer{q: q, unw: u, codes: map[uint32][]store.PyCode{}}
}

// run names what arrives until jobs is closed.
func (n *namer) run(jobs <-chan nameJob) {
	for j := range jobs {
		n.handle(j)
	}
}

// handle applies one message.
func (n *namer) handle(j nameJob) {
	switch {
	case j.code != nil:
		cs := append(n.codes[j.code.PID], *j.code)
		if len(cs) > maxCodesPerProcess {
			cs = append([]store.PyCode(nil), cs[len(cs)/2:]...)
		}
		n.codes[j.code.PID] = cs
	case j.capture != nil:
		c := j.capture
		py := stackname.Python{Interp: j.interp, Stack: j.pyStack}
		if j.interp != nil {
			py.Codes = n.codes[c.PID]
		}
		n.q.addNamed(stackname.Name(n.unw, c, py))
	case j.forget != 0:
		delete(n.codes, j.forget)
	}
}

// name hands a message to the namer; without one (a handler in a test),
// nothing is named.
func (h *handler) name(j nameJob) {
	if h.namer != nil {
		h.namer <- j
	}
}

// namerFiles opens the files a walk needs on the recording machine: the
// mapping's file as the recorder reached it (through the process's root
// while it lives), as the process named it, else any file the recording
// saw with the same build id; each checked by build id.
type namerFiles struct{ files *fileIndex }

// Open implements unwind.Files.
func (f namerFiles) Open(m unwind.Mapping) (unwind.File, error) {
	cands := []string{m.Host, m.Path}
	if m.BuildID != "" && f.files != nil {
		if p := f.files.pinnedPath(m.BuildID); p != "" {
			cands = []string{m.Host, p, m.Path}
		}
		if k, ok := f.files.byBuildID(m.BuildID); ok {
			cands = append(cands, k.Open, k.Path)
		}
	}
	sawOther := false
	for _, p := range cands {
		if p == "" || !filepath.IsAbs(p) {
			continue
		}
		if m.BuildID != "" && !unwind.SameBuildID(elfnote.BuildID(p), m.BuildID) {
			if _, err := os.Stat(p); err == nil {
				sawOther = true
			}
			continue
		}
		if fh, err := os.Open(p); err == nil {
			return fh, nil
		}
	}
	if m.Path == "" {
		return nil, fmt.Errorf("mapping %#x-%#x: its file was not found by the recorder: %w", m.Start, m.End, fs.ErrNotExist)
	}
	if sawOther {
		return nil, fmt.Errorf("%s: %w", m.Path, unwind.ErrBuildID)
	}
	return nil, fmt.Errorf("%s: %w", m.Path, fs.ErrNotExist)
}

// OpenDebug implements unwind.Files.
func (namerFiles) OpenDebug(buildID string) (unwind.File, error) {
	return unwind.LocalFiles{}.OpenDebug(buildID)
}
