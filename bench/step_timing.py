"""What the Python peers of train_throughput (torch_train.py, torch_cuda_train.py, tf_train.py) share: how
a training step is timed, as train_throughput times dtrain's (a warm-up of at least 5 steps and 0.5 s that
learns how many steps fill a window, then `windows` timed windows; the median is reported), the request
loop they serve, and the peak-memory run."""

import json
import statistics
import sys
import time


def time_steps(step, batch, window_s, windows):
    t0 = time.perf_counter()
    done = 0
    while done < 5 or time.perf_counter() - t0 < 0.5:
        step()
        done += 1
    per = (time.perf_counter() - t0) / done
    steps = max(3, int(window_s / per + 0.5))
    ms = []
    for _ in range(windows):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        ms.append((time.perf_counter() - t) * 1e3 / steps)
    med = statistics.median(ms)
    return {"ok": True, "ms_per_step": med, "samples_per_s": batch * 1e3 / med, "windows": ms,
            "steps_per_window": steps}


def serve(hello, measure):
    """Prints `hello` (a dict) as the first JSON line, then answers each request line
    `<model> <batch> <setting> <seconds per window> <windows>` with `measure(model, batch, setting, window_s,
    windows)` as one JSON line (an exception is answered {"ok": false, "error": ...}), until "quit"."""
    print(json.dumps(hello), flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "quit":
            break
        try:
            r = measure(parts[0], int(parts[1]), parts[2], float(parts[3]), int(parts[4]))
        except Exception as e:  # noqa: BLE001 - reported to the parent, which prints n/a
            r = {"ok": False, "error": str(e)}
        print(json.dumps(r), flush=True)


def report_rss(step, steps):
    """Runs `step` `steps` times, then prints this process' peak RSS (VmHWM) as one JSON line."""
    for _ in range(steps):
        step()
    kib = -1
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                kib = int(line.split()[1])
    print(json.dumps({"ok": True, "vm_hwm_kib": kib}), flush=True)
