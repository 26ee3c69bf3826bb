package unwind

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/retrivium/forensic/internal/elfnote"
)

// ErrBuildID says the file found for a mapping is not the one the process
// mapped: its build id differs from the recorded one.
var ErrBuildID = errors.New("build id differs from the recorded one")

// File is an opened ELF file.
type File interface {
	io.ReaderAt
	io.Closer
}

// Files opens the ELF files a walk needs.
type Files interface {
	// Open opens the file m maps. When m.BuildID is set, the file must
	// have that build id (an error wrapping ErrBuildID otherwise).
	Open(m Mapping) (File, error)
	// OpenDebug opens separate debug information for a build id (the
	// symbols and CFI of a stripped file), or returns an error wrapping
	// fs.ErrNotExist.
	OpenDebug(buildID string) (File, error)
}

// LocalFiles opens mapped files by path on this machine, and debug files
// by build id under DebugDirs (/usr/lib/debug when empty), as
// <dir>/.build-id/xx/yyyy.debug.
type LocalFiles struct {
	DebugDirs []string
}

// Open opens m.Host, else m.Path, and checks its build id.
func (l LocalFiles) Open(m Mapping) (File, error) {
	path := m.Path
	if m.Host != "" {
		path = m.Host
	}
	if path == "" || !filepath.IsAbs(path) {
		return nil, fmt.Errorf("mapping %#x-%#x has no file: %w", m.Start, m.End, fs.ErrNotExist)
	}
	if m.BuildID != "" {
		if id := elfnote.BuildID(path); !SameBuildID(id, m.BuildID) {
			return nil, fmt.Errorf("%s (build id %q, recorded %q): %w", path, id, m.BuildID, ErrBuildID)
		}
	}
	return os.Open(path)
}

// OpenDebug looks the build id up in the debug directories.
func (l LocalFiles) OpenDebug(buildID string) (File, error) {
	id := strings.ToLower(buildID)
	if len(id) < 4 || strings.ContainsAny(id, "/.") {
		return nil, fmt.Errorf("build id %q: %w", buildID, fs.ErrNotExist)
	}
	dirs := l.DebugDirs
	if len(dirs) == 0 {
		dirs = []string{"/usr/lib/debug"}
	}
	for _, d := range dirs {
		f, err := os.Open(filepath.Join(d, ".build-id", id[:2], id[2:]+".debug"))
		if err == nil {
			return f, nil
		}
	}
	return nil, fmt.Errorf("no debug file for build id %s: %w", buildID, fs.ErrNotExist)
}

// SameBuildID compares two hex build ids. The kernel pads short ids with
// zeros to 20 bytes, so trailing zeros do not count.
func SameBuildID(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	return strings.TrimRight(a, "0") == strings.TrimRight(b, "0")
}
