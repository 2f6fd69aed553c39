"""dtrain's losses, metrics and optimizers against Keras 3's own (JAX backend, from PyPI) on the same random
inputs: each loss's per-row values and the gradient of their sum with respect to y_pred (jax.grad); each
metric's result after several batches (its state summed across them, as across replicas and workers);
each optimizer's parameters after several steps; a small model's fit with sample_weight and class_weight.
usage: check_functions.py <interop_functions program>"""
import json
import os
import subprocess
import sys
import tempfile

os.environ["KERAS_BACKEND"] = "jax"
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

program = sys.argv[1]
rng = np.random.default_rng(7)
rows, cols = 6, 5


def f32(a):
    return np.asarray(a, dtype=np.float32)


logits = f32(rng.normal(0, 2, (rows, cols)))
probs = f32(rng.uniform(0.05, 0.95, (rows, cols)))
dist = f32(rng.uniform(0.05, 1.0, (rows, cols)))
dist /= dist.sum(axis=1, keepdims=True)
onehot = f32(np.eye(cols)[rng.integers(0, cols, rows)])
soft = f32(rng.uniform(0, 1, (rows, cols)))
labels = f32(rng.integers(0, cols, rows))
targets = f32(rng.normal(0, 2, (rows, cols)))


def cfg(name, **config):
    return {"class_name": name, "config": {"reduction": "none", **config}}


# (what, Keras loss, dtrain config, y_true, y_pred)
cases = [
    ("mean_absolute_error", keras.losses.MeanAbsoluteError(reduction=None), cfg("mean_absolute_error"), targets, logits),
    ("huber delta 1", keras.losses.Huber(reduction=None), cfg("huber", delta=1.0), targets, logits),
    ("huber delta 0.5", keras.losses.Huber(delta=0.5, reduction=None), cfg("huber", delta=0.5), targets, logits),
    ("kl_divergence", keras.losses.KLDivergence(reduction=None), cfg("kl_divergence"), dist, probs),
    ("cosine_similarity", keras.losses.CosineSimilarity(reduction=None), cfg("cosine_similarity"), targets, logits),
    ("mean_squared_error", keras.losses.MeanSquaredError(reduction=None), cfg("mean_squared_error"), targets, logits),
    ("categorical logits smoothed", keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1, reduction=None),
     cfg("categorical_crossentropy", from_logits=True, label_smoothing=0.1), onehot, logits),
    ("categorical probs smoothed", keras.losses.CategoricalCrossentropy(label_smoothing=0.2, reduction=None),
     cfg("categorical_crossentropy", from_logits=False, label_smoothing=0.2), onehot, probs),
    ("binary logits smoothed", keras.losses.BinaryCrossentropy(from_logits=True, label_smoothing=0.1, reduction=None),
     cfg("binary_crossentropy", from_logits=True, label_smoothing=0.1), soft, logits),
    ("binary probs smoothed", keras.losses.BinaryCrossentropy(label_smoothing=0.2, reduction=None),
     cfg("binary_crossentropy", from_logits=False, label_smoothing=0.2), soft, probs),
    ("sparse categorical logits", keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None),
     cfg("sparse_categorical_crossentropy", from_logits=True), labels, logits),
]

def batches(make, n=3):
    return [make() for _ in range(n)]


def scores():
    return f32(rng.uniform(0, 1, (8, 6)))


def binary_batch():
    return f32(rng.integers(0, 2, (8, 6))), scores()


def sparse_batch():
    return f32(rng.integers(0, 6, 8)), scores()


def onehot_batch():
    return f32(np.eye(6)[rng.integers(0, 6, 8)]), scores()


def regression_batch():
    return f32(rng.normal(0, 1, (8, 6))), f32(rng.normal(0, 1, (8, 6)))


def binary_logits_batch():
    return f32(rng.integers(0, 2, (8, 6))), f32(rng.normal(0, 2, (8, 6)))


def class_ids_batch():
    return f32(rng.integers(0, 6, 8)), f32(rng.integers(0, 6, 8))


def mcfg(name, **config):
    return {"class_name": name, "config": config}


label_weights = [1.0, 0.5, 2.0, 0.0, 1.5, 1.0]


