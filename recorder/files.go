package recorder

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/retrivium/forensic/internal/elfnote"
	"github.com/retrivium/forensic/store"
	"github.com/retrivium/forensic/unwind"
)

// fileIndex resolves the build ids of stored stack frames to files, when
// the stack is stored, so that symbolizing a run never depends on whether
// a process was still alive when the recorder looked at it. It knows every
// file a recorded process was seen to map or execute and every attached
// libcuda (each with its build id), and, as a last resort, the libraries
// in the loader's cache. The event reader and the holder feed it; mu
// guards it.
type fileIndex struct {
	mu     sync.Mutex
	known  map[string]store.File // build id -> a file with that build id
	stored map[string]bool       // build ids already queued for run.db
	// byKey finds a file by device and inode, as a capture's mapping list
	// names it; dirs are the directories of the files known, where a
	// file named only by the probes is looked for.
	byKey     map[fileKey]store.File
	dirs      map[string]bool
	loaderKey bool // the loader cache's libraries are in byKey
	// loader lists the loader cache's libraries (ldconfig -p); read once,
	// the first time a build id is found nowhere else.
	loader     func() []string
	loaderRead bool
	ids        *buildIDCache
	// pinned holds open the files of processes in another mount
	// namespace, by build id: their only path (/proc/PID/root/...) dies
	// with the process, and an open file stays readable after it, for
	// naming a capture of a process that exited first. pinOrder is the
	// order they were opened in, the oldest closed beyond maxPinned.
	pinned   map[string]*os.File
	pinOrder []string
}

// maxPinned bounds the files held open for processes in other mount
// namespaces (a container's executable and libraries: a few tens each).
const maxPinned = 512

func newFileIndex(ids *buildIDCache) *fileIndex {
	return &fileIndex{known: map[string]store.File{}, stored: map[string]bool{}, loader: loaderLibraries, ids: ids,
		byKey: map[fileKey]store.File{}, dirs: map[string]bool{}, pinned: map[string]*os.File{}}
}

// pin holds open a file reached only through its process's root (see
// pinned), opened through via, checked by build id. Called with mu held.
func (x *fileIndex) pin(m store.Mapping, via rootOpener) {
	if m.BuildID == "" || !strings.HasPrefix(m.Host, "/proc/") || x.pinned[m.BuildID] != nil {
		return
	}
	f, err := os.Open(via.open(m.Host))
	if err != nil {
		return
	}
	if !unwind.SameBuildID(elfnote.BuildID(fdPath(f)), m.BuildID) {
		f.Close() // replaced between the read of the mappings and now
		return
	}
	if len(x.pinOrder) >= maxPinned {
		old := x.pinOrder[0]
		x.pinOrder = x.pinOrder[1:]
		x.pinned[old].Close()
		delete(x.pinned, old)
	}
	x.pinned[m.BuildID] = f
	x.pinOrder = append(x.pinOrder, m.BuildID)
}

// pinnedPath returns a path that opens the file held open for a build id
// ("" when none is).
func (x *fileIndex) pinnedPath(buildID string) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	if f := x.pinned[buildID]; f != nil {
		return fdPath(f)
	}
	return ""
}

// close lets go of the files held open.
func (x *fileIndex) close() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, f := range x.pinned {
		f.Close()
	}
	clear(x.pinned)
	x.pinOrder = nil
}

// fdPath is a path that opens an open file again, wherever it lies.
func fdPath(f *os.File) string {
	return "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
}

// addMaps learns the files of a process's mappings; via opens its
// files through its root held open, if any.
func (x *fileIndex) addMaps(maps []store.Mapping, source string, via rootOpener) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, m := range maps {
		f := store.File{BuildID: m.BuildID, Path: m.Path, Open: m.Host, Source: source}
		x.learn(f)
		x.pin(m, via)
		if m.Inode != 0 {
			x.byKey[fileKey{m.Dev, m.Inode}] = f
		}
	}
}

// add learns one file.
func (x *fileIndex) add(f store.File) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.learn(f)
	open := f.Path
	if f.Open != "" {
		open = f.Open
	}
	if k, ok := statKey(open); ok {
		x.byKey[k] = f
	}
}

