"""Runs interop_run, reads its TensorBoard logs with the real tensorboard package and compares every
scalar with the History it wrote. usage: check_tensorboard.py <interop_run program>"""
import json
import os
import struct
import subprocess
import sys
import tempfile

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

log_dir = tempfile.mkdtemp(prefix="dtrain-tensorboard-")
subprocess.run([sys.argv[1], log_dir], check=True)
history = json.load(open(os.path.join(log_dir, "history.json")))
f32 = lambda v: struct.unpack("f", struct.pack("f", v))[0]  # the float32 dtrain logged


def load(run):
    acc = EventAccumulator(os.path.join(log_dir, run), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    return acc


train, validation = load("train"), load("validation")
failures = []


def expect(ok, what):
    if not ok:
        failures.append(what)


epochs = len(history["loss"])
checked = 0
for key, values in history.items():
    run, tag = (validation, "epoch_" + key[4:]) if key.startswith("val_") else (train, "epoch_" + key)
    events = run.Scalars(tag)
    expect([e.step for e in events] == list(range(epochs)), f"{tag}: steps {[e.step for e in events]}")
    expect([e.value for e in events] == [f32(v) for v in values],
           f"{tag}: {[e.value for e in events]} != history {values}")
    checked += len(values)
for tag in ("epoch_learning_rate", "epoch_steps_per_second"):
    events = train.Scalars(tag)
    expect(len(events) == epochs and all(e.value > 0 for e in events), f"{tag}: {events}")
expect(all(e.value == f32(0.01) for e in train.Scalars("epoch_learning_rate")), "learning rate is not 0.01")
# 6 batches per epoch (48 training rows of 8), batch scalars every 3 batches: steps 3, 6, ..., 24
batch_steps = [e.step for e in train.Scalars("batch_loss")]
expect(batch_steps == list(range(3, 25, 3)), f"batch_loss steps {batch_steps}")
expect(len(train.Scalars("batch_steps_per_second")) == len(batch_steps), "batch_steps_per_second")
for name, size in (("dense/kernel", 40), ("dense/bias", 8), ("dense_1/kernel", 16), ("dense_1/bias", 2)):
    hists = train.Histograms(name + "/histogram")
    expect([h.step for h in hists] == list(range(epochs)), f"{name}: histogram steps")
    expect(all(h.histogram_value.num == size and sum(h.histogram_value.bucket) == size for h in hists),
           f"{name}: histogram counts")
evaluations = validation.Scalars("evaluation_loss_vs_iterations")
expect([e.step for e in evaluations][-1:] == [24], f"evaluation_loss_vs_iterations steps {[e.step for e in evaluations]}")
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print(f"PASS: tensorboard read {checked} epoch scalars equal to the History, and the batch scalars, "
      f"learning rate, steps per second, histograms and evaluation")
