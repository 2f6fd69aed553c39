"""How the PyTorch peers (torch_train.py, torch_cuda_train.py) time a training step, as train_throughput
times dtrain's: a warm-up of at least 5 steps and 0.5 s that learns how many steps fill a window, then
`windows` timed windows; the median is reported."""

import statistics
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
