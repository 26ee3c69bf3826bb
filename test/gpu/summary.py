"""summary.py REPORT.json: the key=value summary of a `forensic analyze
--json` report that scripts/gpu-check.sh reads, for a machine where the Go
helper (test/gpu/gpucheck summary, which this mirrors) is not built. Only
the standard library; the keys and formats are the helper's."""
import json
import sys


def one_line(v):
    return " ".join(str(v).split())


def main():
    with open(sys.argv[1]) as f:
        rep = json.load(f)
    out = []

    def kv(k, v):
        if v is None:
            v = "null"
        elif isinstance(v, bool):
            v = "true" if v else "false"
        out.append("%s=%s" % (k, one_line(v)))

    kv("schema", rep.get("schema"))
    kv("attribution", rep.get("attribution"))
    kv("capacity", rep.get("capacity"))
    kv("verdict", rep.get("verdict"))
    ff = rep.get("first_failure")
    if ff:
        for k in ("symbol", "operation", "result", "result_name", "size", "gpu",
                  "cuda_device", "gpu_mapping", "pid"):
            kv("ff_" + k, ff.get(k))
    else:
        kv("ff_symbol", None)
    kv("failures", len(rep.get("failures") or []))
    for i, m in enumerate(rep.get("missing") or []):
        kv("missing.%d" % i, "%s (decisive %s)" % (m.get("what"), str(bool(m.get("decisive"))).lower()))
    for i, e in enumerate(rep.get("evidence") or []):
        v = e.get("text") or ("null" if e.get("value") is None else e.get("value"))
        kv("evidence.%d" % i, "%s = %s %s [%s, %s]" % (e.get("field"), v, e.get("unit"),
                                                       e.get("source"), e.get("status")))
    run = rep.get("run") or {}
    kv("ended", run.get("ended"))
    x = run.get("workload_exit")
    if x and x.get("code") is not None:
        kv("workload_exit", x["code"])
    elif x and x.get("signal") is not None:
        kv("workload_exit", "signal %s" % x["signal"])
    else:
        kv("workload_exit", None)
    loss = rep.get("loss") or {}
    kv("calls_seen", loss.get("calls_seen", 0))
    kv("events_stored", loss.get("events_stored", 0))
    kv("lost_calls", loss.get("lost_calls", 0))
    kv("lost_inflight", loss.get("lost_inflight", 0))
    kv("lost_before_failure", bool(loss.get("before_first_failure")))
    s = rep.get("sampling") or {}
    kv("nvml_init", s.get("nvml_init"))
    kv("samples", s.get("samples", 0))
    kv("triggered_rounds", s.get("triggered_rounds", 0))
    if s.get("trigger_delay_median_ns") is not None:
        kv("trigger_delay_median_ns", s["trigger_delay_median_ns"])
    for c in rep.get("calls") or []:
        kv("call." + c["symbol"], "%d %d" % (c.get("calls", 0), c.get("failed", 0)))
    for i, l in enumerate(rep.get("coverage") or []):
        err = "; error: " + l["error"] if l.get("error") else ""
        kv("coverage.%d" % i, "%s hooked=%d absent=%d unhooked=%d%s" % (
            l.get("path"), len(l.get("hooked") or []), len(l.get("absent") or []),
            len(l.get("unhooked_exports") or []), err))
    print("\n".join(out))


if __name__ == "__main__":
    main()
