# A Python program that fails a cuMemAlloc_v2 through ctypes while a
# secret is in a local variable of the function that makes the call, and
# is passed along by value: libffi copies the structure onto the stack
# for the call (an argument the driver ignores), so the stack copied at
# the failed call's return holds the secret's text. The privacy tests
# check that it reaches no byte of run.db or of any export unless
# --keep-stack-bytes asks for the stack's bytes, and that the Python
# frames (function, this file, the lines marked "# LINE:") are still named.
#
#   python ctypes_secret.py LIBCUDA
import ctypes
import sys
import time


class Request(ctypes.Structure):
    _fields_ = [("text", ctypes.c_char * 64)]


def secret_text():
    # Decoded at run time: the secret's text is in no file.
    return bytes(b ^ 0x5A for b in bytes.fromhex(
        "1c15081f14091319770" "91f19081f0e776d3c693b63396f6b772e35313f34"))


def handle_request(cuda, size):
    secret = secret_text()
    req = Request(secret)
    ptr = ctypes.c_uint64(0)
    rc = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size), req)  # LINE:alloc
    if rc != 0:
        sys.stderr.write("ctypes_secret: cuMemAlloc_v2 -> %d (%d bytes of request)\n" % (rc, len(secret)))
    return rc


def main():
    cuda = ctypes.CDLL(sys.argv[1])
    cuda.cuInit(0)
    # The recorder locates the interpreter when it reads this process's
    # exec; give a slow recorder time (docs/stacks.md).
    time.sleep(0.3)
    dev = ctypes.c_int(0)
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    ctx = ctypes.c_void_p(0)
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    cuda.cuCtxSetCurrent(ctx)
    return 1 if handle_request(cuda, 1 << 40) != 0 else 0  # LINE:main


sys.exit(main())  # LINE:module
