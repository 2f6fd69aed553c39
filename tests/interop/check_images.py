"""dtrain's PNG, JPEG, BMP and GIF decoders and bilinear resize against Pillow's decoders and Keras 3's
keras.ops.image.resize (JAX backend, antialias off: TF's half-pixel bilinear), on images Pillow writes:
PNG in every mode (gray, gray + alpha, RGB, RGBA, a palette with transparency, 16-bit gray), JPEG
(baseline 4:2:0, progressive, gray), BMP (24 bits, 8 with a colour or gray palette, 32 with bit masks, 1
bit), GIF (a palette, interlaced), and on BMPs put together here, of the kinds Pillow reads but does not
write (4 bits, run-length encoded 4 and 8 bits with every escape, 16 bits plain and with 5-6-5 bit masks),
each decoded to its own channels and converted.
usage: check_images.py <interop_images program>"""
import json
import os
import subprocess
import sys
import tempfile

os.environ["KERAS_BACKEND"] = "jax"
import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras.src.utils import dataset_utils  # noqa: E402
from PIL import Image  # noqa: E402

program = sys.argv[1]
rng = np.random.default_rng(11)
d = tempfile.mkdtemp(prefix="dtrain-images-")


def noise(h, w, c):
    return rng.integers(0, 256, (h, w, c), dtype=np.uint8)


def smooth(h, w):  # what JPEG keeps: a gradient with a little noise
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([40 + 3 * x + 2 * y, 200 - 2 * x, 90 + 4 * y], axis=-1)
    return np.clip(base + rng.integers(-6, 7, base.shape), 0, 255).astype(np.uint8)


files = {}
files["rgb.png"] = Image.fromarray(noise(9, 13, 3), "RGB")
files["rgba.png"] = Image.fromarray(noise(9, 13, 4), "RGBA")
files["gray.png"] = Image.fromarray(noise(9, 13, 1)[:, :, 0], "L")
files["gray_alpha.png"] = Image.fromarray(noise(9, 13, 2), "LA")
palette = Image.fromarray(noise(9, 13, 3), "RGB").quantize(16)
palette.info["transparency"] = 3
files["palette.png"] = palette
files["gray16.png"] = Image.fromarray(rng.integers(0, 65536, (9, 13), dtype=np.uint16))
files["baseline.jpg"] = Image.fromarray(smooth(24, 31), "RGB")
files["progressive.jpg"] = Image.fromarray(smooth(17, 20), "RGB")
files["gray.jpg"] = Image.fromarray(smooth(16, 16)[:, :, 0], "L")
files["rgb.bmp"] = Image.fromarray(noise(7, 13, 3), "RGB")  # 24 bits, rows padded
files["palette.bmp"] = Image.fromarray(noise(9, 5, 3), "RGB").quantize(40)  # 8 bits through a palette
files["gray.bmp"] = Image.fromarray(noise(6, 6, 1)[:, :, 0], "L")  # 8 bits, a gray palette
files["rgba.bmp"] = Image.fromarray(noise(5, 7, 4), "RGBA")  # 32 bits with bit masks
files["palette.gif"] = Image.fromarray(noise(11, 9, 3), "RGB").quantize(64)
files["interlaced.gif"] = Image.fromarray(noise(13, 6, 3), "RGB").quantize(16)
files["mono.bmp"] = Image.fromarray(noise(7, 10, 1)[:, :, 0] > 127).convert("1")  # 1 bit


def bmp(name, width, height, bpp, compression, pixels, palette=b"", masks=b""):
    """Writes a BMP of a 40-byte header, bit masks or a palette (BGRX), and `pixels` as stored."""
    import struct
    offset = 14 + 40 + len(masks) + len(palette)
    head = struct.pack("<IiiHHIIiiII", 40, width, height, 1, bpp, compression, len(pixels), 2835, 2835,
                       len(palette) // 4, 0)
    with open(os.path.join(d, name), "wb") as f:
        f.write(b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset) + head + masks + palette + pixels)


def rows_padded(rows):
    return b"".join(r + b"\0" * (-len(r) % 4) for r in rows)


def runs(indices, four):
    """RLE8 (or RLE4) of rows of colour indices, bottom row first: runs where an index repeats, odd and
    even literal runs, a delta over the start of one row, an end of line after each row, an end of bitmap."""
    out = bytearray()
    for r, row in enumerate(indices[::-1]):
        i = 0
        if r == 1:
            out += bytes([0, 2, 2, 0])  # delta: 2 right (left as index 0)
            i = 2
        while i < len(row):
            n = 1
            while i + n < len(row) and row[i + n] == row[i] and n < 255:
                n += 1
            if n >= 2 or len(row) - i < 3:  # a run of one index
                out += bytes([n, row[i] * 17 if four else row[i]])
                i += n
                continue
            n = min(len(row) - i, 3 + r % 3)  # a literal run, padded to 16 bits
            lit = bytes(row[i:i + n])
            if four:
                lit = bytes((lit[k] << 4) | (lit[k + 1] if k + 1 < n else 0) for k in range(0, n, 2))
            out += bytes([0, n]) + lit + b"\0" * (len(lit) % 2)
            i += n
        out += bytes([0, 0])
    return bytes(out + bytes([0, 1]))


