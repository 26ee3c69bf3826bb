// Package redact writes a copy of a recording (a run.db, or a flight
// directory) that is safe to attach to a ticket: process arguments and
// user paths replaced by stable placeholders, host identity hashed, raw
// stack bytes left out, and everything the verdict is made of (calls,
// sizes, results, times, samples, GPUs) unchanged, so that analyze of the
// copy gives the same attribution, capacity and numbers. The original is
// only read.
//
// Placeholders are stable: within one redaction the same original string
// always becomes the same placeholder (every segment of a flight
// recording shares them), so a path seen in a process's arguments, its
// mappings and its stack frames is still recognizably one file.
package redact

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/retrivium/forensic/store"
	"github.com/retrivium/forensic/unwind"
)

// Summary says what a redaction replaced and left out.
type Summary struct {
	// Paths, Args, Hosts and Users count the distinct originals
	// replaced: user paths (and their directories), process arguments,
	// host identities (host name, machine id, boot id, time server), and
	// the user names of processes the recording did not follow.
	Paths, Args, Hosts, Users int
	// RawStacks counts the raw stack records left out (stack captures,
	// Python frames and code objects as read: recordings made with
	// --keep-stack-bytes, or before stacks were named by the recorder).
	RawStacks int
	// Named counts raw captures without a named stack (a recording made
	// before stacks were named by the recorder) named by the redaction,
	// with the files at hand, so the copy keeps their stacks.
	Named int
	// LeftOut names buckets and files the redaction does not know and
	// therefore left out.
	LeftOut []string
}

// Redactor holds one redaction's placeholders. Learn every recording to
// be redacted first, then Copy each: the placeholders are fixed by then.
type Redactor struct {
	exact map[string]string // user paths, directories, host identity
	args  map[string]string // process arguments
	users map[string]string // user names (only ever replaced whole)
	// counters for placeholder numbers
	nPath, nDir, nArg, nUser int
	repl, replArgs           *strings.Replacer
	sum                      Summary
	// pending are the stacks named from raw captures, per recording, for
	// its copy; unw names them.
	pending map[*store.Reader][]store.NamedStack
	unw     *unwind.Unwinder
}

// New returns a Redactor with no placeholders yet.
func New() *Redactor {
	return &Redactor{exact: map[string]string{}, args: map[string]string{}, users: map[string]string{},
		pending: map[*store.Reader][]store.NamedStack{}}
}

// Summary returns what the redaction did so far.
func (r *Redactor) Summary() Summary { return r.sum }

// bucketRule is what a redaction does with a bucket's values.
type bucketRule int

const (
	ruleCopy  bucketRule = iota // binary, or JSON without free text: copied
	ruleJSON                    // JSON: strings redacted
	ruleRaw                     // raw process memory: left out
	ruleNamed                   // named stacks: deflated JSON, strings redacted
)

// rules lists every bucket a run.db may have (docs/run-db.md). Events,
// failures and stack references are binary records of numbers; symbols
// are CUDA's names.
var rules = map[string]bucketRule{
	"meta": ruleJSON, "symbols": ruleCopy, "events": ruleCopy, "failures": ruleCopy, "stackrefs": ruleCopy,
	"stacks": ruleCopy, "samples": ruleJSON, "processes": ruleJSON, "kmsg": ruleJSON, "markers": ruleJSON,
	"drops": ruleJSON, "libraries": ruleJSON, "files": ruleJSON, "named": ruleNamed,
	"captures": ruleRaw, "pystacks": ruleRaw, "pycode": ruleRaw, "neighbours": ruleJSON,
}

// metaRaw are meta keys that are no JSON.
var metaRaw = map[string]bool{"format": true, "schema": true}

// Learn reads a recording's sensitive strings and gives each a
// placeholder.
func (r *Redactor) Learn(rd *store.Reader) error {
	r.repl = nil
	named, err := r.nameRaw(rd)
	if err != nil {
		return err
	}
	r.pending[rd] = named
	if err := r.learnNamed(named); err != nil {
		return err
	}
	return rd.Each(func(v store.Value) error {
		rule := rules[v.Bucket]
		if (rule != ruleJSON && rule != ruleNamed) || (v.Bucket == "meta" && metaRaw[string(v.Key)]) {
			return nil
		}
		js := v.Val
		if rule == ruleNamed {
			var err error
			if js, err = store.NamedJSON(v.Val); err != nil {
				return err
			}
		}
		doc, err := decode(js)
		if err != nil {
			return fmt.Errorf("%s/%x: %w", v.Bucket, v.Key, err)
		}
		r.learn(doc, "")
		return nil
	})
}

// decode reads a JSON value keeping numbers exact.
func decode(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var doc any
	err := d.Decode(&doc)
	return doc, err
}

// encode writes a JSON value as the store does (no HTML escaping, so a
// placeholder reads as written).
func encode(doc any) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(doc); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// argKeys name the string lists that are process arguments.
var argKeys = map[string]bool{"args": true, "command": true}

