#!/usr/bin/env python3
"""Moves a model's weights between Keras 3 and dtrain. Both name a variable the same way,
layers/<layer>/vars/<i> (Keras' .weights.h5 groups, dtrain's safetensors tensors), with the same shapes
and layouts (dense kernels (in, out), conv2d kernels (kh, kw, in, out)), so converting copies tensors:

  keras_weights.py to-dtrain model.weights.h5 model.safetensors   # then checkpoint::load_weights
  keras_weights.py to-keras  model.safetensors model.weights.h5   # then model.load_weights in Keras

Needs numpy, h5py and safetensors (pip install h5py safetensors). The Keras model and the dtrain model
must be the same architecture with the same layer names (Keras numbers them per session: build the model
first in a fresh process, or name the layers); loading checks every name and shape. dtrain's optimizer
tensors (optimizer/vars/*) are not weights and are not converted (.weights.h5 holds none)."""
import sys

import h5py
import numpy as np
from safetensors.numpy import load_file, save_file


def keras_to_dtrain(src, dst):
    tensors = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and name.startswith("layers/"):
            tensors[name] = np.ascontiguousarray(obj[()], dtype=np.float32)

    with h5py.File(src, "r") as f:
        f.visititems(visit)
    if not tensors:
        sys.exit(f"keras_weights: {src} holds no layers/*/vars/* datasets: not a Keras 3 .weights.h5 file")
    save_file(tensors, dst, metadata={"format": "keras", "converted_from": "keras .weights.h5"})
    return len(tensors)


def dtrain_to_keras(src, dst):
    tensors = {k: v for k, v in load_file(src).items() if k.startswith("layers/")}
    if not tensors:
        sys.exit(f"keras_weights: {src} holds no layers/*/vars/* tensors: not a dtrain weights file")
    with h5py.File(dst, "w") as f:
        for name, value in tensors.items():
            f.create_dataset(name, data=value)
    return len(tensors)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("to-dtrain", "to-keras"):
        sys.exit(__doc__)
    n = (keras_to_dtrain if sys.argv[1] == "to-dtrain" else dtrain_to_keras)(sys.argv[2], sys.argv[3])
    print(f"keras_weights: {n} tensors {sys.argv[2]} -> {sys.argv[3]}")
