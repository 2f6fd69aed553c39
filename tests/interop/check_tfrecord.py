"""TFRecord files written by TensorFlow itself (tf.io.TFRecordWriter, plain, GZIP and ZLIB, of
tf.train.Example protos) read by dtrain's tfrecord_dataset and parse_single_example: every record in
order, every feature's values equal (floats bit for bit, int64s, bytes, a default where a record lacks the
feature); SequenceExamples with variable-length context features and feature lists (some missing) parsed
as TensorFlow parses them; a file with a flipped byte is refused by both; and files dtrain writes
(tfrecord_writer, serialize_example, serialize_sequence_example) read by TensorFlow with the values dtrain
was given.
usage: check_tfrecord.py <interop_tfrecord program>"""
import json
import os
import subprocess
import sys
import tempfile

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

program = sys.argv[1]
rng = np.random.default_rng(3)
d = tempfile.mkdtemp(prefix="dtrain-tfrecord-")
feature = tf.train.Feature


def record(i):
    f = {"image": feature(float_list=tf.train.FloatList(value=rng.normal(0, 10, 6).astype(np.float32))),
         "label": feature(int64_list=tf.train.Int64List(value=[int(rng.integers(-1000, 1000))])),
         "name": feature(bytes_list=tf.train.BytesList(value=[f"image-{i}.png".encode()]))}
    if i % 3:  # the others take the default
        f["ids"] = feature(int64_list=tf.train.Int64List(value=[int(v) for v in rng.integers(-(2**20), 2**20, 3)]))
    return tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString()


spec = {"image": tf.io.FixedLenFeature([2, 3], tf.float32), "label": tf.io.FixedLenFeature([], tf.int64),
        "ids": tf.io.FixedLenFeature([3], tf.int64, default_value=[-1, -1, -1]),
        "name": tf.io.FixedLenFeature([], tf.string)}
failures = []
for compression in ("none", "GZIP", "ZLIB"):
    files = [os.path.join(d, f"{compression}-{k}.tfrecord") for k in range(2)]
    options = tf.io.TFRecordOptions(compression_type="" if compression == "none" else compression)
    for k, path in enumerate(files):
        with tf.io.TFRecordWriter(path, options) as w:
            for i in range(4 + k):
                w.write(record(10 * k + i))
    out = os.path.join(d, "out.json")
    subprocess.run([program, out, compression] + files, check=True)
    ours = json.load(open(out))
    ds = tf.data.TFRecordDataset(files, compression_type=options.compression_type)
    theirs = [tf.io.parse_single_example(r, spec) for r in ds]
    if len(ours) != len(theirs):
        failures.append(f"{compression}: {len(ours)} records where TensorFlow reads {len(theirs)}")
        continue
    for i, (a, b) in enumerate(zip(ours, theirs)):
        for name in ("image", "label", "ids"):
            want = b[name].numpy().astype(np.float32).ravel()
            if not np.array_equal(np.asarray(a[name], dtype=np.float32), want):
                failures.append(f"{compression} record {i} {name}: {a[name]} where TensorFlow parses {want.tolist()}")
        if a["name"] != b["name"].numpy().decode():
            failures.append(f"{compression} record {i} name: {a['name']!r}")
    print(f"{compression}: {len(ours)} records in 2 files, every feature as TensorFlow {tf.__version__} parses it")