# (what, Keras metric, dtrain config, batches)
metrics = [
    ("precision", keras.metrics.Precision(), mcfg("precision"), batches(binary_batch)),
    ("precision threshold 0.7", keras.metrics.Precision(thresholds=0.7), mcfg("precision", thresholds=0.7),
     batches(binary_batch)),
    ("precision top_k 2", keras.metrics.Precision(top_k=2), mcfg("precision", top_k=2), batches(binary_batch)),
    ("precision class_id 3", keras.metrics.Precision(class_id=3), mcfg("precision", class_id=3), batches(binary_batch)),
    ("recall", keras.metrics.Recall(), mcfg("recall"), batches(binary_batch)),
    ("recall top_k 3 class_id 1", keras.metrics.Recall(top_k=3, class_id=1), mcfg("recall", top_k=3, class_id=1),
     batches(binary_batch)),
    ("sparse top-5 accuracy", keras.metrics.SparseTopKCategoricalAccuracy(),
     mcfg("sparse_top_k_categorical_accuracy", k=5), batches(sparse_batch)),
    ("sparse top-2 accuracy", keras.metrics.SparseTopKCategoricalAccuracy(k=2),
     mcfg("sparse_top_k_categorical_accuracy", k=2), batches(sparse_batch)),
    ("top-3 categorical accuracy", keras.metrics.TopKCategoricalAccuracy(k=3), mcfg("top_k_categorical_accuracy", k=3),
     batches(onehot_batch)),
    ("mean absolute error", keras.metrics.MeanAbsoluteError(), mcfg("mean_metric_wrapper", loss=cfg("mean_absolute_error")),
     batches(regression_batch)),
    ("auc", keras.metrics.AUC(), mcfg("auc"), batches(binary_batch)),
    ("auc PR", keras.metrics.AUC(curve="PR"), mcfg("auc", curve="PR"), batches(binary_batch)),
    ("auc 50 thresholds minoring", keras.metrics.AUC(num_thresholds=50, summation_method="minoring"),
     mcfg("auc", num_thresholds=50, summation_method="minoring"), batches(binary_batch)),
    ("auc PR majoring", keras.metrics.AUC(curve="PR", summation_method="majoring"),
     mcfg("auc", curve="PR", summation_method="majoring"), batches(binary_batch)),
    ("auc from_logits", keras.metrics.AUC(from_logits=True), mcfg("auc", from_logits=True), batches(binary_logits_batch)),
    ("auc uneven thresholds", keras.metrics.AUC(thresholds=[0.1, 0.3, 0.35, 0.8]),
     mcfg("auc", thresholds=[0.1, 0.3, 0.35, 0.8]), batches(binary_batch)),
    ("auc label_weights", keras.metrics.AUC(label_weights=label_weights), mcfg("auc", label_weights=label_weights),
     batches(binary_batch)),
    ("auc multi_label PR", keras.metrics.AUC(curve="PR", multi_label=True, num_labels=6),
     mcfg("auc", curve="PR", multi_label=True, num_labels=6), batches(binary_batch)),
    ("auc multi_label label_weights", keras.metrics.AUC(multi_label=True, num_labels=6, label_weights=label_weights),
     mcfg("auc", multi_label=True, num_labels=6, label_weights=label_weights), batches(binary_batch)),
    ("mean_iou", keras.metrics.MeanIoU(num_classes=6), mcfg("mean_iou", num_classes=6), batches(class_ids_batch)),
    ("mean_iou argmax ignore_class 2", keras.metrics.MeanIoU(num_classes=6, sparse_y_pred=False, ignore_class=2),
     mcfg("mean_iou", num_classes=6, sparse_y_pred=False, ignore_class=2), batches(sparse_batch)),
]

def ocfg(name, **config):
    return {"class_name": name, "config": config}