// learn keeps the first file seen for a build id. Called with mu held.
func (x *fileIndex) learn(f store.File) {
	if filepath.IsAbs(f.Path) {
		x.dirs[filepath.Dir(f.Path)] = true
	}
	if f.BuildID == "" || f.Path == "" {
		return
	}
	if _, ok := x.known[f.BuildID]; !ok {
		if len(x.known) >= maxCached {
			clear(x.known) // see maxCached
		}
		x.known[f.BuildID] = f
	}
}

// byBuildID returns the file known for a build id.
func (x *fileIndex) byBuildID(id string) (store.File, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	f, ok := x.known[id]
	return f, ok
}

// resolve returns the files of the frames' build ids that were not stored
// yet. maps, when a build id is not known, reads the stack's process's
// current mappings (nil when it is gone); the loader cache comes last.
// Build ids found nowhere are left out (and tried again with the next
// stack that has them).
func (x *fileIndex) resolve(frames []store.Frame, maps func() []store.Mapping) []store.File {
	x.mu.Lock()
	defer x.mu.Unlock()
	var want []string
	for _, f := range frames {
		if f.BuildID != "" && !x.stored[f.BuildID] && !slices.Contains(want, f.BuildID) {
			want = append(want, f.BuildID)
		}
	}
	if len(want) == 0 {
		return nil
	}
	if x.missing(want) && maps != nil {
		for _, m := range maps() {
			x.learn(store.File{BuildID: m.BuildID, Path: m.Path, Open: m.Host, Source: "maps"})
		}
	}
	if x.missing(want) && !x.loaderRead {
		x.loaderRead = true
		for _, p := range x.loader() {
			x.learn(store.File{BuildID: x.ids.get(p), Path: p, Source: "ldconfig"})
		}
	}
	var out []store.File
	for _, id := range want {
		if f, ok := x.known[id]; ok {
			x.stored[id] = true
			out = append(out, f)
		}
	}
	return out
}

// missing reports whether some build id is not known. Called with mu held.
func (x *fileIndex) missing(ids []string) bool {
	for _, id := range ids {
		if _, ok := x.known[id]; !ok {
			return true
		}
	}
	return false
}

// loaderLibraries lists the 64-bit libraries of the loader's cache
// (ldconfig -p).
func loaderLibraries() []string {
	out, err := exec.Command("ldconfig", "-p").Output()
	if err != nil {
		return nil
	}
	return parseLdconfig(string(out), "")
}

// parseLdconfig reads `ldconfig -p` output: the x86-64 entries' paths,
// only those of soname when it is not "".
func parseLdconfig(out, soname string) []string {
	var paths []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, " ")
		if !ok || !strings.Contains(rest, "x86-64") || soname != "" && name != soname {
			continue
		}
		if _, p, ok := strings.Cut(rest, "=> "); ok {
			paths = append(paths, strings.TrimSpace(p))
		}
	}
	return paths
}

// statKey names a file as the kernel's mappings do.
func statKey(path string) (fileKey, bool) {
	st, err := os.Stat(path)
	if err != nil {
		return fileKey{}, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, false
	}
	return fileKey{kernelDev(sys.Dev), sys.Ino}, true
}

// byDevIno finds a file by device and inode: among the files known, then
// the loader cache's libraries, then as name in the directories of the
// files known and in extra. A name the probes cut (at the end) matches
// any file it starts.
func (x *fileIndex) byDevIno(k fileKey, name string, extra []string) (store.File, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if f, ok := x.byKey[k]; ok {
		return f, true
	}
	if !x.loaderKey {
		x.loaderKey = true
		for _, p := range x.loader() {
			if lk, ok := statKey(p); ok {
				if _, known := x.byKey[lk]; !known {
					x.byKey[lk] = store.File{Path: p, Source: "ldconfig"}
				}
			}
		}
		if f, ok := x.byKey[k]; ok {
			return f, true
		}
	}
	if name == "" || strings.ContainsRune(name, '/') {
		return store.File{}, false
	}
	dirs := append([]string(nil), extra...)
	for d := range x.dirs {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		cands, _ := filepath.Glob(filepath.Join(d, globEscape(name)+"*"))
		for _, p := range cands {
			if pk, ok := statKey(p); ok && pk == k {
				f := store.File{Path: p, Source: "name"}
				x.byKey[k] = f
				return f, true
			}
		}
	}
	return store.File{}, false
}

// globEscape quotes the characters filepath.Match treats specially.
func globEscape(s string) string {
	r := strings.NewReplacer("\\", "\\\\", "*", "\\*", "?", "\\?", "[", "\\[")
	return r.Replace(s)
}