# the other way: examples dtrain serializes and writes, read by TensorFlow
for compression in ("none", "GZIP", "ZLIB"):
    given = [{"image": rng.normal(0, 10, 6).astype(np.float32).tolist(), "label": int(rng.integers(-2**40, 2**40)),
              "name": f"written-{i}.png", **({"ids": [int(v) for v in rng.integers(-(2**50), 2**50, 3)]} if i % 2 else {})}
             for i in range(5)]
    src, path = os.path.join(d, "given.json"), os.path.join(d, f"dtrain-{compression}.tfrecord")
    json.dump(given, open(src, "w"))
    subprocess.run([program, "write", src, compression, path], check=True)
    ds = tf.data.TFRecordDataset([path], compression_type="" if compression == "none" else compression)
    theirs = [tf.io.parse_single_example(r, spec) for r in ds]
    if len(theirs) != len(given):
        failures.append(f"dtrain-written {compression}: TensorFlow reads {len(theirs)} records of {len(given)}")
        continue
    for i, (g, b) in enumerate(zip(given, theirs)):
        same = (np.array_equal(b["image"].numpy().ravel(), np.asarray(g["image"], dtype=np.float32)) and
                int(b["label"].numpy()) == g["label"] and b["name"].numpy().decode() == g["name"] and
                b["ids"].numpy().tolist() == g.get("ids", [-1, -1, -1]))
        if not same:
            failures.append(f"dtrain-written {compression} record {i}: TensorFlow parses {b}, dtrain was given {g}")
    print(f"dtrain-written {compression}: {len(given)} records read by TensorFlow with the values given")

# SequenceExamples: TensorFlow's read by dtrain (context of fixed and variable length, feature lists)
def sequence(i):
    steps = 2 + i % 3
    context = {"length": feature(int64_list=tf.train.Int64List(value=[steps])),
               "tags": feature(bytes_list=tf.train.BytesList(value=[f"t{k}".encode() for k in range(i % 3)])),
               "weights": feature(float_list=tf.train.FloatList(value=rng.normal(0, 1, i % 4).astype(np.float32)))}
    lists = {"tokens": tf.train.FeatureList(feature=[feature(int64_list=tf.train.Int64List(
                 value=[int(rng.integers(0, 1000))])) for _ in range(steps)]),
             "frames": tf.train.FeatureList(feature=[feature(float_list=tf.train.FloatList(
                 value=rng.normal(0, 5, 2).astype(np.float32))) for _ in range(steps)])}
    if i % 3:  # variable-length steps (some empty); the others lack the list
        lists["ragged"] = tf.train.FeatureList(feature=[feature(int64_list=tf.train.Int64List(
            value=rng.integers(-50, 50, (i + k) % 4))) for k in range(steps)])
    if i % 2:  # the others lack the list (allow_missing)
        lists["words"] = tf.train.FeatureList(feature=[feature(bytes_list=tf.train.BytesList(value=[f"w{k}".encode()]))
                                                       for k in range(steps)])
    return tf.train.SequenceExample(context=tf.train.Features(feature=context),
                                    feature_lists=tf.train.FeatureLists(feature_list=lists)).SerializeToString()


context_spec = {"length": tf.io.FixedLenFeature([], tf.int64), "tags": tf.io.VarLenFeature(tf.string),
                "weights": tf.io.VarLenFeature(tf.float32)}
list_spec = {"tokens": tf.io.FixedLenSequenceFeature([], tf.int64), "frames": tf.io.FixedLenSequenceFeature([2], tf.float32),
             "words": tf.io.FixedLenSequenceFeature([], tf.string, allow_missing=True), "ragged": tf.io.VarLenFeature(tf.int64)}
path = os.path.join(d, "sequences.tfrecord")
with tf.io.TFRecordWriter(path) as w:
    for i in range(6):
        w.write(sequence(i))
out = os.path.join(d, "sequences.json")
subprocess.run([program, "read-sequences", out, path], check=True)
ours = json.load(open(out))
theirs = [tf.io.parse_single_sequence_example(r, context_spec, list_spec) for r in tf.data.TFRecordDataset([path])]
for i, (a, (ctx, lists)) in enumerate(zip(ours, theirs)):
    want = {"length": ctx["length"].numpy(), "tags": ctx["tags"].values.numpy(), "weights": ctx["weights"].values.numpy(),
            "tokens": lists["tokens"].numpy(), "frames": lists["frames"].numpy(), "words": lists["words"].numpy()}
    for name, w_ in want.items():
        if w_.dtype == object:
            same = a[name] == [b.decode() for b in w_.ravel()]
        else:
            same = (np.array_equal(np.asarray(a[name], dtype=np.float32), w_.astype(np.float32).ravel()) and
                    list(a[name + "_shape"]) == list(w_.shape))
        if not same:
            failures.append(f"SequenceExample {i} {name}: dtrain {a.get(name)} where TensorFlow parses {w_.tolist()}")
    # a variable-length list: TF's SparseTensor, from the values and each step's length dtrain gives
    lengths, sparse = a["ragged_lengths"], lists["ragged"]
    indices = [[s, j] for s, n in enumerate(lengths) for j in range(n)]
    shape = [len(lengths), max(lengths, default=0)]
    if (a["ragged"] != sparse.values.numpy().astype(np.float32).tolist() or indices != sparse.indices.numpy().tolist()
            or shape != sparse.dense_shape.numpy().tolist()):
        failures.append(f"SequenceExample {i} ragged: dtrain {a['ragged']} in steps of {lengths} where TensorFlow "
                        f"parses {sparse}")
