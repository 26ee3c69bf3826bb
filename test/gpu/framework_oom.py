"""framework_oom: allocate 1 GiB tensors with PyTorch (else CuPy) until the
framework reports out of memory, hold them half a second, release them.
Prints GROUND lines like the C workloads; exit 0 when the framework ran out,
3 when it never did, 4 when neither framework can use a GPU."""
import sys
import time

CHUNK = 1 << 30


def torch_run():
    import torch
    if not torch.cuda.is_available():
        return None
    held = []
    print("GROUND framework=torch version=%s cuda=%s" % (torch.__version__, torch.version.cuda), flush=True)
    oom = getattr(torch.cuda, "OutOfMemoryError", RuntimeError)
    for _ in range(1 << 16):
        try:
            held.append(torch.empty(CHUNK, dtype=torch.uint8, device="cuda"))
        except oom as e:
            print("GROUND framework_failure=out-of-memory allocated=%d size=%d error=%s"
                  % (len(held), CHUNK, str(e).splitlines()[0][:160].replace(" ", "_")), flush=True)
            time.sleep(0.5)
            return 0
    return 3


def cupy_run():
    import cupy
    if cupy.cuda.runtime.getDeviceCount() < 1:
        return None
    held = []
    print("GROUND framework=cupy version=%s" % cupy.__version__, flush=True)
    for _ in range(1 << 16):
        try:
            held.append(cupy.empty(CHUNK, dtype=cupy.uint8))
        except cupy.cuda.memory.OutOfMemoryError as e:
            print("GROUND framework_failure=out-of-memory allocated=%d size=%d error=%s"
                  % (len(held), CHUNK, str(e)[:160].replace(" ", "_")), flush=True)
            time.sleep(0.5)
            return 0
    return 3


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "auto"
    runs = {"torch": [torch_run], "cupy": [cupy_run], "auto": [torch_run, cupy_run]}[which]
    for run in runs:
        try:
            rc = run()
        except ImportError:
            continue
        if rc is not None:
            return rc
    print("GROUND setup=failed reason=no-framework-with-a-gpu", flush=True)
    return 4


if __name__ == "__main__":
    sys.exit(main())
