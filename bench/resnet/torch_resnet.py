"""The ResNets of examples/mnist_models.hpp in PyTorch (--model resnet, the small one, or resnet20),
trained as dtrain's single_worker_mnist / multi_worker_mnist train them: Fashion-MNIST (Debian's IDX files) scaled to [0, 1], shuffled, batches of
--batch-size per worker, Adam, sparse categorical crossentropy on logits, then the test accuracy.

    python torch_resnet.py --epochs 2 --steps-per-epoch 150 [--workers 2]

Same architecture: channels-last semantics do not matter for the maths; the strided 'same' 3 x 3
convolution pads as TensorFlow does (0 before, 1 after); batch normalization with epsilon 1e-3 and
momentum 0.1 (Keras' 0.9, what the dtrain model uses); Glorot-uniform kernels and zero biases (Keras'
initialisers). With --workers N it runs N processes under DistributedDataParallel (gloo, localhost), each
with its share of a global batch of N x --batch-size and 1 / N of the cores. Prints one JSON line (rank 0).
"""
import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

DATA = os.environ.get("DTRAIN_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def idx(name):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def conv(cin, cout, k, stride=1, bias=True):
    c = nn.Conv2d(cin, cout, k, stride=stride, padding=(k // 2 if stride == 1 else 0), bias=bias)
    nn.init.xavier_uniform_(c.weight)
    if bias:
        nn.init.zeros_(c.bias)
    return c


def bn(c):
    return nn.BatchNorm2d(c, eps=1e-3, momentum=0.1)


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.stem_bn = conv(1, 16, 3), bn(16)
        self.a1, self.a1_bn, self.a2, self.a2_bn = conv(16, 16, 3), bn(16), conv(16, 16, 3), bn(16)
        self.b1, self.b1_bn, self.b2, self.b2_bn = conv(16, 32, 3, 2), bn(32), conv(32, 32, 3), bn(32)
        self.short, self.short_bn = conv(16, 32, 1, 2), bn(32)
        self.head = nn.Linear(32, 10)
        nn.init.xavier_uniform_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, x):
        stem = F.relu(self.stem_bn(self.stem(x)))
        a = self.a2_bn(self.a2(F.relu(self.a1_bn(self.a1(stem)))))
        a_out = F.relu(stem + a)
        b = self.b2_bn(self.b2(F.relu(self.b1_bn(self.b1(F.pad(a_out, (0, 1, 0, 1)))))))
        out = F.relu(b + self.short_bn(self.short(a_out)))
        return self.head(out.mean(dim=(2, 3)))


class ResNet20(nn.Module):
    """Three stages of three residual blocks (16, 32, 64 channels); convolutions without bias, each
    followed by batch normalization; a stage's first block strided, its shortcut a strided 1 x 1
    convolution."""

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.stride = stride
            self.c1, self.n1 = conv(cin, cout, 3, stride, bias=False), bn(cout)
            self.c2, self.n2 = conv(cout, cout, 3, bias=False), bn(cout)
            self.short = None
            if stride != 1:
                self.short, self.short_bn = conv(cin, cout, 1, stride, bias=False), bn(cout)

        def forward(self, x):
            h = F.pad(x, (0, 1, 0, 1)) if self.stride != 1 else x  # TF 'same': the extra pad after
            r = self.n2(self.c2(F.relu(self.n1(self.c1(h)))))
            s = x if self.short is None else self.short_bn(self.short(x))
            return F.relu(r + s)

    def __init__(self):
        super().__init__()
        self.stem, self.stem_bn = conv(1, 16, 3, bias=False), bn(16)
        blocks, cin = [], 16
        for cout in (16, 32, 64):
            for i in range(3):
                blocks.append(self.Block(cin, cout, 2 if i == 0 and cout != 16 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(64, 10)
        nn.init.xavier_uniform_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, x):
        return self.head(self.blocks(F.relu(self.stem_bn(self.stem(x)))).mean(dim=(2, 3)))


def run(rank, args, port):
    workers = args.workers
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
    torch.manual_seed(args.seed)
    if workers > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=workers)
    x = torch.from_numpy(idx("train-images-idx3-ubyte.gz").astype(np.float32) / 255.0).unsqueeze(1)
    y = torch.from_numpy(idx("train-labels-idx1-ubyte.gz").astype(np.int64))
    tx = torch.from_numpy(idx("t10k-images-idx3-ubyte.gz").astype(np.float32) / 255.0).unsqueeze(1)
    ty = torch.from_numpy(idx("t10k-labels-idx1-ubyte.gz").astype(np.int64))
    model = ResNet20() if args.model == "resnet20" else ResNet()
    net = nn.parallel.DistributedDataParallel(model) if workers > 1 else model
    opt = torch.optim.Adam(net.parameters(), lr=args.learning_rate, eps=1e-7)
    g = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(x), generator=g)
    global_batch, at = args.batch_size * workers, 0
    start = time.perf_counter()
    for _ in range(args.epochs):
        net.train()
        for _ in range(args.steps_per_epoch):
            if at + global_batch > len(order):
                order, at = torch.randperm(len(x), generator=g), 0
            rows = order[at + rank * args.batch_size: at + (rank + 1) * args.batch_size]
            at += global_batch
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(x[rows]), y[rows]).backward()
            opt.step()
    fit_s = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(tx[i:i + 1000]).argmax(1) == ty[i:i + 1000]).sum()) for i in range(0, len(tx), 1000))
    if rank == 0:
        print(json.dumps({"fit_s": fit_s, "test_accuracy": correct / len(tx), "torch": torch.__version__}), flush=True)
    if workers > 1:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=("resnet", "resnet20"), default="resnet")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--steps-per-epoch", type=int, default=150)
    ap.add_argument("--batch-size", type=int, default=64, help="per worker")
    ap.add_argument("--learning-rate", type=float, default=1e-3)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--port", type=int, default=29512)
    args = ap.parse_args()
    if args.workers == 1:
        run(0, args, args.port)
    else:
        mp.spawn(run, args=(args, args.port), nprocs=args.workers)


if __name__ == "__main__":
    sys.exit(main())
