#!/usr/bin/env python3
"""TensorFlow/Keras peer of bench/train_throughput: the same two Keras models, trained as TensorFlow's
multi-worker tutorial trains them.

train_throughput starts one co-process per thread count (TensorFlow fixes its thread pools when it
starts) with the interpreter of the peer virtual environment (bench/peers/venv.sh), and sends it one
request per line; each answer is one JSON line. By hand:

  DTRAIN_TF_THREADS=2 python bench/tf_train.py serve    # then type: cnn 64 2 0.25 7
  DTRAIN_TF_THREADS=2 python bench/tf_train.py rss cnn 64 2 30  # peak RSS of a training run, JSON

Requests: `<model> <batch> <threads> <seconds per window> <windows>` (threads must equal DTRAIN_TF_THREADS;
the model's name may end in `:mixed_bfloat16` or `:mixed_float16`, Keras' dtype policy for the model);
answers `{"ok": true, "ms_per_step": ..., "samples_per_s": ..., "mode": ...}`.

The step is `model.train_on_batch(x, y)` of a model compiled with Adam(1e-3), SparseCategoricalCrossentropy
(from_logits=True) and the accuracy metric: Keras' own compiled train step (a tf.function, XLA where
Keras' jit_compile="auto" picks it). Each request times both jit_compile settings ("auto" and False) and
answers the faster one ("best setting"); `mode` says which.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # no start-up banners on the pipe
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from step_timing import report_rss, serve, time_steps  # noqa: E402

THREADS = int(os.environ.get("DTRAIN_TF_THREADS", "1"))

try:
    import numpy as np
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(THREADS)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras
except Exception as e:  # noqa: BLE001 - any import failure means "no peer"
    print(json.dumps({"ok": False, "error": f"no tensorflow: {e}"}), flush=True)
    sys.exit(0)


def resnet20():
    """examples/mnist_models.hpp's ResNet-20: convolutions without bias, each followed by batch normalization
    (momentum 0.9); a stage's first block strided, its shortcut a strided 1 x 1 convolution."""
    layers = keras.layers

    def conv_bn(h, filters, kernel, strides=1):
        padding = "same" if kernel > 1 else "valid"
        h = layers.Conv2D(filters, kernel, strides=strides, padding=padding, use_bias=False)(h)
        return layers.BatchNormalization(momentum=0.9, epsilon=1e-3)(h)

    inputs = keras.Input((28, 28))
    h = layers.ReLU()(conv_bn(layers.Reshape((28, 28, 1))(inputs), 16, 3))
    for filters in (16, 32, 64):
        for i in range(3):
            strides = 2 if i == 0 and filters != 16 else 1
            r = conv_bn(layers.ReLU()(conv_bn(h, filters, 3, strides)), filters, 3)
            shortcut = h if strides == 1 else conv_bn(h, filters, 1, strides)
            h = layers.ReLU()(layers.Add()([r, shortcut]))
    return keras.Model(inputs, layers.Dense(10)(layers.GlobalAveragePooling2D()(h)))


def transformer(steps=128, vocab=256, width=256):
    """train_throughput.cpp's two GPT blocks: Keras' MultiHeadAttention with use_causal_mask, a learned
    position table added to the token embeddings (KerasHub's PositionEmbedding), normalization first."""
    layers = keras.layers

    class PositionEmbedding(layers.Layer):
        def build(self, shape):
            self.table = self.add_weight(shape=tuple(shape[1:]), initializer="glorot_uniform")

        def call(self, x):
            return x + self.table

    inputs = keras.Input((steps,), dtype="int32")
    h = PositionEmbedding()(layers.Embedding(vocab, width)(inputs))
    for _ in range(2):
        z = layers.LayerNormalization(epsilon=1e-3)(h)
        h = layers.Add()([h, layers.MultiHeadAttention(4, width // 4)(z, z, use_causal_mask=True)])
        z = layers.LayerNormalization(epsilon=1e-3)(h)
        h = layers.Add()([h, layers.Dense(width)(layers.Dense(4 * width, activation="gelu")(z))])
    return keras.Model(inputs, layers.Dense(vocab)(layers.LayerNormalization(epsilon=1e-3)(h)))


def make(model, batch, jit):
    """The Keras models of train_throughput.cpp, as TensorFlow's tutorials write them."""
    keras.utils.set_random_seed(0)
    model, _, policy = model.partition(":")
    keras.mixed_precision.set_dtype_policy(policy or "float32")  # the layers made below take it
    if model == "cnn":
        net = keras.Sequential([keras.Input((28, 28)), keras.layers.Reshape((28, 28, 1)),
                                keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.Flatten(),
                                keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)])
        x = np.random.rand(batch, 28, 28).astype("float32")
    elif model == "mlp":
        net = keras.Sequential([keras.Input((784,)), keras.layers.Dense(256, activation="relu"),
                                keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
        x = np.random.rand(batch, 784).astype("float32")
    elif model == "resnet20":
        net = resnet20()
        x = np.random.rand(batch, 28, 28).astype("float32")
    elif model == "transformer":
        net = transformer()
        x = np.random.randint(0, 256, (batch, 128)).astype("int32")
    elif model == "lstm":  # train_throughput.cpp's character LSTM
        net = keras.Sequential([keras.Input((64,), dtype="int32"), keras.layers.Embedding(256, 64),
                                keras.layers.LSTM(256, return_sequences=True), keras.layers.Dense(256)])
        x = np.random.randint(0, 256, (batch, 64)).astype("int32")
    else:
        raise ValueError(f"unknown model {model!r}")
    sequence = model in ("transformer", "lstm")
    y = np.random.randint(0, 256 if sequence else 10, x.shape[:2] if sequence else (batch,))
    y = y.astype("int64")
    net.compile(optimizer=keras.optimizers.Adam(1e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"], jit_compile=jit)
    x, y = tf.constant(x), tf.constant(y)  # a fed batch, as from a tf.data pipeline already in memory

    def step():
        return net.train_on_batch(x, y)

    return step


def measure(model, batch, threads, window_s, windows):
    if threads != THREADS:
        return {"ok": False, "error": f"this peer runs {THREADS} threads, asked for {threads}"}
    best = None
    for jit in ("auto", False):
        r = time_steps(make(model, batch, jit), batch, window_s, windows)
        r["mode"] = f"jit_compile={jit}"
        if best is None or r["ms_per_step"] < best["ms_per_step"]:
            best = r
    return best


def main(argv):
    mode = argv[1] if len(argv) > 1 else "serve"
    if mode == "rss":
        report_rss(make(argv[2], int(argv[3]), "auto"), int(argv[5]))
        return
    serve({"ok": True, "tensorflow": tf.__version__, "keras": keras.__version__, "threads": THREADS},
          lambda model, batch, threads, window_s, windows: measure(model, batch, int(threads), window_s, windows))


if __name__ == "__main__":
    main(sys.argv)