start = f32(rng.normal(0, 1, 40))
steps = [f32(rng.normal(0, 1, 40)) for _ in range(6)]
# (what, Keras optimizer, dtrain config)
optimizers = [
    ("adagrad", keras.optimizers.Adagrad(learning_rate=0.05),
     ocfg("adagrad", learning_rate=0.05, initial_accumulator_value=0.1, epsilon=1e-7)),
    ("adamax", keras.optimizers.Adamax(learning_rate=0.02), ocfg("adamax", learning_rate=0.02, beta_1=0.9, beta_2=0.999,
                                                                  epsilon=1e-7)),
    ("nadam", keras.optimizers.Nadam(learning_rate=0.02), ocfg("nadam", learning_rate=0.02, beta_1=0.9, beta_2=0.999,
                                                                epsilon=1e-7)),
    ("lion", keras.optimizers.Lion(learning_rate=0.01), ocfg("lion", learning_rate=0.01, beta_1=0.9, beta_2=0.99)),
    ("adam", keras.optimizers.Adam(learning_rate=0.02), ocfg("adam", learning_rate=0.02, beta_1=0.9, beta_2=0.999,
                                                              epsilon=1e-7, amsgrad=False)),
    ("adam use_ema", keras.optimizers.Adam(learning_rate=0.02, use_ema=True, ema_momentum=0.9),
     ocfg("adam", learning_rate=0.02, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, use_ema=True,
          ema_momentum=0.9, ema_overwrite_frequency=None)),
    ("sgd use_ema overwrite every 4", keras.optimizers.SGD(learning_rate=0.05, momentum=0.5, use_ema=True,
                                                           ema_momentum=0.7, ema_overwrite_frequency=4),
     ocfg("SGD", learning_rate=0.05, momentum=0.5, nesterov=False, use_ema=True, ema_momentum=0.7,
          ema_overwrite_frequency=4)),
    ("sgd clipnorm", keras.optimizers.SGD(learning_rate=0.05, momentum=0.5, clipnorm=1.5),
     ocfg("SGD", learning_rate=0.05, momentum=0.5, nesterov=False, clipnorm=1.5)),
    ("adam clipvalue", keras.optimizers.Adam(learning_rate=0.02, clipvalue=0.4),
     ocfg("adam", learning_rate=0.02, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, clipvalue=0.4)),
    ("sgd global_clipnorm", keras.optimizers.SGD(learning_rate=0.05, global_clipnorm=2.0),
     ocfg("SGD", learning_rate=0.05, momentum=0.0, nesterov=False, global_clipnorm=2.0)),
    ("adam gradient_accumulation_steps 3, clipnorm", keras.optimizers.Adam(learning_rate=0.02, gradient_accumulation_steps=3,
                                                                          clipnorm=1.0),
     ocfg("adam", learning_rate=0.02, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, clipnorm=1.0,
          gradient_accumulation_steps=3)),
    ("adamw gradient_accumulation_steps 2 under a schedule", keras.optimizers.AdamW(
        learning_rate=keras.optimizers.schedules.ExponentialDecay(0.05, 2, 0.5), weight_decay=0.1,
        gradient_accumulation_steps=2),
     ocfg("adamw", learning_rate={"class_name": "ExponentialDecay", "config": {"initial_learning_rate": 0.05,
          "decay_steps": 2, "decay_rate": 0.5, "staircase": False}}, weight_decay=0.1, beta_1=0.9, beta_2=0.999,
          epsilon=1e-7, amsgrad=False, gradient_accumulation_steps=2)),
]
# the 40 parameters as Keras variables of these sizes (clipnorm clips each by its own norm)
variables = [10, 25, 5]

S = keras.optimizers.schedules
at = [0, 1, 3, 7, 10, 11, 25, 40, 100]
# (what, Keras schedule, dtrain config)
schedules = [
    ("polynomial", S.PolynomialDecay(0.1, 20), ocfg("PolynomialDecay", initial_learning_rate=0.1, decay_steps=20,
                                                    end_learning_rate=0.0001, power=1.0, cycle=False)),
    ("polynomial power 2 cycle", S.PolynomialDecay(0.1, 10, 0.01, power=2.0, cycle=True),
     ocfg("PolynomialDecay", initial_learning_rate=0.1, decay_steps=10, end_learning_rate=0.01, power=2.0, cycle=True)),
    ("inverse time", S.InverseTimeDecay(0.1, 5, 0.5), ocfg("InverseTimeDecay", initial_learning_rate=0.1, decay_steps=5,
                                                           decay_rate=0.5, staircase=False)),
    ("inverse time staircase", S.InverseTimeDecay(0.1, 5, 0.5, staircase=True),
     ocfg("InverseTimeDecay", initial_learning_rate=0.1, decay_steps=5, decay_rate=0.5, staircase=True)),
    ("cosine", S.CosineDecay(0.1, 30, alpha=0.1), ocfg("CosineDecay", initial_learning_rate=0.1, decay_steps=30, alpha=0.1,
                                                       warmup_target=None, warmup_steps=0)),
    ("cosine warmup", S.CosineDecay(0.0, 30, warmup_target=0.2, warmup_steps=10),
     ocfg("CosineDecay", initial_learning_rate=0.0, decay_steps=30, alpha=0.0, warmup_target=0.2, warmup_steps=10)),
    ("piecewise", S.PiecewiseConstantDecay([5, 20], [0.1, 0.05, 0.01]),
     ocfg("PiecewiseConstantDecay", boundaries=[5, 20], values=[0.1, 0.05, 0.01])),
]