def some_indices(h, w, colours):  # runs and changes
    return [[int(v) for v in np.repeat(rng.integers(0, colours, w), rng.integers(1, 4, w))[:w]] for _ in range(h)]


pal16, pal256 = noise(1, 16, 4).tobytes(), noise(1, 256, 4).tobytes()
four_bits = some_indices(5, 7, 16)
bmp("four.bmp", 7, 5, 4, 0, rows_padded([bytes((r[k] << 4) | (r[k + 1] if k + 1 < 7 else 0) for k in range(0, 7, 2))
                                         for r in four_bits[::-1]]), pal16)
bmp("rle8.bmp", 13, 6, 8, 1, runs(some_indices(6, 13, 200), False), pal256)
bmp("rle4.bmp", 11, 5, 4, 2, runs(some_indices(5, 11, 16), True), pal16)
words = rng.integers(0, 1 << 16, (4, 5), dtype=np.uint16)
bmp("rgb555.bmp", 5, 4, 16, 0, rows_padded([w.astype("<u2").tobytes() for w in words]))
bmp("rgb565.bmp", 5, -4, 16, 3, rows_padded([w.astype("<u2").tobytes() for w in words]),
    masks=np.array([0xF800, 0x7E0, 0x1F], "<u4").tobytes())  # top-down
for name, im in files.items():
    path = os.path.join(d, name)
    if name == "palette.png":
        im.save(path, transparency=3)
    elif name.endswith(".jpg"):
        im.save(path, quality=90, progressive=name.startswith("progressive"))
    elif name.endswith(".gif"):
        im.save(path, interlace=name.startswith("interlaced"))
    else:
        im.save(path)


def pillow(name, channels):
    """Pillow's decode of a file, converted as dtrain's channels ask (0: its own)."""
    im = Image.open(os.path.join(d, name))
    if name == "gray16.png":  # 16 bits scaled to 8, rounded
        a = np.asarray(im, dtype=np.float64)
        return np.floor(a * 255 / 65535 + 0.5)[:, :, None]
    if name == "rgba.bmp" and channels in (0, 4):  # 32 bits, the fourth byte alpha: TF keeps it, Pillow drops it
        return np.asarray(files[name], dtype=np.float64)
    if channels == 0 and name.endswith((".bmp", ".gif")):  # TF's: RGB
        mode = "RGB"
    elif channels == 0:
        mode = {"P": "RGBA" if "transparency" in im.info else "RGB"}.get(im.mode, im.mode)
    else:
        mode = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}[channels]
    a = np.asarray(im.convert(mode), dtype=np.float64)
    return a if a.ndim == 3 else a[:, :, None]


# (file, channels, size, tolerance): PNG exactly; 16-bit by one step; JPEG by one (another libjpeg-turbo
# build's rounding); conversions where the colour arithmetic is exact (gray to RGB, alpha added or dropped);
# BMP and GIF exactly, gray by Pillow's weights
cases = [("rgb.png", 0, None, 0), ("rgba.png", 0, None, 0), ("gray.png", 0, None, 0), ("gray_alpha.png", 0, None, 0),
         ("palette.png", 0, None, 0), ("palette.png", 3, None, 0), ("gray16.png", 0, None, 1),
         ("rgb.png", 4, None, 0), ("rgba.png", 3, None, 0), ("gray.png", 3, None, 0), ("gray.png", 4, None, 0),
         ("baseline.jpg", 0, None, 1), ("progressive.jpg", 0, None, 1), ("gray.jpg", 0, None, 1), ("gray.jpg", 3, None, 1),
         ("rgb.png", 0, [20, 31], 1e-3), ("rgb.png", 0, [5, 6], 1e-3), ("baseline.jpg", 0, [11, 40], 1e-3),
         ("rgb.bmp", 0, None, 0), ("rgb.bmp", 1, None, 0), ("rgb.bmp", 4, None, 0), ("palette.bmp", 0, None, 0),
         ("gray.bmp", 0, None, 0), ("rgba.bmp", 0, None, 0), ("rgba.bmp", 3, None, 0), ("palette.gif", 0, None, 0),
         ("palette.gif", 1, None, 0), ("interlaced.gif", 0, None, 0), ("interlaced.gif", 4, None, 0),
         ("mono.bmp", 0, None, 0), ("four.bmp", 0, None, 0), ("rle8.bmp", 0, None, 0), ("rle8.bmp", 1, None, 0),
         ("rle4.bmp", 0, None, 0), ("rgb555.bmp", 0, None, 0), ("rgb565.bmp", 0, None, 0), ("rgb565.bmp", 4, None, 0)]