// hostKeys name the strings that identify a host (names, hashed to
// host-<12 hex>) and idKeys its ids (hashed to 32 hex digits, the form of
// a machine id): the same host keeps the same hash, so runs of one
// machine or boot are still seen as such.
var (
	hostKeys = map[string]bool{"hostname": true, "reference": true}
	idKeys   = map[string]bool{"machine_id": true, "boot_id": true}
)

// pathKeys name the strings that are file paths, relative ones too
// (a library given on the command line as build/libnvidia-ml.so.1).
var pathKeys = map[string]bool{"path": true, "host_path": true, "exe": true, "file": true, "filename": true,
	"nvml_library": true, "library": true, "cgroup": true}

// learn walks a JSON value; key is the object key it is under. A string
// under a path key, or starting with "/" and holding no blank, is a path;
// text that mentions a path (an error, a walk's detail) is redacted with
// the paths and directories learned elsewhere.
func (r *Redactor) learn(doc any, key string) {
	switch x := doc.(type) {
	case map[string]any:
		for _, k := range sortedKeys(x) {
			r.learn(x[k], k)
		}
	case []any:
		for i, v := range x {
			if s, ok := v.(string); ok && argKeys[key] {
				r.learnArg(i, s)
				continue
			}
			r.learn(v, key)
		}
	case string:
		switch {
		case key == userKey && x != "":
			r.learnUser(x)
		case (hostKeys[key] || idKeys[key]) && x != "":
			r.learnHost(x, idKeys[key])
		case pathKeys[key] && strings.Contains(x, "/"), strings.HasPrefix(x, "/") && !strings.ContainsAny(x, " \t\n"):
			r.learnPath(x)
		}
	}
}

// sortedKeys returns an object's keys in order, so placeholders are
// numbered the same way every time.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// learnHost gives a host identity its hash.
func (r *Redactor) learnHost(s string, id bool) {
	if _, ok := r.exact[s]; ok {
		return
	}
	sum := sha256.Sum256([]byte("forensic-redact-host\x00" + s))
	if id {
		r.exact[s] = hex.EncodeToString(sum[:16])
	} else {
		r.exact[s] = "host-" + hex.EncodeToString(sum[:6])
	}
	r.sum.Hosts++
}

// userKey names the strings that are user names: replaced only where a
// whole string is one, as a short name ("root", "ml") is part of many
// words and paths.
const userKey = "user"

// learnUser gives a user name its placeholder.
func (r *Redactor) learnUser(s string) {
	if _, ok := r.users[s]; !ok {
		r.nUser++
		r.users[s] = fmt.Sprintf("<user-%d>", r.nUser)
		r.sum.Users++
	}
}

// learnArg gives an argument its placeholder. A path is a path wherever
// it appears; the program's name (argv[0] without a directory) is kept,
// as the process's comm shows it anyway.
func (r *Redactor) learnArg(i int, s string) {
	switch {
	case strings.HasPrefix(s, "/"):
		r.learnPath(s)
	case i == 0 && !strings.Contains(s, "/"):
	default:
		if _, ok := r.args[s]; !ok {
			r.nArg++
			r.args[s] = fmt.Sprintf("<arg-%d>", r.nArg)
			r.sum.Args++
		}
	}
}

// procRoot matches a path reached through a process's root.
var procRoot = regexp.MustCompile(`^/proc/[0-9]+/root(/.*)$`)

// systemDirs hold the system's own files: kept, so a report still names
// libc, the interpreter and the driver's libraries.
var systemDirs = []string{"/usr/", "/lib/", "/lib32/", "/lib64/", "/libx32/", "/bin/", "/sbin/", "/etc/", "/dev/",
	"/sys/", "/proc/"}

// isSystem says whether a path is the system's.
func isSystem(p string) bool {
	if p == "/" {
		return true
	}
	for _, d := range systemDirs {
		if strings.HasPrefix(p, d) || p == strings.TrimSuffix(d, "/") {
			return true
		}
	}
	return false
}

// learnPath gives a user path and its directories placeholders.
func (r *Redactor) learnPath(p string) {
	if m := procRoot.FindStringSubmatch(p); m != nil {
		p = m[1] // the path as the process saw it
	}
	if isSystem(p) {
		return
	}
	if _, ok := r.exact[p]; !ok {
		r.nPath++
		r.exact[p] = fmt.Sprintf("<path-%d>", r.nPath)
		r.sum.Paths++
	}
	for d := filepath.Dir(p); strings.Count(d, "/") >= 2 && !isSystem(d); d = filepath.Dir(d) {
		if _, ok := r.exact[d]; !ok {
			r.nDir++
			r.exact[d] = fmt.Sprintf("<dir-%d>", r.nDir)
			r.sum.Paths++
		}
	}
}
