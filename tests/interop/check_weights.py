"""Runs interop_run and reads the weights it saved with the real packages: safetensors.numpy.load_file
(the safetensors file) and numpy.load (the .npz), each equal to the values the program wrote as JSON,
with Keras' names and shapes. usage: check_weights.py <interop_run program>"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
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
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print(f"PASS: weights read by safetensors.numpy and numpy.load equal dtrain's ({len(want)} tensors, Keras names)")
