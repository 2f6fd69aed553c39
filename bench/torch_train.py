#!/usr/bin/python3
"""PyTorch peer of bench/train_throughput: the same Keras models trained the same way.

train_throughput starts this script as a co-process (one per torch setting) and sends it one request
per line; each answer is one JSON line. It can also be run by hand:

  /usr/bin/python3 bench/torch_train.py serve            # then type: cnn 64 2 0.25 7
  /usr/bin/python3 bench/torch_train.py rss cnn 64 2 50  # peak RSS of a training run, JSON

Requests: `<model> <batch> <threads> <seconds per window> <windows>`, the model's name followed by
`:mixed_bfloat16` or `:mixed_float16` for autocast's mixed precision (forward and loss under
`torch.autocast("cpu", dtype)`, a GradScaler for float16); answers
`{"ok": true, "ms_per_step": ..., "samples_per_s": ..., "windows": [...]}`.

The script serves two builds of torch: Debian's (/usr/bin/python3, OpenBLAS inside) and current torch from
PyPI (the peer virtual environment of bench/peers/venv.sh, MKL and oneDNN inside).
Settings (chosen by the parent through the environment, since glibc reads GLIBC_TUNABLES at start):
  DTRAIN_TORCH_SETTING=shipped  torch.set_num_threads(threads)
  DTRAIN_TORCH_SETTING=best     the parent also sets GLIBC_TUNABLES so glibc stops returning big blocks to
                                the kernel; with OpenBLAS torch.set_num_threads(1) and OpenBLAS keeps its
                                own pool of `threads`; with MKL (PyPI) torch.set_num_threads(threads), which
                                MKL and oneDNN share (measured fastest of the settings tried: eager beats
                                torch.compile on these models on the CPU)
With an OpenBLAS torch, OpenBLAS gets `threads` threads in both settings (openblas_set_num_threads), so a
row's thread budget is the same for dtrain and for PyTorch.
"""

import ctypes
import ctypes.util
import json
import os
import sys

from step_timing import report_rss, serve, time_steps

try:
    import torch
    import torch.nn as nn
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "resnet"))
    from torch_resnet import ResNet20  # the examples' ResNet-20 (bench/resnet)
except Exception as e:  # noqa: BLE001 - any import failure means "no peer"
    print(json.dumps({"ok": False, "error": f"no torch: {e}"}), flush=True)
    sys.exit(0)

SETTING = os.environ.get("DTRAIN_TORCH_SETTING", "shipped")


def _openblas():
    for name in ("libopenblas.so.0", ctypes.util.find_library("openblas")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_set_num_threads.argtypes = [ctypes.c_int]
            return lib
        except OSError:
            pass
    return None


MKL = "BLAS_INFO=mkl" in torch.__config__.show()
OPENBLAS = None if MKL else _openblas()


def set_threads(threads):
    torch.set_num_threads(threads if SETTING == "shipped" or MKL else 1)
    if OPENBLAS is not None:
        OPENBLAS.openblas_set_num_threads(threads)


class DecoderBlock(nn.Module):
    """train_throughput.cpp's GPT block: normalization first, causal attention by scaled_dot_product_attention,
    a GELU feed-forward; Keras' LayerNormalization epsilon (1e-3)."""

    def __init__(self, width=256, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width, eps=1e-3), nn.LayerNorm(width, eps=1e-3)
        self.q, self.k, self.v, self.o = (nn.Linear(width, width) for _ in range(4))
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        b, t, d = x.shape
        z = self.ln1(x)
        q, k, v = (f(z).view(b, t, self.heads, d // self.heads).transpose(1, 2) for f in (self.q, self.k, self.v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    def __init__(self, steps=128, vocab=256, width=256):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Parameter(torch.randn(steps, width) * 0.02)
        self.blocks = nn.Sequential(DecoderBlock(width), DecoderBlock(width))
        self.ln = nn.LayerNorm(width, eps=1e-3)
        self.head = nn.Linear(width, vocab)

    def forward(self, x):
        return self.head(self.ln(self.blocks(self.tokens(x) + self.positions)))


class Lstm(nn.Module):
    """train_throughput.cpp's character LSTM: Embedding(256, 64), LSTM(256) at every step, Dense(256)."""

    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(256, 64)
        self.lstm = nn.LSTM(64, 256, batch_first=True)
        self.head = nn.Linear(256, 256)

    def forward(self, x):
        return self.head(self.lstm(self.tokens(x))[0])


STEPS = {"transformer": 128, "lstm": 64}  # the sequence models: a label per step


def make(model, batch):
    """The Keras models of train_throughput.cpp (channels first for conv, as torch wants)."""
    model, _, policy = model.partition(":")
    cast = {"": None, "mixed_bfloat16": torch.bfloat16, "mixed_float16": torch.float16}[policy]
    torch.manual_seed(0)
    if model == "cnn":
        net = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Flatten(),
                            nn.Linear(26 * 26 * 32, 128), nn.ReLU(), nn.Linear(128, 10))
        x = torch.rand(batch, 1, 28, 28)
    elif model == "mlp":
        net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
        x = torch.rand(batch, 784)
    elif model == "resnet20":
        net = ResNet20()
        x = torch.rand(batch, 1, 28, 28)
    elif model in STEPS:
        net = Transformer() if model == "transformer" else Lstm()
        x = torch.randint(0, 256, (batch, STEPS[model]))
    else:
        raise ValueError(f"unknown model {model!r}")
    y = torch.randint(0, 256, (batch, STEPS[model])) if model in STEPS else torch.randint(0, 10, (batch,))
    # Keras' Adam defaults: lr 1e-3, betas (0.9, 0.999), epsilon 1e-7.
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        out = net(x)
        loss = loss_fn(out.flatten(0, -2), y.flatten())  # (a sequence model: a loss per step)
        loss.backward()
        opt.step()
        with torch.no_grad():
            correct = (out.argmax(-1) == y).sum()
        return loss.item(), correct.item()

    if cast is None:
        return step
    scaler = torch.amp.GradScaler("cpu") if cast == torch.float16 else None

    def mixed_step():  # PyTorch's recipe: autocast around forward and loss, backward outside it
        opt.zero_grad()
        with torch.autocast("cpu", dtype=cast):
            out = net(x)
            loss = loss_fn(out.flatten(0, -2), y.flatten())
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        with torch.no_grad():
            correct = (out.argmax(-1) == y).sum()
        return loss.item(), correct.item()

    return mixed_step


def measure(model, batch, threads, window_s, windows):
    set_threads(threads)
    return time_steps(make(model, batch), batch, window_s, windows)


def main(argv):
    mode = argv[1] if len(argv) > 1 else "serve"
    if mode == "rss":
        model, batch, threads, steps = argv[2], int(argv[3]), int(argv[4]), int(argv[5])
        set_threads(threads)
        report_rss(make(model, batch), steps)
        return
    serve({"ok": True, "torch": torch.__version__, "setting": SETTING, "openblas": OPENBLAS is not None,
           "blas": "mkl" if MKL else "openblas"},
          lambda model, batch, threads, window_s, windows: measure(model, batch, int(threads), window_s, windows))


if __name__ == "__main__":
    main(sys.argv)
