#!/usr/bin/python3
"""Writes the fuzzers' seed corpus (tests/fuzz/corpus/<name>/): small valid inputs of every format, so
fuzzing starts from the shapes real files have. Plain Python (no numpy); the output is in git. The
training_state seeds are written by dtrain itself (tests/fuzz/make_training_state_seed.cpp)."""
import gzip, io, json, os, struct, zipfile, zlib


class arr:
    """Just enough of an array: values, shape, a struct code and a NumPy descr."""

    def __init__(self, values, shape, code, descr):
        self.values, self.shape, self.code, self.descr = list(values), tuple(shape), code, descr
        self.ndim = len(self.shape)

    def tobytes(self, order="<"):
        return struct.pack(order + self.code * len(self.values), *self.values)

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(name, file, data):
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, file), "wb") as f:
        f.write(data)


# handshake: hello (48 bytes) + 10 rule bytes + 32 proof bytes
def hello(kind, accepted, world, rank, fp, port, auth, nonce):
    return struct.pack("<IHBBIIQHB5x16s", 0x48525444, 2, kind, accepted, world, rank, fp, port, auth, nonce)

for i, (kind, world, rank, auth) in enumerate([(1, 2, 1, 0), (2, 3, 2, 1), (1, 8, 7, 1), (2, 1, 0, 0)]):
    rules = bytes([kind, world, 0, rank, auth, 0, 0, 0, 0, 0])
    put("handshake", f"hello{i}", hello(kind, 0, world, rank, 0xFEED, 29500 + i, auth, bytes(range(16))) + rules + bytes(32))
put("handshake", "v1_hello", struct.pack("<IHBBIIQH6x", 0x48525444, 1, 1, 0, 2, 1, 0xFEED, 29500))


# safetensors: u64 header length, JSON header, data
def safetensors(tensors, meta):
    header, blob = {}, b""
    for name, a in tensors.items():
        b = a.tobytes()
        header[name] = {"dtype": {"f": "F32", "q": "I64"}[a.code], "shape": list(a.shape), "data_offsets": [len(blob), len(blob) + len(b)]}
        blob += b
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + blob

put("safetensors", "two", safetensors({"a": arr(range(6), (2, 3), "f", ""), "b": arr([1], (1,), "f", "")}, {"k": "v"}))
put("safetensors", "scalar", safetensors({"s": arr([3], (), "f", "")}, None))
put("safetensors", "empty", safetensors({}, {"format": "keras"}))
put("safetensors", "int64", safetensors({"optimizer/vars/0": arr([2**40 + 1], (), "q", ""), "w": arr([1, 2], (2,), "f", "")},
                                        {"format": "keras"}))


