package recorder

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSudoInvoker(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	sudo := env("SUDO_UID", "65534", "SUDO_GID", "65534", "SUDO_USER", "nobody")
	tests := []struct {
		name    string
		getenv  func(string) string
		euid    int
		wantUID int // -1: no invoker
		wantErr bool
	}{
		{"sudo", sudo, 0, 65534, false},
		{"not root", sudo, 1000, -1, false},
		{"no sudo", env(), 0, -1, false},
		{"user missing", env("SUDO_UID", "65534", "SUDO_GID", "65534"), 0, -1, false},
		{"root ran sudo", env("SUDO_UID", "0", "SUDO_GID", "0", "SUDO_USER", "root"), 0, -1, false},
		{"bad uid", env("SUDO_UID", "x", "SUDO_GID", "1", "SUDO_USER", "a"), 0, -1, true},
		{"negative gid", env("SUDO_UID", "5", "SUDO_GID", "-1", "SUDO_USER", "a"), 0, -1, true},
		{"unknown user", env("SUDO_UID", "54321", "SUDO_GID", "54322", "SUDO_USER", "ghost"), 0, 54321, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, err := SudoInvoker(tt.getenv, tt.euid)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantUID < 0 {
				if inv != nil {
					t.Fatalf("invoker %+v, want none", inv)
				}
				return
			}
			if inv == nil || inv.UID != tt.wantUID {
				t.Fatalf("invoker %+v, want uid %d", inv, tt.wantUID)
			}
			if !slices.Contains(inv.Groups, inv.GID) {
				t.Errorf("groups %v lack the primary group %d", inv.Groups, inv.GID)
			}
		})
	}
	// An unknown user keeps what sudo said and gets no home.
	inv, _ := SudoInvoker(env("SUDO_UID", "54321", "SUDO_GID", "54322", "SUDO_USER", "ghost"), 0)
	if inv.Name != "ghost" || inv.Home != "" || inv.GID != 54322 {
		t.Errorf("unknown user: %+v", inv)
	}
}

func TestProcAttr(t *testing.T) {
	env := []string{"PATH=/usr/bin", "HOME=/root", "USER=root", "LOGNAME=root", "SUDO_USER=alice"}
	attr, got := (*Invoker)(nil).procAttr(env)
	if attr != nil || !reflect.DeepEqual(got, env) {
		t.Errorf("no invoker: %v %v, want the environment unchanged", attr, got)
	}
	u := &Invoker{UID: 1001, GID: 1002, Groups: []int{1002, 44}, Name: "alice", Home: "/home/alice"}
	attr, got = u.procAttr(env)
	want := []string{"PATH=/usr/bin", "SUDO_USER=alice", "HOME=/home/alice", "USER=alice", "LOGNAME=alice"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("env %v, want %v", got, want)
	}
	c := attr.Credential
	if c.Uid != 1001 || c.Gid != 1002 || !reflect.DeepEqual(c.Groups, []uint32{1002, 44}) {
		t.Errorf("credential %+v", c)
	}
	u.Home = ""
	_, got = u.procAttr(env)
	if slices.Contains(got, "HOME=/root") {
		t.Errorf("root's HOME passed to the user: %v", got)
	}
}

func TestLookCommand(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	runnable := write("runnable", 0o755)
	plain := write("plain", 0o644)
	ownerOnly := write("owner-only", 0o700)
	other := &Invoker{UID: 54321, GID: 54321, Groups: []int{54321}, Name: "other"}
	tests := []struct {
		name     string
		as       *Invoker
		want     error // nil, or a *CommandError with NotFound below
		notFound bool
	}{
		{runnable, nil, nil, false},
		{runnable, other, nil, false},
		{"sh", nil, nil, false},
		{filepath.Join(dir, "missing"), nil, &CommandError{}, true},
		{"forensic-no-such-command", nil, &CommandError{}, true},
		{plain, nil, &CommandError{}, false},
		{dir, nil, &CommandError{}, false},
		{ownerOnly, other, &CommandError{}, false},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.name), func(t *testing.T) {
			_, err := LookCommand(tt.name, tt.as)
			var ce *CommandError
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("LookCommand = %v", err)
			case tt.want == nil:
			case !errors.As(err, &ce):
				t.Fatalf("LookCommand = %v, want a CommandError", err)
			case ce.NotFound != tt.notFound:
				t.Fatalf("%v: not found %v, want %v", err, ce.NotFound, tt.notFound)
			case !strings.Contains(err.Error(), tt.name):
				t.Fatalf("%q does not name the command", err)
			}
		})
	}
}

func TestMayControl(t *testing.T) {
	me := uint32(os.Geteuid())
	u := &Invoker{UID: 54321}
	tests := []struct {
		inv  *Invoker
		uid  uint32
		want bool
	}{
		{nil, 0, true},
		{nil, me, true},
		{nil, 54321, me == 54321},
		{u, 54321, true},
		{u, 54322, me == 54322},
	}
	for _, tt := range tests {
		if got := tt.inv.MayControl(tt.uid); got != tt.want {
			t.Errorf("%+v.MayControl(%d) = %v, want %v", tt.inv, tt.uid, got, tt.want)
		}
	}
}

// The control socket asks the kernel who connected before it does
// anything, and answers with the time into the recording.
func TestControlPeerCheck(t *testing.T) {
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprint("allow=", allow), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "run.db")
			addr, _ := ControlAddress(path)
			l, err := net.Listen("unix", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var asked uint32
			var marked []string
			c := control{start: 1_000, allow: func(uid uint32) bool { asked = uid; return allow },
				mark: func(label string) (int64, error) { marked = append(marked, label); return 12_345_001_000, nil }}
			go c.serve(l)
			m, err := Mark(path, "warmup done")
			if asked != uint32(os.Geteuid()) {
				t.Errorf("peer uid %d, want %d", asked, os.Geteuid())
			}
			if !allow {
				if err == nil || !strings.Contains(err.Error(), "may not mark") || len(marked) != 0 {
					t.Fatalf("refused peer: %v, marked %v", err, marked)
				}
				return
			}
			if err != nil || m.Time != 12_345_001_000 || m.Since != 12345*time.Millisecond || len(marked) != 1 {
				t.Fatalf("Mark = %+v, %v; marked %v", m, err, marked)
			}
		})
	}
}

func TestParseMarkReply(t *testing.T) {
	tests := []struct {
		reply   string
		want    Marked
		wantErr string
	}{
		{"ok 5 3", Marked{Time: 5, Since: 3}, ""},
		{"ok 5", Marked{Time: 5, Since: -1}, ""},
		{"error: uid 7 may not mark this recording", Marked{}, "may not mark"},
		{"ok x", Marked{}, "unexpected"},
		{"ok 1 2 3", Marked{}, "unexpected"},
		{"ok", Marked{}, "recorder: ok"},
	}
	for _, tt := range tests {
		got, err := parseMarkReply(tt.reply)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: err %v, want %q", tt.reply, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q = %+v, %v; want %+v", tt.reply, got, err, tt.want)
		}
	}
}
