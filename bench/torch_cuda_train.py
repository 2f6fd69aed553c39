#!/usr/bin/env python3
"""PyTorch peer of `train_throughput --device cuda`: the same two Keras models trained on the same GPU.

train_throughput starts this script as a co-process and sends one request per line; each answer is one
JSON line. By hand:

  python3 bench/torch_cuda_train.py serve      # then type: cnn 64 eager 0.25 7

Requests: `<model> <batch> <mode> <seconds per window> <windows>`, mode one of
  eager    the step as a user writes it (Adam with PyTorch's default implementation on CUDA, foreach)
  graphs   the whole step (forward, loss, backward, Adam with capturable=True) captured once as a CUDA
           graph and replayed (PyTorch's "whole network capture" recipe)
  compile  the model through torch.compile (inductor, default mode), Adam as in eager
Every step reads the loss and the number of correct predictions back to the host, as dtrain's step does.
Answers: `{"ok": true, "ms_per_step": ..., "samples_per_s": ..., "peak_bytes": ...}` (peak_bytes:
torch.cuda.max_memory_allocated over the measured run).
FP32 everywhere, TF32 off (PyTorch's default for matmul; dtrain's cuBLAS calls are FP32 too).
"""

import json
import os
import sys

from step_timing import serve, time_steps

try:
    import torch
    import torch.nn as nn
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "resnet"))
    from torch_resnet import ResNet20  # the examples' ResNet-20 (bench/resnet)
    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
except Exception as e:  # noqa: BLE001 - any failure means "no peer"
    print(json.dumps({"ok": False, "error": f"no CUDA torch: {e}"}), flush=True)
    sys.exit(0)

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
DEVICE = torch.device("cuda:0")


def make(model, batch, mode):
    """The Keras models of train_throughput.cpp (channels first for conv, as torch wants)."""
    torch.manual_seed(0)
    if model == "cnn":
        net = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Flatten(),
                            nn.Linear(26 * 26 * 32, 128), nn.ReLU(), nn.Linear(128, 10))
        x = torch.rand(batch, 1, 28, 28, device=DEVICE)
    elif model == "mlp":
        net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
        x = torch.rand(batch, 784, device=DEVICE)
    elif model == "resnet20":
        net = ResNet20()
        x = torch.rand(batch, 1, 28, 28, device=DEVICE)
    else:
        raise ValueError(f"unknown model {model!r}")
    net = net.to(DEVICE)
    y = torch.randint(0, 10, (batch,), device=DEVICE)
    loss_fn = nn.CrossEntropyLoss()
    # Keras' Adam defaults: lr 1e-3, betas (0.9, 0.999), epsilon 1e-7.
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-7, capturable=(mode == "graphs"))
    fwd = torch.compile(net) if mode == "compile" else net

    def body():
        opt.zero_grad(set_to_none=(mode != "graphs"))
        out = fwd(x)
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        return loss.detach(), (out.argmax(1) == y).sum()

    if mode != "graphs":
        def step():
            loss, correct = body()
            return loss.item(), correct.item()
        return step

    # warm up on a side stream (as the recipe says), then capture one whole step
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            body()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_loss, static_correct = body()

    def replay():
        g.replay()
        return static_loss.item(), static_correct.item()
    return replay


def measure(model, batch, mode, window_s, windows):
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(DEVICE)
    r = time_steps(make(model, batch, mode), batch, window_s, windows)
    r["peak_bytes"] = torch.cuda.max_memory_allocated(DEVICE)
    return r


def main(argv):
    serve({"ok": True, "torch": torch.__version__, "device": torch.cuda.get_device_name(DEVICE)}, measure)


if __name__ == "__main__":
    main(sys.argv)
