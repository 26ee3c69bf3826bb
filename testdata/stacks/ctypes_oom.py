# A Python program that reaches libcuda through ctypes, as PyTorch, JAX and
# CuPy users do through their extension modules, and fails an allocation
# too large for the GPU inside nested Python functions. The e2e tests
# record it and check that the failure's Python stack names these
# functions, this file and the lines marked "# LINE:", innermost first.
#
#   python ctypes_oom.py LIBCUDA [SIZE]        SIZE in bytes, default 1 TiB
#   python ctypes_oom.py LIBCUDA SIZE N        N failed allocations from two
#                                              call sites, alternating
#   python ctypes_oom.py LIBCUDA SIZE N new    N failed allocations, each from
#                                              a function of its own (a new
#                                              Python call site every time)
#   python ctypes_oom.py LIBCUDA SIZE N fork   the same as without "fork", in
#                                              a forked child (no exec); the
#                                              parent exits with its status
import ctypes
import os
import sys
import time


def check(name, rc):
    if rc != 0:
        sys.stderr.write("ctypes_oom: %s -> %d\n" % (name, rc))
    return rc


class Driver:
    def __init__(self, path):
        self.cuda = ctypes.CDLL(path)
        self.cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]

    def start(self):
        check("cuInit", self.cuda.cuInit(0))
        # The recorder locates the interpreter when it reads this process's
        # exec; a failure before it has done so has no Python frames
        # (docs/stacks.md). A slow recorder (the -race build on a busy
        # machine) can take longer than the interpreter's start: wait.
        time.sleep(0.3)
        dev = ctypes.c_int(0)
        check("cuDeviceGet", self.cuda.cuDeviceGet(ctypes.byref(dev), 0))
        ctx = ctypes.c_void_p(0)
        check("cuDevicePrimaryCtxRetain", self.cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
        check("cuCtxSetCurrent", self.cuda.cuCtxSetCurrent(ctx))

    def alloc(self, size):
        ptr = ctypes.c_uint64(0)
        return self.cuda.cuMemAlloc_v2(ctypes.byref(ptr), size)  # LINE:alloc


def grow_cache(drv, size):
    return drv.alloc(size)  # LINE:grow


def other_site(drv, size):
    return drv.alloc(size)  # LINE:other


def load_weights(drv, size, n):
    rc = 0
    for i in range(n):
        if i % 2 == 0:
            rc = grow_cache(drv, size)  # LINE:load
        else:
            rc = other_site(drv, size)  # LINE:load-other
    return rc


def new_sites(drv, size, n):
    sites = []  # kept, so no code object's address is reused
    rc = 0
    for i in range(n):
        ns = {}
        exec("def site_%d(drv, size):\n    return drv.alloc(size)\n" % i, ns)
        sites.append(ns["site_%d" % i])
        rc = sites[-1](drv, size)
    return rc


def main():
    if len(sys.argv) > 4 and sys.argv[4] == "fork":
        pid = os.fork()
        if pid != 0:
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    drv = Driver(sys.argv[1])
    drv.start()
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 40
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    if len(sys.argv) > 4 and sys.argv[4] == "new":
        return 1 if new_sites(drv, size, n) != 0 else 0
    rc = load_weights(drv, size, n)  # LINE:main
    return 1 if rc != 0 else 0


sys.exit(main())  # LINE:module
