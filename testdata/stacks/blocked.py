# A Python program that blocks inside a ctypes call, as a CUDA call made
# through an extension module would: read(0) on stdin, with the GIL
# released, under a known chain of Python frames. The pystack tests read
# its frames from outside while it blocks; the "# LINE:" marks tell them
# which line each frame must report.
#
#   python blocked.py           the chain runs on the main thread
#   python blocked.py thread    the chain runs on a second thread while the
#                               main thread keeps running Python code
import ctypes
import sys
import threading

libc = ctypes.CDLL(None)
libc.read.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]


def native_id():
    if hasattr(threading, "get_native_id"):  # 3.8+
        return threading.get_native_id()
    return libc.syscall(186)  # gettid on x86-64


def block():
    sys.stdout.write("ready %d\n" % native_id())
    sys.stdout.flush()
    buf = ctypes.create_string_buffer(1)
    return libc.read(0, buf, 1)  # LINE:block


def inner(n):
    if n > 0:
        return inner(n - 1) + 1  # LINE:recurse
    return block()  # LINE:inner


class Worker:
    def run(self):
        return inner(3)  # LINE:run


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "thread":
        t = threading.Thread(target=Worker().run, name="worker")
        t.start()
        n = 0
        while t.is_alive():  # LINE:loop
            n += 1  # LINE:spin
        return
    Worker().run()  # LINE:main


main()  # LINE:module
