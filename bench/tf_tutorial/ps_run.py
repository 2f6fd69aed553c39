#!/usr/bin/env python3
"""The parameter server tutorial's own program against dtrain's, on this machine, in one invocation.

    cmake --build build --target parameter_server_mnist multi_worker_mnist dtrain-launch
    python3 bench/tf_tutorial/ps_run.py [--build build] [--runs 3] [--epochs 8] [--steps 100]

One coordinator, 2 workers and 1 ps task on localhost, the tutorial's CNN, Adam 0.001, 64 per worker per step:
- TensorFlow: ps_main.py here (ParameterServerStrategy, MinSizePartitioner, a DatasetCreator, Model.fit one
  epoch at a time; tensorflow-cpu and tf_keras from the peer venv of bench/peers/venv.sh, Keras 2 as TF's
  guide says for TF 2.16 and later: Keras 3 has no ParameterServerStrategy);
- dtrain: `dtrain-launch -n 2 --ps 1 -- parameter_server_mnist`;
- dtrain's synchronous peer on the same cores: `dtrain-launch -n 2 -- multi_worker_mnist` (each step trains
  on 2 x 64 images, so its steps count twice the images).
Each program runs twice per round, without and with the test evaluation after every epoch: steps per second
come from the first (the training alone, over the epochs after the first, whose time includes TensorFlow's
tracing), the time to a test accuracy of 0.85 from the second (training and the evaluations up to the first
epoch that reaches it, from the start of the first fit). The programs alternate, `--runs` rounds; medians.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

from run import free_ports  # the multi-worker tutorial's runner, beside this one

HERE = os.path.dirname(os.path.abspath(__file__))
PER_WORKER, TARGET = 64, 0.85


def time_to(target, epoch_s, accuracy):
    """Seconds until the first epoch whose test accuracy reaches `target` (None when none does)."""
    total = 0.0
    for s, a in zip(epoch_s, accuracy):
        total += s
        if a >= target:
            return total
    return None


def steps_per_s(steps, epoch_s):
    """Steps per second over the epochs after the first (whose time includes TensorFlow's tracing)."""
    return steps * (len(epoch_s) - 1) / sum(epoch_s[1:])


def run_tensorflow(python, epochs, steps):
    ports = free_ports(4)
    cluster = {"chief": [f"localhost:{ports[0]}"], "worker": [f"localhost:{p}" for p in ports[1:3]],
               "ps": [f"localhost:{ports[3]}"]}
    procs = []
    for job, index in (("ps", 0), ("worker", 0), ("worker", 1), ("chief", 0)):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": job, "index": index}}),
                   TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1", SEED_EPOCHS=str(epochs),
                   SEED_STEPS_PER_EPOCH=str(steps))
        procs.append(subprocess.Popen([python, os.path.join(HERE, "ps_main.py")], cwd=HERE, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out, err = procs[-1].communicate()
    for p in procs[:-1]:  # the servers join forever, as in the tutorial
        p.kill()
        p.communicate()
    if procs[-1].returncode:
        raise RuntimeError("tensorflow's coordinator failed:\n" + err[-3000:])
    r = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    return {"steps_per_s": steps_per_s(steps, r["fit_s"]), "to_target_s": time_to(TARGET, [f + e for f, e in zip(r["fit_s"], r["eval_s"])], r["accuracy"]),
            "accuracy": r["accuracy"][-1], "version": r["tensorflow"]}


def run_dtrain(build, program, workers_flags, prefix, epochs, steps, seed, validate):
    launch = os.path.join(build, "tools", "launch", "dtrain-launch")
    path = os.path.join(build, "examples", program)
    for p in (launch, path):
        if not os.path.exists(p):
            raise RuntimeError(f"{p} is missing: cmake --build {build} --target {program} dtrain-launch")
    cmd = [launch, "-n", "2", *workers_flags, "--", path, "--model", "cnn", "--optimizer", "adam", "--learning-rate",
           "0.001", "--batch-size", str(PER_WORKER), "--epochs", str(epochs), "--steps-per-epoch", str(steps),
           "--verbose", "2", "--seed", str(seed)] + (["--validate"] if validate else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"{program} failed:\n" + p.stdout[-2000:] + p.stderr[-2000:])
    unit = {"ms": 1e-3, "us": 1e-6, "s": 1.0}
    lines = re.findall(rf"^\[{re.escape(prefix)}\] \d+/\d+ - .* - ([\d.]+)(ms|us|s)/epoch - [\d.]+(?:ms|us|s)/step$",
                       p.stdout, re.M)
    epoch_s = [float(v) * unit[u] for v, u in lines]
    accuracy = [float(a) for a in re.findall(rf"^\[{re.escape(prefix)}\] .* val_accuracy: ([\d.]+)", p.stdout, re.M)]
    final = float(re.search(rf"^\[{re.escape(prefix)}\] test_accuracy: ([\d.]+)", p.stdout, re.M).group(1))
    return {"steps_per_s": steps_per_s(steps, epoch_s), "to_target_s": time_to(TARGET, epoch_s, accuracy),
            "accuracy": final}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="the dtrain build tree (default: build)")
    ap.add_argument("--runs", type=int, default=3, help="rounds, the programs alternating (default 3)")
    ap.add_argument("--epochs", type=int, default=8, help="at least 2 (default 8)")
    ap.add_argument("--steps", type=int, default=100, help="steps per epoch (default 100)")
    args = ap.parse_args()
    if args.epochs < 2:
        ap.error("--epochs must be at least 2")
    build = os.path.abspath(args.build)
    venv = os.environ.get("DTRAIN_PEER_VENV") or os.path.join(build, "bench", "peer-venv")
    rc = subprocess.call(["sh", os.path.join(HERE, "..", "peers", "venv.sh"), venv])
    python = os.path.join(venv, "bin", "python") if rc == 0 else None
    if python is None:
        print("# tensorflow n/a: no peer venv (see above)")

    programs = {"dtrain parameter_server_strategy": ("parameter_server_mnist", ["--ps", "1"], "chief:0", 1),
                "dtrain multi_worker_mirrored_strategy": ("multi_worker_mnist", [], "0", 2)}
    results = {name: [] for name in (["tensorflow ParameterServerStrategy"] if python else []) + list(programs)}
    version = None
    for r in range(args.runs):
        if python:
            t = run_tensorflow(python, args.epochs, args.steps)
            version = t["version"]
            results["tensorflow ParameterServerStrategy"].append(t)
        for name, (program, flags, prefix, _) in programs.items():
            speed = run_dtrain(build, program, flags, prefix, args.epochs, args.steps, r + 1, False)
            accuracy = run_dtrain(build, program, flags, prefix, args.epochs, args.steps, r + 1, True)
            results[name].append({"steps_per_s": speed["steps_per_s"], "to_target_s": accuracy["to_target_s"],
                                  "accuracy": accuracy["accuracy"]})
        print(f"# round {r + 1}/{args.runs} done", file=sys.stderr, flush=True)

    print(f"# the parameter server tutorial's CNN: 1 coordinator, 2 workers, 1 ps task on localhost, Adam 0.001, "
          f"{PER_WORKER} images per worker step, {args.epochs} epochs x {args.steps} steps; medians of {args.runs} rounds")
    if version:
        print(f"# tensorflow {version} (tensorflow-cpu from PyPI, tf_keras)")
    print(f"| program | steps/s | images/s | time to test accuracy {TARGET} s | final test accuracy |")
    print("| --- | --- | --- | --- | --- |")
    med = {}
    for name, runs in results.items():
        per_step = PER_WORKER * (programs[name][3] if name in programs else 1)
        sps = statistics.median(x["steps_per_s"] for x in runs)
        reached = [x["to_target_s"] for x in runs if x["to_target_s"] is not None]
        to = statistics.median(reached) if len(reached) == len(runs) else None
        med[name] = (sps, to)
        print(f"| {name} | {sps:.1f} | {sps * per_step:,.0f} | "
              f"{f'{to:.1f}' if to is not None else f'not reached in {len(runs) - len(reached)} of {len(runs)}'} | "
              f"{statistics.median(x['accuracy'] for x in runs):.4f} |")
    ours, theirs = med.get("dtrain parameter_server_strategy"), med.get("tensorflow ParameterServerStrategy")
    if theirs:
        print(f"\ndtrain's parameter server runs {ours[0] / theirs[0]:.2f}x TensorFlow's steps per second" +
              (f", reaches {TARGET} in {theirs[1] / ours[1]:.2f}x less time" if ours[1] and theirs[1] else ""))


if __name__ == "__main__":
    main()
