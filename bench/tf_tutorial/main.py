"""The multi-worker tutorial's main.py (MultiWorkerMirroredStrategy, TF_CONFIG from the environment), as
the tutorial runs it, with the time of model.fit and the test accuracy printed as one JSON line by the
chief. Run by run.py; by hand, per worker: TF_CONFIG='...' python main.py"""

import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import mnist_setup  # noqa: E402

per_worker_batch_size = 64
epochs = int(os.environ.get("SEED_EPOCHS", "3"))
steps_per_epoch = int(os.environ.get("SEED_STEPS_PER_EPOCH", "70"))
tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_setup.mnist_dataset(global_batch_size)

with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    multi_worker_model = mnist_setup.build_and_compile_cnn_model()

start = time.perf_counter()
multi_worker_model.fit(multi_worker_dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=0)
fit_s = time.perf_counter() - start

loss, accuracy = multi_worker_model.evaluate(mnist_setup.test_dataset(global_batch_size), verbose=0)
if tf_config['task']['index'] == 0:
    print(json.dumps({"fit_s": fit_s, "test_loss": loss, "test_accuracy": accuracy,
                      "samples": epochs * steps_per_epoch * global_batch_size,
                      "tensorflow": tf.__version__}), flush=True)
