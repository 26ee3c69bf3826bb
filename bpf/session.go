package bpf

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Uprobe sessions (Linux 6.13+): one program runs at a call's entry and,
// when the entry returned 0, at its return, with an 8-byte cookie per call
// that the kernel keeps between the two. cilium/ebpf v0.22 loads programs
// of this attach type (SEC("uprobe.session")) but creates only plain
// uprobe_multi links, so the link is made here with BPF_LINK_CREATE: the
// attributes are a uprobe_multi link's, with the session attach type.

// attachUprobeSession is BPF_TRACE_UPROBE_SESSION (include/uapi/linux/bpf.h).
const attachUprobeSession = ebpf.AttachType(57)

// uprobeMultiAttr is union bpf_attr as BPF_LINK_CREATE reads it for a
// uprobe_multi link.
type uprobeMultiAttr struct {
	progFD, targetFD   uint32
	attachType, flags  uint32
	path, offsets      uint64
	refCtrOffsets      uint64
	cookies            uint64
	count, uprobeFlags uint32
	pid, _             uint32
}

// linkCreate issues BPF_LINK_CREATE for a uprobe_multi-style link and
// returns the link's file descriptor.
func linkCreate(attr *uprobeMultiAttr, keep ...any) (int, error) {
	fd, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_LINK_CREATE, uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr))
	runtime.KeepAlive(attr)
	runtime.KeepAlive(keep)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// sessionLink attaches prog, a uprobe session program, to the file at path
// at the given offsets (file offsets, as for uprobe_multi), each with its
// cookie.
func sessionLink(path string, prog *ebpf.Program, offsets, cookies []uint64) (link.Link, error) {
	if len(offsets) == 0 || len(cookies) != len(offsets) {
		return nil, fmt.Errorf("uprobe session on %s: %d offsets, %d cookies", path, len(offsets), len(cookies))
	}
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return nil, fmt.Errorf("uprobe session on %s: %w", path, err)
	}
	attr := uprobeMultiAttr{
		progFD:     uint32(prog.FD()),
		attachType: uint32(attachUprobeSession),
		path:       uint64(uintptr(unsafe.Pointer(p))),
		offsets:    uint64(uintptr(unsafe.Pointer(&offsets[0]))),
		cookies:    uint64(uintptr(unsafe.Pointer(&cookies[0]))),
		count:      uint32(len(offsets)),
	}
	fd, err := linkCreate(&attr, p, offsets, cookies)
	if err != nil {
		return nil, fmt.Errorf("uprobe session on %s: %w", path, err)
	}
	l, err := link.NewFromFD(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("uprobe session on %s: %w", path, err)
	}
	return l, nil
}

// haveUprobeSession reports whether the kernel makes uprobe session links,
// the way cilium/ebpf probes uprobe_multi: a link on "/" fails with EBADF
// where the attach type is known and EINVAL where it is not.
var haveUprobeSession = sync.OnceValue(func() error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "probe_ups_link",
		Type:         ebpf.Kprobe,
		AttachType:   attachUprobeSession,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		return fmt.Errorf("load a uprobe session program: %w", err)
	}
	defer prog.Close()
	root, _ := unix.BytePtrFromString("/")
	offsets := []uint64{0}
	attr := uprobeMultiAttr{
		progFD:     uint32(prog.FD()),
		attachType: uint32(attachUprobeSession),
		path:       uint64(uintptr(unsafe.Pointer(root))),
		offsets:    uint64(uintptr(unsafe.Pointer(&offsets[0]))),
		count:      1,
	}
	fd, err := linkCreate(&attr, root, offsets)
	switch {
	case errors.Is(err, unix.EBADF):
		return nil
	case err != nil:
		return fmt.Errorf("uprobe session link: %w", err)
	}
	unix.Close(fd)
	return errors.New("a uprobe session link on / was accepted")
})
