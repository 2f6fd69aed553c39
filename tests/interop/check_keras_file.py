"""Keras 3 (JAX backend, from PyPI) and dtrain exchange whole models as .keras files, both ways, for six
models (tests/interop/model_files.cpp): a file dtrain writes opens with keras.saving.load_model and predicts
what dtrain predicts; a file Keras writes (model.save) loads into dtrain's type and predicts what Keras
predicts, also when Keras built the model on its own with names of its own (and an Activation("softmax")
for dtrain's Softmax layer); and a file of another architecture is refused, naming the layer that differs.
usage: check_keras_file.py <model_files program>"""
import os
import subprocess
import sys
import tempfile

os.environ["KERAS_BACKEND"] = "jax"
import keras  # noqa: E402
import numpy as np  # noqa: E402
from saved_arrays import arrays  # noqa: E402

program = sys.argv[1]
tolerance = 1e-5
failures, report = [], []


def predict(model, xs):
    ys = model.predict(xs if len(xs) > 1 else xs[0], verbose=0)
    return list(ys) if isinstance(ys, (list, tuple)) else [ys]


def worst(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b)) if len(a) == len(b) else float("inf")


def randomize(model, seed):  # new weights in Keras, moving variances positive
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        new = [0.5 * rng.standard_normal(w.shape).astype("float32") for w in layer.get_weights()]
        if isinstance(layer, keras.layers.BatchNormalization):
            new[3] = 0.5 + np.abs(new[3])
        layer.set_weights(new)


def dtrain_load(name, file, d):
    return subprocess.run([program, name, "load", file, d], capture_output=True, text=True)


for name in ("convnet", "decoder", "two_inputs", "recurrent", "attention", "masked"):
    d = tempfile.mkdtemp(prefix=f"dtrain-keras-file-{name}-")
    subprocess.run([program, name, "save", d], check=True)
    xs, ys = arrays(d, "x"), arrays(d, "y")
    # dtrain -> Keras
    model = keras.saving.load_model(os.path.join(d, "dtrain.keras"))
    out = worst(predict(model, xs), ys)
    if not out <= tolerance:
        failures.append(f"{name}: dtrain's file in Keras: |prediction difference| up to {out:.3g}")
    # Keras -> dtrain: new weights, saved by Keras
    randomize(model, 5)
    model.save(os.path.join(d, "keras.keras"))
    r = dtrain_load(name, os.path.join(d, "keras.keras"), d)
    if r.returncode != 0:
        failures.append(f"{name}: dtrain refused Keras' file: {r.stderr.strip()}")
        continue
    back = worst(arrays(d, "loaded_y"), predict(model, xs))
    if not back <= tolerance:
        failures.append(f"{name}: Keras' file in dtrain: |prediction difference| up to {back:.3g}")
    report.append(f"{name} {out:.2g} / {back:.2g}")


def convnet(filters, prefix):  # model_files.cpp's convnet, built in Keras with names of its own
    L = keras.layers
    return keras.Sequential([keras.Input((12, 12), name=f"{prefix}in"), L.Reshape((12, 12, 1), name=f"{prefix}reshape"),
                             L.ZeroPadding2D((1, 2), name=f"{prefix}pad"),
                             L.Conv2D(filters, 3, strides=2, activation="relu", name=f"{prefix}conv"),
                             L.BatchNormalization(name=f"{prefix}bn"), L.LeakyReLU(0.2, name=f"{prefix}leaky"),
                             L.SeparableConv2D(6, 3, padding="same", name=f"{prefix}separable"),
                             L.DepthwiseConv2D(3, padding="same", depth_multiplier=2, activation="relu",
                                               name=f"{prefix}depthwise"),
                             L.LayerNormalization(name=f"{prefix}ln"), L.MaxPooling2D(2, name=f"{prefix}pool"),
                             L.Flatten(name=f"{prefix}flatten"), L.Dropout(0.25, name=f"{prefix}dropout"),
                             L.Dense(8, activation="gelu", kernel_regularizer=keras.regularizers.L2(0.01),
                                     name=f"{prefix}hidden"),
                             L.Dense(3, name=f"{prefix}logits"),
                             L.Activation("softmax", name=f"{prefix}softmax")])  # dtrain's Softmax layer


d = tempfile.mkdtemp(prefix="dtrain-keras-file-own-")
subprocess.run([program, "convnet", "save", d], check=True)  # for the inputs
xs = arrays(d, "x")
own = convnet(4, "my_")
randomize(own, 9)
own.save(os.path.join(d, "own.keras"))
r = dtrain_load("convnet", os.path.join(d, "own.keras"), d)
if r.returncode != 0:
    failures.append(f"a model Keras built with its own names: dtrain refused it: {r.stderr.strip()}")
else:
    diff = worst(arrays(d, "loaded_y"), predict(own, xs))
    report.append(f"Keras' own convnet {diff:.2g}")
    if not diff <= tolerance:
        failures.append(f"a model Keras built with its own names: |prediction difference| up to {diff:.3g}")
other = convnet(5, "")
other.save(os.path.join(d, "other.keras"))
r = dtrain_load("convnet", os.path.join(d, "other.keras"), d)
expected = "layer 2 (conv2d in the model, conv in the file), a Conv2D, has filters = 5 in the file but 4 in the model"
if r.returncode != 1 or expected not in r.stderr:
    failures.append(f"another architecture: expected an error with '{expected}', got rc {r.returncode}: {r.stderr.strip()}")

# the attention model of model_files.cpp without the causal mask (a keyword argument of Keras' call)
L = keras.layers
text, memory = keras.Input((4, 6), name="text"), keras.Input((5, 8), name="memory")
attended = L.MultiHeadAttention(2, 3)(text, text)
crossed = L.MultiHeadAttention(2, 4)(attended, memory)
unmasked = keras.Model([text, memory], L.Dense(3)(L.LayerNormalization()(L.Add()([attended, crossed]))))
d = tempfile.mkdtemp(prefix="dtrain-keras-file-unmasked-")
subprocess.run([program, "attention", "save", d], check=True)  # for the inputs
unmasked.save(os.path.join(d, "unmasked.keras"))
r = dtrain_load("attention", os.path.join(d, "unmasked.keras"), d)
masked = "is called with use_causal_mask = false in the file but true in the model"
if r.returncode != 1 or masked not in r.stderr:
    failures.append(f"attention without the causal mask: expected an error with '{masked}', got rc {r.returncode}: "
                    f"{r.stderr.strip()}")

if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print(f"PASS: Keras {keras.__version__} and dtrain exchange .keras files both ways: max |prediction difference| "
      f"(dtrain's file in Keras / Keras' file in dtrain): {', '.join(report)}; another architecture refused: {expected}; "
      f"attention without its causal mask refused")
