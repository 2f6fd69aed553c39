#!/usr/bin/env python3
"""The multi-worker tutorial's own program against dtrain's, on this machine, in one invocation.

    cmake --build build --target multi_worker_mnist dtrain-launch
    python3 bench/tf_tutorial/run.py [--build build] [--runs 5]

TensorFlow: main.py and mnist_setup.py here (the tutorial's, on Fashion-MNIST from Debian's IDX files),
2 workers on localhost with TF_CONFIG, tensorflow-cpu from PyPI (the peer venv of bench/peers/venv.sh,
made once under the build tree), with tf_keras: the tutorial's Keras 2 (TF_USE_LEGACY_KERAS=1), as TensorFlow's
own guide says for TF 2.16 and later; Keras 3's fit cannot take MultiWorkerMirroredStrategy's per-replica
batches (ValueError: Attempt to convert a value (PerReplica:{...}) to a Tensor). dtrain: `dtrain-launch -n 2 -- multi_worker_mnist` with the tutorial's
settings (CNN, SGD 0.001, 64 per worker, 3 epochs of 70 steps). The two alternate, `--runs` times each;
the table shows medians (run r of dtrain uses --seed r; TensorFlow seeds itself at random: after 210 steps
of SGD at 0.001 the test accuracy still moves by several points with the seed): the job's wall time (start to the last worker's exit), the time of the fit
alone (TF: around model.fit; dtrain: the progress bar's epoch times), samples/s over the fit, the test
accuracy (the chief's evaluate on the 10,000 test images) and the peak RSS of each worker.
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EPOCHS, STEPS, PER_WORKER = 3, 70, 64


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def rss_values(text):
    return [int(v) for v in re.findall(r"peak_rss_kib=(\d+)", text)]


def run_tensorflow(python):
    ports = free_ports(2)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    procs = []
    start = time.perf_counter()
    for i in range(2):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
                   TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1",
                   SEED_EPOCHS=str(EPOCHS), SEED_STEPS_PER_EPOCH=str(STEPS))
        procs.append(subprocess.Popen([python, os.path.join(HERE, "rss.py"), python, os.path.join(HERE, "main.py")],
                                      cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate() for p in procs]
    wall = time.perf_counter() - start
    if any(p.returncode for p in procs):
        raise RuntimeError("tensorflow worker failed:\n" + "\n".join(e[-2000:] for _, e in outs))
    chief = json.loads([line for line in outs[0][0].splitlines() if line.startswith("{")][-1])
    return {"wall_s": wall, "fit_s": chief["fit_s"], "accuracy": chief["test_accuracy"],
            "rss_kib": [rss_values(e)[-1] for _, e in outs], "version": chief["tensorflow"]}


def run_dtrain(build, seed):
    launch = os.path.join(build, "tools", "launch", "dtrain-launch")
    program = os.path.join(build, "examples", "multi_worker_mnist")
    for path in (launch, program):
        if not os.path.exists(path):
            raise RuntimeError(f"{path} is missing: cmake --build {build} --target multi_worker_mnist dtrain-launch")
    cmd = [launch, "-n", "2", "--base-port", str(free_ports(1)[0]), "--", sys.executable,
           os.path.join(HERE, "rss.py"), program, "--model", "cnn", "--optimizer", "sgd", "--learning-rate", "0.001",
           "--batch-size", str(PER_WORKER), "--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS), "--verbose", "2", "--seed", str(seed)]
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if p.returncode:
        raise RuntimeError("dtrain-launch failed:\n" + p.stdout[-2000:] + p.stderr[-2000:])
    # verbose 2: one line per epoch on the chief, "70/70 - 1s - loss: ... - 1s/epoch - 9ms/step"
    steps_ms = [float(v) * {"ms": 1.0, "us": 1e-3, "s": 1e3}[u]
                for v, u in re.findall(r"^\[0\] .* - ([\d.]+)(ms|us|s)/step$", p.stdout, re.M)]
    accuracy = float(re.search(r"^\[0\] test_accuracy: ([\d.]+)", p.stdout, re.M).group(1))
    rss = {int(r): int(v) for r, v in re.findall(r"^\[(\d+)\] peak_rss_kib=(\d+)", p.stderr, re.M)}
    return {"wall_s": wall, "fit_s": sum(steps_ms) * STEPS / 1e3 if steps_ms else float("nan"),
            "accuracy": accuracy, "rss_kib": [rss.get(0, 0), rss.get(1, 0)]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="the dtrain build tree (default: build)")
    ap.add_argument("--runs", type=int, default=5, help="runs of each program, alternating (default 5)")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    venv = os.environ.get("DTRAIN_PEER_VENV") or os.path.join(build, "bench", "peer-venv")
    rc = subprocess.call(["sh", os.path.join(HERE, "..", "peers", "venv.sh"), venv])
    python = os.path.join(venv, "bin", "python") if rc == 0 else None
    if python is None:
        print("# tensorflow n/a: no peer venv (see above)")

    results = {"tensorflow": [], "dtrain": []}
    for r in range(args.runs):
        if python:
            results["tensorflow"].append(run_tensorflow(python))
        results["dtrain"].append(run_dtrain(build, seed=r + 1))  # TF draws its own seeds every run
        print(f"# run {r + 1}/{args.runs}: " + ", ".join(
            f"{k} {v[-1]['wall_s']:.1f} s" for k, v in results.items() if v), file=sys.stderr, flush=True)

    samples = EPOCHS * STEPS * PER_WORKER * 2
    print(f"# the multi-worker tutorial: 2 workers on localhost, CNN, SGD 0.001, {PER_WORKER} per worker, "
          f"{EPOCHS} epochs x {STEPS} steps ({samples} samples); medians of {args.runs} runs")
    if python:
        print(f"# tensorflow {results['tensorflow'][0]['version']} (tensorflow-cpu from PyPI)")
    print("| program | job wall s | fit s | samples/s (fit) | test accuracy (min-max) | peak RSS worker 0 / 1 MiB |")
    print("| --- | --- | --- | --- | --- | --- |")
    med = {}
    for name, runs in results.items():
        if not runs:
            continue
        m = {k: statistics.median(x[k] for x in runs) for k in ("wall_s", "fit_s", "accuracy")}
        rss = [statistics.median(x["rss_kib"][i] for x in runs) / 1024 for i in (0, 1)]
        med[name] = m
        acc = [x["accuracy"] for x in runs]
        print(f"| {name} | {m['wall_s']:.2f} | {m['fit_s']:.2f} | {samples / m['fit_s']:,.0f} | {m['accuracy']:.4f} "
              f"({min(acc):.4f}-{max(acc):.4f}) | {rss[0]:.0f} / {rss[1]:.0f} |")
    if len(med) == 2:
        print(f"\ndtrain finishes {med['tensorflow']['wall_s'] / med['dtrain']['wall_s']:.2f}x faster (job wall time), "
              f"fits {med['tensorflow']['fit_s'] / med['dtrain']['fit_s']:.2f}x faster; test accuracy "
              f"{med['dtrain']['accuracy']:.4f} vs {med['tensorflow']['accuracy']:.4f}")


if __name__ == "__main__":
    main()
