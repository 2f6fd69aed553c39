"""The multi-worker tutorial's mnist_setup.py, reading Fashion-MNIST from Debian's IDX files
(dataset-fashion-mnist, or DTRAIN_FASHION_MNIST_DIR) instead of downloading MNIST: the same format, the
same pipeline, the same model. Two additions, both outside the timed training: the test split, for the
test accuracy the table reports."""

import gzip
import os
import struct

import numpy as np
import tensorflow as tf

DIR = os.environ.get("DTRAIN_FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"


def load_idx(name):
    with gzip.open(os.path.join(DIR, name + ".gz")) as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_data():
    """tf.keras.datasets.mnist.load_data(), from the IDX files."""
    return ((load_idx("train-images-idx3-ubyte"), load_idx("train-labels-idx1-ubyte")),
            (load_idx("t10k-images-idx3-ubyte"), load_idx("t10k-labels-idx1-ubyte")))


def mnist_dataset(batch_size):
    (x_train, y_train), _ = load_data()
    # The `x` arrays are in uint8 and have values in the [0, 255] range.
    # You need to convert them to float32 with values in the [0, 1] range.
    x_train = x_train / np.float32(255)
    y_train = y_train.astype(np.int64)
    train_dataset = tf.data.Dataset.from_tensor_slices(
        (x_train, y_train)).shuffle(60000).repeat().batch(batch_size)
    return train_dataset


def test_dataset(batch_size):
    _, (x_test, y_test) = load_data()
    return tf.data.Dataset.from_tensor_slices((x_test / np.float32(255), y_test.astype(np.int64))).batch(batch_size)


def build_and_compile_cnn_model():
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(32, 3, activation='relu'),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation='relu'),
        tf.keras.layers.Dense(10)
    ])
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.001),
        metrics=['accuracy'])
    return model
