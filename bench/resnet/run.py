#!/usr/bin/env python3
"""dtrain's ResNets (examples/mnist_models.hpp: functional models with skip connections and batch
normalization; the small one, or ResNet-20 with --model resnet20) against the same architecture in
PyTorch, on Fashion-MNIST, in one invocation.

    cmake --build build --target single_worker_mnist multi_worker_mnist dtrain-launch
    python3 bench/resnet/run.py [--model resnet20] [--build build] [--runs 3] [--epochs 2] [--steps-per-epoch 150]

One worker: `single_worker_mnist --model resnet` against torch_resnet.py in one process. Two workers on
localhost: `dtrain-launch -n 2 -- multi_worker_mnist --model resnet` against torch_resnet.py --workers 2
(DistributedDataParallel over gloo); each worker has half of the cores. Both: Adam 0.001, 64 images per
worker and step, the same steps, then the 10,000 test images. PyTorch comes from the peer venv of
bench/peers/venv.sh (PyPI, made once under the build tree). The runs alternate; the table shows medians:
the fit's time (dtrain: its per-epoch step times; PyTorch: around the loop), samples/s, the test accuracy
(min-max over the runs) and PyTorch's fit time over dtrain's.
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_dtrain(build, workers, a, seed):
    common = ["--model", a.model, "--optimizer", "adam", "--learning-rate", "0.001", "--batch-size", "64",
              "--epochs", str(a.epochs), "--steps-per-epoch", str(a.steps_per_epoch), "--verbose", "2",
              "--seed", str(seed)]
    if workers == 1:
        cmd = [os.path.join(build, "examples", "single_worker_mnist")] + common
    else:
        cmd = [os.path.join(build, "tools", "launch", "dtrain-launch"), "-n", str(workers), "--base-port",
               str(free_port()), "--", os.path.join(build, "examples", "multi_worker_mnist")] + common
    for path in cmd[:1]:
        if not os.path.exists(path):
            raise RuntimeError(f"{path} is missing: cmake --build {build} --target single_worker_mnist "
                               "multi_worker_mnist dtrain-launch")
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    prefix = r"^(?:\[0\] )?"
    steps_ms = [float(v) * {"ms": 1.0, "us": 1e-3, "s": 1e3}[u]
                for v, u in re.findall(prefix + r".* - ([\d.]+)(ms|us|s)/step$", p.stdout, re.M)]
    accuracy = float(re.search(prefix + r"test_accuracy: ([\d.]+)", p.stdout, re.M).group(1))
    return {"fit_s": sum(steps_ms) * a.steps_per_epoch / 1e3, "accuracy": accuracy}


def run_torch(python, workers, a, seed):
    cmd = [python, os.path.join(HERE, "torch_resnet.py"), "--model", a.model, "--workers", str(workers),
           "--epochs", str(a.epochs),
           "--steps-per-epoch", str(a.steps_per_epoch), "--seed", str(seed), "--port", str(free_port())]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"torch_resnet.py failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    r = json.loads([line for line in p.stdout.splitlines() if line.startswith("{")][-1])
    return {"fit_s": r["fit_s"], "accuracy": r["test_accuracy"], "version": r["torch"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="the dtrain build tree (default: build)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each program and worker count (default 3)")
    ap.add_argument("--model", choices=("resnet", "resnet20"), default="resnet",
                    help="the small ResNet (default) or ResNet-20")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--steps-per-epoch", type=int, default=150)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    venv = os.environ.get("DTRAIN_PEER_VENV") or os.path.join(build, "bench", "peer-venv")
    python = os.path.join(venv, "bin", "python")
    if subprocess.call(["sh", os.path.join(HERE, "..", "peers", "venv.sh"), venv]) != 0:
        python = None
        print("# pytorch n/a: no peer venv (see above)")
    results = {}
    for r in range(a.runs):
        for workers in (1, 2):
            results.setdefault(("dtrain", workers), []).append(run_dtrain(build, workers, a, r + 1))
            if python:
                results.setdefault(("pytorch", workers), []).append(run_torch(python, workers, a, r + 1))
        print(f"# run {r + 1}/{a.runs} done", file=sys.stderr, flush=True)
    title = "ResNet-20" if a.model == "resnet20" else "small ResNet"
    print(f"# {title} on Fashion-MNIST: Adam 0.001, 64 per worker, {a.epochs} epochs x {a.steps_per_epoch} "
          f"steps, medians of {a.runs} runs on {os.cpu_count()} cores")
    if python:
        print(f"# pytorch {results[('pytorch', 1)][0]['version']} (PyPI)")
    print("| workers | program | fit s | samples/s | test accuracy (min-max) | PyTorch fit s / dtrain's |")
    print("| --- | --- | --- | --- | --- | --- |")
    for workers in (1, 2):
        samples = a.epochs * a.steps_per_epoch * 64 * workers
        med = {}
        for name in ("dtrain", "pytorch"):
            runs = results.get((name, workers))
            if not runs:
                continue
            med[name] = statistics.median(x["fit_s"] for x in runs)
            acc = [x["accuracy"] for x in runs]
            ratio = f"{med['pytorch'] / med['dtrain']:.2f}" if name == "pytorch" else ""
            print(f"| {workers} | {name} | {med[name]:.2f} | {samples / med[name]:,.0f} | {statistics.median(acc):.4f} "
                  f"({min(acc):.4f}-{max(acc):.4f}) | {ratio} |")


if __name__ == "__main__":
    main()