fx = f32(rng.normal(0, 1, (22, 4)))  # batches of 8, 8 and 6
fy = f32(rng.integers(0, 3, 22))
fw = f32(rng.uniform(0, 2, 22))
start_weights = [f32(rng.normal(0, 0.5, (4, 3))), f32(rng.normal(0, 0.1, 3))]
sparse = {"class_name": "sparse_categorical_crossentropy", "config": {"from_logits": True, "reduction": "sum_over_batch_size"}}
# weighted metrics: (Keras metric, dtrain config)
sparse_weighted = [(keras.metrics.SparseCategoricalAccuracy(name="sparse_categorical_accuracy"),
                    mcfg("sparse_categorical_accuracy")),
                   (keras.metrics.SparseTopKCategoricalAccuracy(k=2, name="sparse_top_k_categorical_accuracy"),
                    mcfg("sparse_top_k_categorical_accuracy", k=2))]
onehot_weighted = [(keras.metrics.CategoricalAccuracy(name="categorical_accuracy"), mcfg("categorical_accuracy")),
                   (keras.metrics.AUC(name="auc", from_logits=True), mcfg("auc", from_logits=True)),
                   (keras.metrics.Precision(name="precision", top_k=1), mcfg("precision", top_k=1))]
# (what, dtrain loss config, Keras loss, y, fit's keyword arguments, weighted metrics): a Dense(3) trained by SGD(0.1)
fits = [
    ("fit sample_weight", sparse, keras.losses.SparseCategoricalCrossentropy(from_logits=True), fy,
     {"sample_weight": fw}, sparse_weighted),
    ("fit class_weight", sparse, keras.losses.SparseCategoricalCrossentropy(from_logits=True), fy,
     {"class_weight": {0: 2.0, 2: 0.5}}, sparse_weighted),
    ("fit one-hot class_weight", {"class_name": "categorical_crossentropy", "config": {"from_logits": True, "label_smoothing": 0.0, "reduction": "sum_over_batch_size"}},
     keras.losses.CategoricalCrossentropy(from_logits=True), f32(np.eye(3)[fy.astype(int)]),
     {"class_weight": {1: 3.0, 2: 0.25}}, onehot_weighted),
    ("fit one-hot sample_weight", {"class_name": "categorical_crossentropy", "config": {"from_logits": True, "label_smoothing": 0.0, "reduction": "sum_over_batch_size"}},
     keras.losses.CategoricalCrossentropy(from_logits=True), f32(np.eye(3)[fy.astype(int)]),
     {"sample_weight": fw}, onehot_weighted),
    ("fit mse sample_weight", {"class_name": "mean_squared_error", "config": {"reduction": "sum_over_batch_size"}}, keras.losses.MeanSquaredError(),
     f32(rng.normal(0, 1, (22, 3))), {"sample_weight": fw}, []),
]

d = tempfile.mkdtemp(prefix="dtrain-functions-")


def view(t, p):
    return {"y_true": t.ravel().tolist(), "true_shape": list(t.shape), "y_pred": p.ravel().tolist(), "shape": list(p.shape)}


with open(os.path.join(d, "cases.json"), "w") as f:
    json.dump([{"loss": c, **view(t, p)} for _, _, c, t, p in cases] +
              [{"metric": c, "batches": [view(t, p) for t, p in bs]} for _, _, c, bs in metrics] +
              [{"optimizer": c, "params": start.tolist(), "grads": [g.tolist() for g in steps], "variables": variables}
               for _, _, c in optimizers] +
              [{"schedule": c, "steps": at} for _, _, c in schedules] +
              [{"fit": c, "weights": np.concatenate([w.ravel() for w in start_weights]).tolist(), "x": fx.ravel().tolist(),
                "y": y.ravel().tolist(), "y_shape": list(y.shape), "batch_size": 8, "epochs": 2,
                "weighted_metrics": [mc for _, mc in wm],
                **{k: (v.tolist() if k == "sample_weight" else {str(c): w for c, w in v.items()}) for k, v in kw.items()}}
               for _, c, _, y, kw, wm in fits], f)
