"""The parameter server tutorial's program (tf.distribute.ParameterServerStrategy with Keras Model.fit and
a DatasetCreator, TF_CONFIG from the environment), as the guide writes it: worker and ps tasks start a
tf.distribute.Server and join; the chief (the coordinator) trains the tutorial's CNN one epoch at a time,
and after each epoch evaluates a copy of the weights on the 10,000 test images on its own (outside the
strategy), so the time to a test accuracy can be read. It prints one JSON line: the fit time of each epoch,
the evaluation time of each and the test accuracy after each. Run by ps_run.py."""

import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import mnist_setup  # noqa: E402

per_worker_batch_size = 64
epochs = int(os.environ.get("SEED_EPOCHS", "5"))
steps_per_epoch = int(os.environ.get("SEED_STEPS_PER_EPOCH", "100"))

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
if cluster_resolver.task_type in ("worker", "ps"):
    # Start a TensorFlow server and wait.
    server = tf.distribute.Server(cluster_resolver.cluster_spec(), job_name=cluster_resolver.task_type,
                                  task_index=cluster_resolver.task_id, protocol=cluster_resolver.rpc_layer or "grpc",
                                  start=True)
    server.join()

NUM_PS = cluster_resolver.cluster_spec().num_tasks("ps")
variable_partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(min_shard_bytes=(256 << 10),
                                                                                  max_shards=NUM_PS)
strategy = tf.distribute.ParameterServerStrategy(cluster_resolver, variable_partitioner=variable_partitioner)


def dataset_fn(input_context):
    (x_train, y_train), _ = mnist_setup.load_data()
    x_train = x_train / mnist_setup.np.float32(255)
    dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train.astype(mnist_setup.np.int64)))
    dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return dataset.shuffle(60000).repeat().batch(per_worker_batch_size).prefetch(2)


dc = tf.keras.utils.experimental.DatasetCreator(dataset_fn)
with strategy.scope():
    model = mnist_setup.build_and_compile_cnn_model()
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.Adam(learning_rate=0.001), metrics=["accuracy"])
evaluator = mnist_setup.build_and_compile_cnn_model()  # the coordinator's own copy, outside the strategy
test = mnist_setup.test_dataset(1000)

fit_s, eval_s, accuracy = [], [], []
for epoch in range(epochs):
    start = time.perf_counter()
    model.fit(dc, epochs=1, steps_per_epoch=steps_per_epoch, verbose=0)
    fit_s.append(time.perf_counter() - start)
    start = time.perf_counter()
    evaluator.set_weights(model.get_weights())
    accuracy.append(evaluator.evaluate(test, verbose=0)[1])
    eval_s.append(time.perf_counter() - start)
print(json.dumps({"fit_s": fit_s, "eval_s": eval_s, "accuracy": accuracy, "tensorflow": tf.__version__}), flush=True)
