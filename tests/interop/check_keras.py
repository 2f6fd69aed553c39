"""Keras 3 (JAX backend, from PyPI) and dtrain, both ways, on 100 Fashion-MNIST test images, for the
tutorial's CNN and a model of the layers real models add: weights saved by Keras, converted by
tools/keras_weights.py and loaded by dtrain give Keras' logits; weights trained by dtrain, converted back
and loaded by Keras give dtrain's logits.
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


def modern():  # keras_cnn.cpp's `modern`
    return keras.Sequential([keras.Input((28, 28)), keras.layers.Reshape((28, 28, 1), name="reshape"),
                             keras.layers.ZeroPadding2D(1, name="zero_padding2d"),
                             keras.layers.Conv2D(16, 3, strides=2, name="conv2d"),
                             keras.layers.LeakyReLU(name="leaky_re_lu"),
                             keras.layers.LayerNormalization(name="layer_normalization"),
                             keras.layers.SeparableConv2D(16, 3, padding="same", activation="relu",
                                                          name="separable_conv2d"),
                             keras.layers.Conv2D(32, 3, strides=2, padding="same", name="conv2d_1"),
                             keras.layers.BatchNormalization(name="batch_normalization"),
                             keras.layers.ReLU(name="re_lu"),
                             keras.layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2,
                                                          name="depthwise_conv2d"),
                             keras.layers.GlobalAveragePooling2D(name="global_average_pooling2d"),
                             keras.layers.Dense(10, name="dense")])


def randomize_normalization(model):  # gamma, beta and moving statistics away from their initial values
    rng = np.random.default_rng(3)
    for layer in model.layers:
        if isinstance(layer, (keras.layers.LayerNormalization, keras.layers.BatchNormalization)):
            w = layer.get_weights()  # gamma, beta[, moving_mean, moving_variance]
            new = [1 + 0.3 * rng.standard_normal(w[0].shape), 0.3 * rng.standard_normal(w[1].shape)]
            if len(w) == 4:
                new += [0.3 * rng.standard_normal(w[2].shape), rng.uniform(0.5, 2.0, w[3].shape)]
            layer.set_weights(new)


def run(*args):
    subprocess.run(list(args), check=True, stdout=subprocess.DEVNULL)


failures = []
report = []
for name, build in (("cnn", tutorial_cnn), ("modern", modern)):
    # Keras -> dtrain
    keras.utils.set_random_seed(7)
    k = build()
    randomize_normalization(k)
    k.save_weights(os.path.join(d, "keras.weights.h5"))
    run(sys.executable, converter, "to-dtrain", os.path.join(d, "keras.weights.h5"), os.path.join(d, "keras.safetensors"))
    run(program, name, "predict", os.path.join(d, "keras.safetensors"), d)
    images, dtrain_logits = np.load(os.path.join(d, "images.npy")), np.load(os.path.join(d, "logits.npy"))
    worst_in = float(np.max(np.abs(k.predict(images, verbose=0) - dtrain_logits)))
    if not worst_in <= tolerance:
        failures.append(f"{name}: Keras weights in dtrain: |logits difference| up to {worst_in:.3g}")
    # dtrain -> Keras
    run(program, name, "train", d)
    run(sys.executable, converter, "to-keras", os.path.join(d, "trained.safetensors"),
        os.path.join(d, "trained.weights.h5"))
    k2 = build()
    k2.load_weights(os.path.join(d, "trained.weights.h5"))
    images, dtrain_logits = np.load(os.path.join(d, "images.npy")), np.load(os.path.join(d, "logits.npy"))
    worst_out = float(np.max(np.abs(k2.predict(images, verbose=0) - dtrain_logits)))
    if not worst_out <= tolerance:
        failures.append(f"{name}: dtrain weights in Keras: |logits difference| up to {worst_out:.3g}")
    report.append(f"{name} {worst_in:.2g} / {worst_out:.2g}")
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print(f"PASS: Keras {keras.__version__} and dtrain agree both ways on 100 Fashion-MNIST images: max |logits "
      f"difference| (Keras weights in dtrain / dtrain weights in Keras): {', '.join(report)}")
