"""Keras 3 (JAX backend, from PyPI) and dtrain, both ways, on the tutorial's CNN and 100 Fashion-MNIST
test images: weights saved by Keras, converted by tools/keras_weights.py and loaded by dtrain give
Keras' logits; weights trained by dtrain, converted back and loaded by Keras give dtrain's logits.
usage: check_keras.py <keras_cnn program> <tools/keras_weights.py>"""
import os
import subprocess
import sys
import tempfile

os.environ["KERAS_BACKEND"] = "jax"
import keras  # noqa: E402
import numpy as np  # noqa: E402

program, converter = sys.argv[1], sys.argv[2]
d = tempfile.mkdtemp(prefix="dtrain-keras-")
tolerance = 1e-5


def tutorial_cnn():  # the multi-worker tutorial's build_and_compile_cnn_model, layers named as dtrain names them
    return keras.Sequential([keras.Input((28, 28)), keras.layers.Reshape((28, 28, 1), name="reshape"),
                             keras.layers.Conv2D(32, 3, activation="relu", name="conv2d"),
                             keras.layers.Flatten(name="flatten"),
                             keras.layers.Dense(128, activation="relu", name="dense"),
                             keras.layers.Dense(10, name="dense_1")])


def run(*args):
    subprocess.run(list(args), check=True, stdout=subprocess.DEVNULL)


failures = []
# Keras -> dtrain
keras.utils.set_random_seed(7)
k = tutorial_cnn()
k.save_weights(os.path.join(d, "keras.weights.h5"))
run(sys.executable, converter, "to-dtrain", os.path.join(d, "keras.weights.h5"), os.path.join(d, "keras.safetensors"))
run(program, "predict", os.path.join(d, "keras.safetensors"), d)
images, dtrain_logits = np.load(os.path.join(d, "images.npy")), np.load(os.path.join(d, "logits.npy"))
keras_logits = k.predict(images, verbose=0)
worst_in = float(np.max(np.abs(keras_logits - dtrain_logits)))
if not worst_in <= tolerance:
    failures.append(f"Keras weights in dtrain: |logits difference| up to {worst_in:.3g}")
# dtrain -> Keras
run(program, "train", d)
run(sys.executable, converter, "to-keras", os.path.join(d, "trained.safetensors"), os.path.join(d, "trained.weights.h5"))
k2 = tutorial_cnn()
k2.load_weights(os.path.join(d, "trained.weights.h5"))
images, dtrain_logits = np.load(os.path.join(d, "images.npy")), np.load(os.path.join(d, "logits.npy"))
worst_out = float(np.max(np.abs(k2.predict(images, verbose=0) - dtrain_logits)))
if not worst_out <= tolerance:
    failures.append(f"dtrain weights in Keras: |logits difference| up to {worst_out:.3g}")
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print(f"PASS: Keras {keras.__version__} and dtrain agree both ways on 100 Fashion-MNIST images: "
      f"max |logits difference| {worst_in:.2g} (Keras weights in dtrain), {worst_out:.2g} (dtrain weights in Keras)")