subprocess.run([program, os.path.join(d, "cases.json"), os.path.join(d, "out.json")], check=True)
ours = json.load(open(os.path.join(d, "out.json")))

failures = []
for (what, _, loss, y, kw, wm), got in zip(fits, ours[len(cases) + len(metrics) + len(optimizers) + len(schedules):]):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss, weighted_metrics=[km for km, _ in wm])
    model.set_weights(start_weights)
    h = model.fit(fx, y, batch_size=8, epochs=2, shuffle=False, verbose=0, **kw)
    want_eval = model.evaluate(fx, y, batch_size=8, verbose=0, sample_weight=kw.get("sample_weight"))
    want = np.concatenate([np.asarray(w).ravel() for w in model.get_weights()])
    if isinstance(want_eval, list):
        want_eval = want_eval[0]
    errs = {"weights": float(np.max(np.abs(np.asarray(got["weights"]) - want))),
            "evaluate": abs(got["evaluate"] - float(want_eval))}
    if sorted(got["history"]) != sorted(h.history):
        failures.append(f"{what}: logs {sorted(got['history'])}, Keras' {sorted(h.history)}")
        continue
    for k in h.history:
        errs[k] = float(np.max(np.abs(np.asarray(got["history"][k]) - np.asarray(h.history[k]))))
    if max(errs.values()) > 1e-5:
        failures.append(f"{what}: differs from Keras by {errs} (history {got['history']}, Keras {h.history})")
    else:
        print(f"{what}: weights, evaluate and epoch logs {sorted(h.history)} within {max(errs.values()):.1e} of "
              f"Keras {keras.__version__}")
for (what, schedule, _), got in zip(schedules, ours[len(cases) + len(metrics) + len(optimizers):]):
    want = np.asarray([float(schedule(s)) for s in at])
    err = float(np.max(np.abs(np.asarray(got["rates"]) - want)))
    if err > 1e-7:
        failures.append(f"{what}: rates {got['rates']} where Keras gives {want.tolist()}")
    else:
        print(f"{what} schedule: the rates at {len(at)} steps within {err:.1e} of Keras {keras.__version__}")
for (what, opt, _), got in zip(optimizers, ours[len(cases) + len(metrics):]):
    cuts = np.cumsum(variables)[:-1]
    var = [keras.Variable(v) for v in np.split(start, cuts)]
    for g in steps:
        opt.apply_gradients([(jnp.asarray(gv), v) for gv, v in zip(np.split(g, cuts), var)])
    opt.finalize_variable_values(var)
    want, have = np.concatenate([np.asarray(v) for v in var]), np.asarray(got["params"])
    err = float(np.max(np.abs(have - want) / (1.0 + np.abs(want))))
    if err > 1e-5:
        failures.append(f"{what}: parameters after {len(steps)} steps differ by {err:.2e} (Keras {want[:3]}, dtrain {have[:3]})")
    else:
        print(f"{what}: parameters after {len(steps)} steps within {err:.1e} of Keras {keras.__version__}")
for (what, metric, _, bs), got in zip(metrics, ours[len(cases):]):
    for t, p in bs:
        metric.update_state(t, p)
    want = float(metric.result())
    if abs(want - got["result"]) > 1e-6:
        failures.append(f"{what}: {got['result']} where Keras gives {want}")
    else:
        print(f"{what}: {got['result']:.6f}, as Keras {keras.__version__}")
for (what, loss, _, t, p), got in zip(cases, ours):
    per = np.asarray(loss(t, p))
    grad = np.asarray(jax.grad(lambda q: jnp.sum(loss(t, q)))(jnp.asarray(p)))
    for name, want, have in (("per-row loss", per, got["per_row"]), ("gradient", grad, got["grad"])):
        have = np.asarray(have).reshape(want.shape)
        err = np.max(np.abs(have - want) / (1e-5 + np.abs(want)).clip(min=1.0))
        if err > 1e-4:
            failures.append(f"{what}: {name} differs by {err:.2e} (Keras {want.ravel()[:4]}, dtrain {have.ravel()[:4]})")
        else:
            print(f"{what}: {name} within {err:.1e} of Keras {keras.__version__}")
if failures:
    print("FAIL:\n" + "\n".join(failures))
    sys.exit(1)
print(f"PASS: {len(cases)} losses equal Keras' values and gradients, {len(metrics)} metrics its results, "
      f"{len(optimizers)} optimizers its steps, {len(schedules)} schedules its rates, {len(fits)} weighted fits its own")