# npy / npz: first byte 0 = .npy, 1 = .npz
def npy(a):
    shape = "(" + "".join(f"{d}, " for d in a.shape)[:-2] + ("," if a.ndim == 1 else "") + ")"
    h = ("{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (a.descr, shape)).encode()
    h += b" " * (63 - (10 + len(h)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + a.tobytes()

for i, a in enumerate([arr(range(6), (2, 3), "f", "<f4"), arr(range(4), (4,), "q", "<i8"), arr([1, 2], (2,), "B", "|u1"),
                       arr([], (0, 3), "d", "<f8"), arr([2.5], (), "f", "<f4")]):
    put("npy", f"npy{i}", b"\0" + npy(a))
for compress in (False, True):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as z:
        z.writestr("x.npy", npy(arr([1, 1, 1, 1], (2, 2), "f", "<f4")))
        z.writestr("y.npy", npy(arr([0, 1], (2,), "i", "<i4")))
    put("npy", f"npz{int(compress)}", b"\1" + b.getvalue())


# IDX: 0 0 type ndims, big-endian u32 dims, big-endian data
def idx(a, code):
    return bytes([0, 0, code, a.ndim]) + b"".join(struct.pack(">I", d) for d in a.shape) + a.tobytes(">")

put("idx", "images_u8", idx(arr(range(18), (2, 3, 3), "B", ""), 0x08))
put("idx", "labels_u8", idx(arr([0, 9, 3], (3,), "B", ""), 0x08))
put("idx", "labels_i8", idx(arr([1, -1], (2,), "b", ""), 0x09))
put("idx", "i16", idx(arr([300, -2], (2,), "h", ""), 0x0B))
put("idx", "i32", idx(arr([1, 2, 3, 4], (2, 2), "i", ""), 0x0C))
put("idx", "f32", idx(arr([0.5, 1.5], (2,), "f", ""), 0x0D))
put("idx", "f64", idx(arr([0.25], (1,), "d", ""), 0x0E))
put("idx", "gz", gzip.compress(idx(arr([1, 2, 3], (3,), "B", ""), 0x08)))


# CSV: first byte = options (bit 0 header, bit 1 ';', bit 2 label column "label", else index >> 3)
put("csv", "header", b"\x05" + b"a,b,label\n1,2,0\n3.5,-4,1\n")
put("csv", "plain", b"\x00" + b"1,2,0\n3,4,1\n")
put("csv", "semicolon", b"\x03" + b"x;y\n1;2\n")
put("csv", "quoted", b"\x01" + b'"a","b"\n"1",2\n')


# cluster: first byte = resolver (0 TF_CONFIG, 1 Slurm, 2 torchrun, 3 hostlists), NUL-separated values
tf = {"cluster": {"worker": ["localhost:12345", "localhost:23456"]}, "task": {"type": "worker", "index": 0}}
put("cluster", "tf_config", b"\0" + json.dumps(tf).encode())
tf2 = {"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "[::1]:2223"], "evaluator": ["e:1"]},
       "task": {"type": "evaluator", "index": 0}}
put("cluster", "tf_config_chief", b"\0" + json.dumps(tf2).encode())
put("cluster", "slurm", b"\1" + b"\0".join([b"3", b"4", b"node[01-02]", b"2(x2)", b"29500", b"1", b"1"]))
put("cluster", "torchrun", b"\2" + b"\0".join([b"1", b"4", b"10.0.0.1", b"29500"]))
put("cluster", "hostlists", b"\3" + b"\0".join([b"gpu[001-004,010],cpu[1-2]x[3-4]", b"2(x3),1"]))


# PNG: signature, IHDR, (PLTE, tRNS), IDAT, IEND; every colour type, 16 bits, Adam7
def png(width, height, depth, ctype, rows, extra=b"", interlace=0):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\0" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, ctype, 0, 0, interlace)) +
            extra + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

put("png", "gray", png(3, 2, 8, 0, [bytes([0, 128, 255]), bytes([1, 2, 3])]))
put("png", "gray_alpha", png(2, 2, 8, 4, [bytes([9, 255, 10, 0]), bytes([11, 128, 12, 64])]))
put("png", "rgb", png(2, 2, 8, 2, [bytes(range(6)), bytes(range(6, 12))]))
put("png", "rgba_adam7", png(3, 3, 8, 6, [bytes(range(12))] * 3, interlace=1))
put("png", "rgb16", png(1, 2, 16, 2, [bytes(range(6)), bytes(range(6, 12))]))
put("png", "gray1", png(8, 1, 1, 0, [bytes([0b10110010])]))
pal = struct.pack(">I", 6) + b"PLTE" + bytes([255, 0, 0, 0, 0, 255])
pal += struct.pack(">I", zlib.crc32(b"PLTE" + bytes([255, 0, 0, 0, 0, 255])))
trns = struct.pack(">I", 1) + b"tRNS" + b"\x80" + struct.pack(">I", zlib.crc32(b"tRNS\x80"))
put("png", "palette_trns", png(4, 1, 2, 3, [bytes([0b00010001])], extra=pal + trns))

# JPEG: written by Pillow (libjpeg-turbo) where it is installed: baseline 4:2:0, progressive, gray
try:
    from PIL import Image
    for name, mode, kw in (("baseline", "RGB", {}), ("progressive", "RGB", {"progressive": True}), ("gray", "L", {})):
        im = Image.new(mode, (9, 7))
        im.putdata([((x * 29) % 256, (x * 7) % 256, 90) if mode == "RGB" else (x * 13) % 256 for x in range(63)])
        out = io.BytesIO()
        im.save(out, "JPEG", quality=75, **kw)
        put("jpeg", name, out.getvalue())
except ImportError:
    print("make_corpus: no Pillow here: the jpeg seeds were not written")


# tfrecord: records framed with their masked CRC-32C; example: tf.train.Example protos (x: 4 floats,
# y: an int64, s: one bytes value)
def crc32c(data):
    crc = 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82f63b78 if crc & 1 else crc >> 1
    return crc ^ 0xffffffff


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xffffffff) + 0xa282ead8) & 0xffffffff


def framed(records):
    out = b""
    for r in records:
        n = struct.pack("<Q", len(r))
        out += n + struct.pack("<I", masked(n)) + r + struct.pack("<I", masked(r))
    return out


def varint(v):
    out = b""
    while True:
        out += bytes([(v & 0x7f) | (0x80 if v >= 0x80 else 0)])
        v >>= 7
        if not v:
            return out


def field(number, data):
    return varint(number << 3 | 2) + varint(len(data)) + data


def example(features):
    return field(1, b"".join(field(1, field(1, k) + field(2, v)) for k, v in features))


ex = example([(b"x", field(2, field(1, struct.pack("<4f", 1, 2, 3, 4)))), (b"y", field(3, field(1, varint(7)))),
              (b"s", field(1, field(1, b"cat")))])
put("example", "full", ex)
put("example", "default_y", example([(b"x", field(2, field(1, struct.pack("<4f", 0, -1, 0.5, 9)))), (b"s", field(1, field(1, b"")))]))
put("example", "unpacked", example([(b"x", field(2, b"".join(varint(1 << 3 | 5) + struct.pack("<f", v) for v in (1, 2, 3, 4)))),
                                    (b"y", field(3, varint(1 << 3) + varint(2**40))), (b"s", field(1, field(1, b"dog")))]))
# a SequenceExample: context {v: int64s}, feature lists f (two steps of 2 floats) and t (int64s)
steps = lambda feats: b"".join(field(1, f) for f in feats)
put("example", "sequence", field(1, field(1, field(1, b"v") + field(2, field(3, field(1, varint(3) + varint(4)))))) +
    field(2, field(1, field(1, b"f") + field(2, steps([field(2, field(1, struct.pack("<2f", 1, 2))),
                                                         field(2, field(1, struct.pack("<2f", 3, 4)))]))) +
             field(1, field(1, b"t") + field(2, steps([field(3, field(1, varint(5)))])))))

# bmp: 24 bits bottom-up (rows padded to 4 bytes), 8 bits with a palette top-down, 32 bits with bit masks;
def bmp(w, h, bpp, compression, extra, rows, header=40):
    stride = (w * bpp + 31) // 32 * 4
    data = b"".join(r.ljust(stride, b"\0") for r in rows)
    offset = 14 + header + len(extra)
    info = struct.pack("<IiiHHIIiiII", header, w, h, 1, bpp, compression, len(data), 2835, 2835, 0, 0).ljust(header, b"\0")
    return b"BM" + struct.pack("<IHHI", offset + len(data), 0, 0, offset) + info + extra + data


put("bmp", "rgb24", bmp(3, 2, 24, 0, b"", [bytes(range(9)), bytes(range(9, 18))]))
put("bmp", "palette8", bmp(4, -2, 8, 0, bytes([1, 2, 3, 0, 40, 50, 60, 0]), [bytes([0, 1, 1, 0]), bytes([1, 0, 0, 1])]))
put("bmp", "fields32", bmp(2, 1, 32, 3, struct.pack("<4I", 0xff, 0xff00, 0xff0000, 0xff000000), [bytes(range(8))], 40))
# 1 and 16 bits, and run-length encoded 8 and 4 bits (runs, a delta, a padded literal, end of line and of bitmap)
three = bytes([1, 2, 3, 0, 40, 50, 60, 0, 200, 210, 220, 0])
put("bmp", "mono1", bmp(10, 1, 1, 0, three[:8], [bytes([0b10110000, 0b01000000])]))
put("bmp", "rgb555", bmp(2, 1, 16, 0, b"", [struct.pack("<2H", 0x7fff, 0x443)]))
put("bmp", "rle8", bmp(4, 3, 8, 1, three, [bytes([3, 1, 1, 2, 0, 0, 0, 2, 1, 0, 0, 3, 2, 1, 2, 0, 0, 0, 2, 2, 0, 1])]))
put("bmp", "rle4", bmp(5, 2, 4, 2, three, [bytes([0, 3, 0x21, 0, 2, 0x11, 0, 0, 5, 0x12, 0, 1])]))


# gif: written without compression (a clear code before the table would grow), first frame interlaced
def gif(w, h, pixels, interlace=False, transparent=None):
    colours = bytes([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255])
    out = b"GIF89a" + struct.pack("<HHBBB", w, h, 0xf1, 0, 0) + colours
    if transparent is not None:
        out += b"\x21\xf9\x04" + bytes([1, 0, 0, transparent, 0])
    out += b"\x2c" + struct.pack("<HHHHB", 0, 0, w, h, 0x40 if interlace else 0)
    rows = list(range(h))
    if interlace:
        rows = [y for start, step in ((0, 8), (4, 8), (2, 4), (1, 2)) for y in range(start, h, step)]
    codes, clear, width = [], 4, 3  # 2-bit pixels: code size 2, codes of 3 bits
    for k, p in enumerate(p for y in rows for p in pixels[y * w:(y + 1) * w]):
        if k % 2 == 0:
            codes.append(clear)
        codes.append(p)
    codes.append(clear + 1)
    bits = 0
    n = 0
    for c in codes:
        bits |= c << n
        n += width
    data = bits.to_bytes((n + 7) // 8, "little")
    out += bytes([2]) + b"".join(bytes([len(data[i:i + 255])]) + data[i:i + 255] for i in range(0, len(data), 255)) + b"\0"
    return out + b";"


put("gif", "plain", gif(3, 2, [0, 1, 2, 3, 2, 1]))
put("gif", "interlaced", gif(2, 5, [0, 1, 2, 3, 0, 1, 2, 3, 0, 1], interlace=True, transparent=2))
put("tfrecord", "two", framed([ex, b"plain bytes"]))
put("tfrecord", "empty_record", framed([b""]))
put("tfrecord", "gzip", gzip.compress(framed([ex]), mtime=0))
