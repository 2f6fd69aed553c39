#!/usr/bin/python3
"""multi_worker_throughput between 2 hosts over rate-limited links, with the gradients in FP32 and in
bfloat16 on the wire (communication_options::gradient_compression): each worker in its own network
namespace (tests/deploy/netns.py) with its own address and TF_CONFIG, every host's sending side shaped
with tc tbf to the link rate (DTRAIN_SHM=0: the namespaces share /dev/shm, which would carry the
all-reduces instead). Prints the chief's ms/step and the share of the step spent waiting for
gradients that backward did not hide, medians of the runs (FP32 and bf16 alternate). Needs root (skips
otherwise).
  bench/netns_multi_worker.py [build dir] [runs] [steps] [per-worker batch]"""
import json
import os
import re
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "deploy"))
import netns  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else "build"
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
steps = sys.argv[3] if len(sys.argv) > 3 else "100"
batch = sys.argv[4] if len(sys.argv) > 4 else "64"
program = os.path.join(build, "bench", "multi_worker_throughput")
N, PORT = 2, 29700
links = [("1gbit", 1e9, "256kb"), ("10gbit", 10e9, "2mb")]  # (tc rate, bits/s, tbf burst: at least rate / HZ)
line = re.compile(r"ms/step ([0-9.]+) .* exposed communication ([0-9.]+) ms/step \(([0-9.]+)% of the step\)")

print(f"# multi_worker_throughput cnn, {N} workers on {N} hosts (network namespaces, veth + bridge), {batch} samples "
      f"per worker and step, {steps} steps; medians of {runs} runs; exposed: gradient communication backward did not hide")
print(f"{'link':>8} {'gradients':>9} {'ms/step':>9} {'exposed ms':>11} {'% of step':>10}")
try:
    for name, bits, burst in links:
        with netns.hosts(N, relay=None) as h:
            for i in range(N):
                subprocess.run(["tc", "-n", h.names[i], "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", name,
                                "burst", burst, "latency", "100ms"], check=True)
            cluster = {"worker": [f"{a}:{PORT}" for a in h.address]}
            table = {}
            for _ in range(runs):
                for wire in ("none", "bf16"):
                    token = os.urandom(16).hex()  # the job's token, the same for both workers
                    procs = []
                    for i in range(N):
                        env = dict(os.environ, DTRAIN_NUM_THREADS="1", DTRAIN_SHM="0", DTRAIN_JOB_TOKEN=token,
                                   TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}))
                        procs.append(h.run(i, [program, steps, batch, "step", "cnn", wire], env=env,
                                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
                    out = procs[0].communicate(timeout=900)[0]
                    for p in procs[1:]:
                        p.wait(timeout=900)
                    m = line.search(out)
                    if not m:
                        sys.exit(f"no result from the chief over {name} ({wire}): {out.strip()}")
                    table.setdefault(wire, []).append(tuple(float(v) for v in m.groups()))
            for wire, rows in table.items():
                ms, exposed, share = (statistics.median(r[k] for r in rows) for k in range(3))
                print(f"{name:>8} {wire:>9} {ms:>9.1f} {exposed:>11.2f} {share:>9.1f}%", flush=True)
except netns.Unavailable as e:
    print(f"skipped: {e}")
