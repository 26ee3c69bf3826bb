# A Python program that fails a CUDA allocation through ctypes as soon as
# it can, with no pause after start: the e2e tests check that such an
# early failure still has its Python frames (the recorder must have found
# the interpreter before the failure, not after). Lines marked "# LINE:"
# are the frames the tests expect, innermost first.
#
#   python ctypes_early.py LIBCUDA
import ctypes
import sys


def alloc(cuda):
    ptr = ctypes.c_uint64(0)
    return cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 40))  # LINE:alloc


def main():
    cuda = ctypes.CDLL(sys.argv[1])
    cuda.cuInit(0)
    dev = ctypes.c_int(0)
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    ctx = ctypes.c_void_p(0)
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    cuda.cuCtxSetCurrent(ctx)
    return 1 if alloc(cuda) != 0 else 0  # LINE:main


sys.exit(main())  # LINE:module