if len(ours) != len(theirs):
    failures.append(f"SequenceExamples: dtrain read {len(ours)}, TensorFlow {len(theirs)}")
print(f"{len(ours)} SequenceExamples (VarLenFeature in the context and the lists, FixedLenSequenceFeature) as "
      "TensorFlow parses them")
# and the other way: SequenceExamples dtrain serializes, parsed by TensorFlow
given = [{"length": 3 + i, "tags": [f"g{k}" for k in range(i)], "tokens": [int(v) for v in rng.integers(0, 99, 3 + i)],
          "frames": rng.normal(0, 1, (3 + i, 2)).astype(np.float32).tolist(),
          "ragged": [[int(v) for v in rng.integers(0, 9, k % 3)] for k in range(i + 1)]} for i in range(3)]
src, path = os.path.join(d, "given-sequences.json"), os.path.join(d, "dtrain-sequences.tfrecord")
json.dump(given, open(src, "w"))
subprocess.run([program, "write-sequences", src, path], check=True)
theirs = [tf.io.parse_single_sequence_example(r, context_spec, list_spec) for r in tf.data.TFRecordDataset([path])]
for i, (g, (ctx, lists)) in enumerate(zip(given, theirs)):
    same = (int(ctx["length"].numpy()) == g["length"] and [b.decode() for b in ctx["tags"].values.numpy()] == g["tags"]
            and lists["tokens"].numpy().tolist() == g["tokens"]
            and np.array_equal(lists["frames"].numpy(), np.asarray(g["frames"], dtype=np.float32))
            and lists["words"].numpy().shape == (0,)
            and tf.sparse.to_dense(lists["ragged"]).numpy().tolist()
            == [r + [0] * (max(map(len, g["ragged"])) - len(r)) for r in g["ragged"]])
    if not same:
        failures.append(f"dtrain-written SequenceExample {i}: TensorFlow parses {ctx}, {lists}; dtrain was given {g}")
if len(theirs) != len(given):
    failures.append(f"dtrain-written SequenceExamples: TensorFlow reads {len(theirs)} of {len(given)}")
print(f"{len(given)} SequenceExamples dtrain wrote, parsed by TensorFlow with the values given")

# a flipped byte inside the second record's data: TensorFlow reports data loss, dtrain an error naming it
path = os.path.join(d, "none-0.tfrecord")
data = bytearray(open(path, "rb").read())
first = int.from_bytes(data[:8], "little")
data[16 + first + 12 + 5] ^= 0x10
open(path, "wb").write(bytes(data))
try:
    list(tf.data.TFRecordDataset([path]))
    failures.append("TensorFlow read the damaged file")
except tf.errors.DataLossError:
    pass
r = subprocess.run([program, os.path.join(d, "bad.json"), "none", path], capture_output=True, text=True)
if r.returncode == 0 or "fails its checksum" not in r.stderr:
    failures.append(f"dtrain on the damaged file: exit {r.returncode}, {r.stderr.strip()!r}")
else:
    print(f"a damaged record: {r.stderr.strip()}")
if failures:
    print("FAIL:\n" + "\n".join(failures))
    sys.exit(1)
print(f"PASS: TFRecord files and tf.train.Example records of TensorFlow {tf.__version__} read alike, both ways")
