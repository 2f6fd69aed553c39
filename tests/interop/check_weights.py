"""Runs interop_run and reads the weights it saved with the real packages: safetensors.numpy.load_file
(the safetensors file) and numpy.load (the .npz), each equal to the values the program wrote as JSON,
with Keras' names and shapes; and the model file's optimizer scalars typed as Keras types them (iterations
int64, learning rate float32) with the format tag "keras". usage: check_weights.py <interop_run program>"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

d = tempfile.mkdtemp(prefix="dtrain-weights-")
subprocess.run([sys.argv[1], d], check=True, stdout=subprocess.DEVNULL)
want = json.load(open(os.path.join(d, "weights.json")))
failures = []
for source, arrays in (("safetensors", load_file(os.path.join(d, "weights.safetensors"))),
                       ("npz", dict(np.load(os.path.join(d, "weights.npz"))))):
    if sorted(arrays) != sorted(want):
        failures.append(f"{source}: names {sorted(arrays)} != {sorted(want)}")
        continue
    for name, w in want.items():
        a = arrays[name]
        expected = np.array(w["values"], dtype=np.float32).reshape(w["shape"])
        if a.dtype != np.float32 or a.shape != tuple(w["shape"]) or not np.array_equal(a, expected):
            failures.append(f"{source}: {name} is {a.dtype} {a.shape}, expected float32 {tuple(w['shape'])} equal values")
with safe_open(os.path.join(d, "model.safetensors"), framework="np") as f:
    meta, iterations, lr = f.metadata(), f.get_tensor("optimizer/vars/0"), f.get_tensor("optimizer/vars/1")
    kernel = f.get_tensor("layers/dense/vars/0")
want_iterations = json.load(open(os.path.join(d, "model.json")))["iterations"]
if meta.get("format") != "keras":
    failures.append(f"model: __metadata__ format is {meta.get('format')!r}, expected 'keras'")
if iterations.dtype != np.int64 or iterations.shape != () or int(iterations) != want_iterations:
    failures.append(f"model: optimizer/vars/0 is {iterations.dtype} {iterations.shape} {iterations}, "
                    f"expected an int64 scalar {want_iterations}")
if lr.dtype != np.float32 or lr.shape != () or abs(float(lr) - 0.01) > 1e-9:
    failures.append(f"model: optimizer/vars/1 is {lr.dtype} {lr.shape} {lr}, expected a float32 scalar 0.01")
if not np.array_equal(kernel, np.array(want["layers/dense/vars/0"]["values"], np.float32).reshape(kernel.shape)):
    failures.append("model: layers/dense/vars/0 differs from the weights")
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print(f"PASS: weights read by safetensors.numpy and numpy.load equal dtrain's ({len(want)} tensors, Keras names); "
      f"the model file's iterations are int64 ({want_iterations})")
