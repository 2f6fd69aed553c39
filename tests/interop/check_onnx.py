"""onnxruntime (from PyPI) runs the ONNX files dtrain exports and predicts what dtrain predicts, for three
models (tests/interop/model_files.cpp: convolutions, pooling, normalizations, separable and depthwise
convolutions; an embedding, up-sampling and a transposed convolution; a functional model of two inputs
and two outputs), and the ONNX checker (the onnx package) accepts them with every shape inferred.
usage: check_onnx.py <model_files program>"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from saved_arrays import arrays

program = sys.argv[1]
tolerance = 1e-5
failures, report = [], []


for name in ("convnet", "decoder", "two_inputs"):
    d = tempfile.mkdtemp(prefix=f"dtrain-onnx-{name}-")
    subprocess.run([program, name, "save", d], check=True)
    path = os.path.join(d, "dtrain.onnx")
    model = onnx.load(path)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # noqa: BLE001 - any checker complaint is a failure
        failures.append(f"{name}: the ONNX checker refuses the file: {e}")
        continue
    xs, ys = arrays(d, "x"), arrays(d, "y")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {i.name: x for i, x in zip(session.get_inputs(), xs)}
    outs = session.run(None, feeds)
    if len(outs) != len(ys) or any(o.shape != y.shape for o, y in zip(outs, ys)):
        failures.append(f"{name}: onnxruntime's outputs have shapes {[o.shape for o in outs]}, dtrain's "
                        f"{[y.shape for y in ys]}")
        continue
    diff = max(float(np.max(np.abs(o - y))) for o, y in zip(outs, ys))
    if not diff <= tolerance:
        failures.append(f"{name}: onnxruntime and dtrain differ by up to {diff:.3g}")
    report.append(f"{name} {diff:.2g} ({len(model.graph.node)} nodes)")

if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print(f"PASS: onnxruntime {ort.__version__} runs dtrain's ONNX exports (opset 17, checked by onnx "
      f"{onnx.__version__}) as dtrain predicts: max |difference| {', '.join(report)}")