# (file, size, aspect): resizes that keep the aspect ratio, cropping or padding first (both axes, odd margins)
aspects = [("rgb.png", [20, 31], "crop"), ("rgb.png", [31, 9], "crop"), ("baseline.jpg", [11, 40], "crop"),
           ("rgb.png", [20, 31], "pad"), ("rgb.png", [31, 9], "pad"), ("baseline.jpg", [30, 7], "pad"),
           ("gray.png", [8, 8], "crop"), ("gray.png", [8, 8], "pad")]
with open(os.path.join(d, "cases.json"), "w") as f:
    json.dump([{"path": os.path.join(d, n), "channels": c, "size": s} for n, c, s, _ in cases] +
              [{"path": os.path.join(d, n), "channels": 0, "size": s, "aspect": a} for n, s, a in aspects], f)
subprocess.run([program, os.path.join(d, "cases.json"), os.path.join(d, "out.json")], check=True)
ours = json.load(open(os.path.join(d, "out.json")))

failures = []
decoded = {}  # (file, channels) -> dtrain's decode, which the resize cases resize with Keras too
for (name, channels, size, tolerance), got in zip(cases, ours):
    what = f"{name} channels {channels}" + (f" resized to {size[0]} x {size[1]}" if size else "")
    have = np.asarray(got["values"], dtype=np.float64).reshape(got["shape"])
    if size:
        want = np.asarray(keras.ops.image.resize(decoded[(name, channels)].astype(np.float32), tuple(size),
                                                 interpolation="bilinear", antialias=False), dtype=np.float64)
    else:
        want = pillow(name, channels)
        decoded[(name, channels)] = have
    if have.shape != want.shape:
        failures.append(f"{what}: shape {have.shape} where {'Keras' if size else 'Pillow'} gives {want.shape}")
        continue
    err = float(np.max(np.abs(have - want)))
    if err > tolerance:
        failures.append(f"{what}: values differ by {err} (expected {want.ravel()[:4]}, dtrain {have.ravel()[:4]})")
    else:
        print(f"{what}: within {err:g} of " + ("Keras' resize" if size else "Pillow"))
for (name, size, aspect), got in zip(aspects, ours[len(cases):]):
    what = f"{name} resized to {size[0]} x {size[1]} with {aspect}_to_aspect_ratio"
    have = np.asarray(got["values"], dtype=np.float64).reshape(got["shape"])
    want = np.asarray(keras.ops.image.resize(decoded[(name, 0)].astype(np.float32), tuple(size), interpolation="bilinear",
                                             antialias=False, crop_to_aspect_ratio=aspect == "crop",
                                             pad_to_aspect_ratio=aspect == "pad"), dtype=np.float64)
    err = float(np.max(np.abs(have - want))) if have.shape == want.shape else float("inf")
    if err > 1e-3:
        failures.append(f"{what}: shape {have.shape}, Keras {want.shape}, values differ by {err}")
    else:
        print(f"{what}: within {err:g} of Keras' resize")
# image_dataset_from_directory, unshuffled: the files in the order Keras walks them, with its labels,
# inferred from class folders (files at several depths) and from a list
for labels in ("inferred", [3, 0, 1, 2, 1]):
    tree = tempfile.mkdtemp(prefix="dtrain-image-dir-")
    names = ["a/z.png", "a/sub/b.png", "a/sub/deep/c.png", "b/k.png", "b/a/m.png"]
    for k, name in enumerate(names):
        os.makedirs(os.path.dirname(os.path.join(tree, name)), exist_ok=True)
        Image.fromarray(np.full((6, 6, 3), 20 + 40 * k, dtype=np.uint8)).save(os.path.join(tree, name))
    json.dump(labels, open(os.path.join(d, "labels.json"), "w"))
    subprocess.run([program, "directory", tree, os.path.join(d, "labels.json"), os.path.join(d, "dir.json")], check=True)
    ours = json.load(open(os.path.join(d, "dir.json")))
    # Keras' own listing, what its image_dataset_from_directory reads (whose pipeline needs TensorFlow)
    paths, their_labels, _ = dataset_utils.index_directory(tree, labels, formats=(".png",), shuffle=False, verbose=False)
    gray = {os.path.join(tree, name): 20 + 40 * k for k, name in enumerate(names)}
    theirs = [(float(gray[p]), float(y)) for p, y in zip(paths, their_labels)]
    got = [(o["mean"], o["label"]) for o in ours]
    if len(got) != len(theirs) or any(abs(a[0] - b[0]) > 1e-3 or a[1] != b[1] for a, b in zip(got, theirs)):
        failures.append(f"image_dataset_from_directory labels={labels}: dtrain (mean, label) {got}, Keras {theirs}")
    else:
        print(f"image_dataset_from_directory labels={labels}: the files and labels in Keras' order")
if failures:
    print("FAIL:\n" + "\n".join(failures))
    sys.exit(1)
print(f"PASS: {len(cases)} decodes (PNG, JPEG, BMP, GIF) and resizes and {len(aspects)} resizes keeping the aspect ratio equal Pillow's and "
      f"Keras {keras.__version__}'s; image_dataset_from_directory lists files and labels as Keras does")
