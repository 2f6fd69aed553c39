#!/usr/bin/python3
"""dtrain's ring all-reduce between 4 hosts with real addresses and rate-limited links: each rank in its
own network namespace (tests/deploy/netns.py), every host's sending side shaped with tc tbf to the link
rate, and the bus bandwidth compared with it (a ring all-reduce can at best move data at the link rate:
busbw = link). Links with a one-way delay go through netrelay (tests/deploy/netrelay.cpp) instead of the
bridge, with 9000-byte frames. Each run goes once with FP32 on the wire and once in bfloat16 (-z bf16:
communication_options::gradient_compression), whose busbw counts the floats' bytes. Needs root (skips
otherwise).
  bench/netns_allreduce.py [build dir] [runs]"""
import os
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "deploy"))
import netns  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else "build"
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
perf = os.path.join(build, "bench", "allreduce_perf")
N, PORT = 4, 29600
relay = os.path.join(build, "examples", "netrelay")
# (tc rate, bits/s, tbf burst: at least rate / HZ, one-way delay in microseconds: 0 = the bridge)
links = [("1gbit", 1e9, "256kb", 0), ("1gbit", 1e9, "256kb", 500), ("10gbit", 10e9, "2mb", 0),
         ("10gbit", 10e9, "2mb", 5000)]
sizes = ["-b", "1M", "-e", "64M", "-f", "4", "-n", "10", "-w", "3", "-c", "0"]

print(f"# all_reduce, {N} ranks on {N} hosts (network namespaces, veth + bridge, or + netrelay where there is a "
      f"delay), float sum, median busbw of {runs} runs; link = each host's sending rate (tc tbf); bf16: the values "
      f"in 16 bits on the wire, busbw in the floats' bytes")
print(f"{'link':>8} {'delay':>7} {'size(B)':>10} {'busbw(GB/s)':>12} {'% of link':>10} {'bf16 busbw':>11} {'bf16/fp32':>10}")
try:
    for name, bits, burst, delay in links:
        with netns.hosts(N, relay=netns.Relay(relay, delay_us=delay) if delay else None) as h:
            addresses = ",".join(f"{a}:{PORT}" for a in h.address)
            for i in range(N):
                subprocess.run(["tc", "-n", h.names[i], "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", name,
                                "burst", burst, "latency", "100ms"], check=True)
            table = {}
            for _ in range(runs):
                for wire in ("none", "bf16"):
                    procs = [h.run(i, [perf, *sizes, "-z", wire, "-r", str(i), "-a", addresses], stdout=subprocess.PIPE,
                                   text=True) for i in range(N)]
                    out = procs[0].communicate(timeout=600)[0]
                    for p in procs[1:]:
                        p.wait(timeout=600)
                    for line in out.splitlines():
                        f = line.split()
                        if f and not line.startswith("#"):
                            table.setdefault((int(f[0]), wire), []).append(float(f[6]))
            for size in sorted({size for size, _ in table}):
                busbw, bf16 = (statistics.median(table[(size, w)]) for w in ("none", "bf16"))
                print(f"{name:>8} {delay / 1000:>5.1f}ms {size:>10} {busbw:>12.3f} {100 * busbw * 8e9 / bits:>9.1f}% "
                      f"{bf16:>11.3f} {bf16 / busbw:>10.2f}", flush=True)
except netns.Unavailable as e:
    print(f"skipped: {e}")
