#!/usr/bin/python3
"""A/B comparison of two train_throughput binaries (two builds of dtrain) on this machine.

    bench/ab_train_throughput.py OLD_BINARY NEW_BINARY [--rounds 5] [-- extra train_throughput flags]

Row by row (model, batch, threads), runs the two binaries on that row alone one after the other, ROUNDS
times (old, new, old, new, ...), with --no-torch --no-rss (dtrain's columns only), so that each pair of
runs is seconds apart and sees the same machine load. Prints, per row, the median samples/s of each
build, the ratio of those medians, and the median of the per-round ratios (each run of new over the run
of old just before it). A ratio below 1 means the new build is slower.
"""

import statistics
import subprocess
import sys


def rows(binary, extra):
    out = subprocess.run([binary, "--no-torch", "--no-rss", *extra], check=True, capture_output=True, text=True).stdout
    result = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 4 and f[0] in ("cnn", "mlp", "resnet20") and f[1].isdigit():
            result[(f[0], int(f[1]), int(f[2]))] = float(f[3])
    return result


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) > 1 else 2
    old, new, rest = argv[1], argv[2], argv[3:]
    rounds = 5
    if rest[:1] == ["--rounds"]:
        rounds, rest = int(rest[1]), rest[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    samples = {"old": {}, "new": {}}
    for key in rows(old, ["--quick", *rest]):  # the rows the flags select
        only = ["--models", key[0], "--batches", str(key[1]), "--threads", str(key[2])]
        for _ in range(rounds):
            for name, binary in (("old", old), ("new", new)):
                samples[name].setdefault(key, []).extend(rows(binary, [*rest, *only]).values())
        print(f"# {key} done", file=sys.stderr, flush=True)
    print(f"# {rounds} interleaved runs per row; medians of samples/s; old = {old}; new = {new}")
    print(f"{'model':<6}{'batch':>6}{'threads':>8}{'old smp/s':>12}{'new smp/s':>12}{'new/old':>9}{'paired':>9}")
    worst = None
    for key in sorted(samples["old"]):
        if key not in samples["new"]:
            continue
        old_s, new_s = samples["old"][key], samples["new"][key]
        o, n = statistics.median(old_s), statistics.median(new_s)
        paired = statistics.median(b / a for a, b in zip(old_s, new_s))
        worst = paired if worst is None else min(worst, paired)
        print(f"{key[0]:<6}{key[1]:>6}{key[2]:>8}{o:>12.0f}{n:>12.0f}{n / o:>9.3f}{paired:>9.3f}")
    print(f"# slowest row (paired): new/old = {worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
