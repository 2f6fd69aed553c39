#!/usr/bin/python3
"""Generates tests/golden/golden.json: reference values from PyTorch for tests/golden/test_golden.cpp.

How to run (from the repository root; needs PyTorch >= 1.13 and NumPy: Debian's python3-torch, or the
benchmarks' peer venv, `bench/peers/venv.sh build/bench/peer-venv`):

    /usr/bin/python3 tests/golden/make_golden.py
    build/bench/peer-venv/bin/python tests/golden/make_golden.py

It overwrites tests/golden/golden.json. CI does not run it; the JSON is committed.

Everything is computed in float64. Every input (x, params, dy, y_true, y_pred, p0, g) is first rounded
to float32, so the C++ side (float32) sees exactly the numbers the reference was computed from; the
expected outputs are stored rounded to 9 significant digits.

Layouts are dtrain's (= Keras'): activations NHWC (channels last), Dense kernel (in, units), Conv2D
kernel (kh, kw, cin, cout); params are stored flattened as [kernel..., bias...], which is dtrain's
parameter buffer order. Torch's NCHW / (cout, cin, kh, kw) layouts are converted here.

Keras conventions reproduced in torch (not torch's own defaults):
  - 'same' padding puts the extra pad at the bottom/right (pad_top = total // 2);
  - average pooling with 'same' padding averages only the cells inside the input;
  - categorical crossentropy on probabilities renormalises each row to sum 1, then clips to
    [1e-7, 1 - 1e-7]; sparse categorical crossentropy on probabilities clips without renormalising
    (tf.keras 2's backend, documented in docs/keras-names.md);
  - binary crossentropy on probabilities is -(y log(p + 1e-7) + (1 - y) log(1 - p + 1e-7)) after
    clipping p to [1e-7, 1 - 1e-7], averaged over the last axis;
  - losses are reduced with sum_over_batch_size (the mean of the per-row losses).
Optimizers use torch.optim as is; where Keras (and dtrain) place epsilon differently (Adam, RMSprop)
the script prints how far the Keras form is from torch's, to justify the C++ test's tolerance.
"""

import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(20240607)
DT = torch.float64
EPS = 1e-7  # keras.backend.epsilon()


def f32(t):
    """Rounds to float32 and back, so the C++ side sees the exact same inputs."""
    return t.to(torch.float32).to(DT)


def flat(t):
    """Float list of a tensor, rounded to 9 significant digits (more than float32 holds)."""
    return [float(f"{v:.9g}") for v in t.detach().reshape(-1).tolist()]


def randn(*shape, scale=1.0):
    return f32(torch.randn(*shape, dtype=DT) * scale)


def uniform(lo, hi, *shape):
    return f32(lo + (hi - lo) * torch.rand(*shape, dtype=DT))


# ---- activations ------------------------------------------------------------------------------------
ACTIVATIONS = {
    "linear": lambda z: z,
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "softmax": lambda z: torch.softmax(z, dim=-1),
    "gelu": lambda z: F.gelu(z, approximate="none"),  # exact erf form
}


def layer_case(name, fn, x, params):
    """Runs fn(x, *params) -> y, backprops a random upstream gradient dy, records everything.

    `params` are in dtrain (Keras) layout; fn converts as it needs."""
    x = x.clone().requires_grad_(True)
    ps = [p.clone().requires_grad_(True) for p in params]
    y = fn(x, *ps)
    dy = randn(*y.shape)
    (y * dy).sum().backward()
    case = {
        "name": name,
        "x_shape": list(x.shape),
        "y_shape": list(y.shape),
        "x": flat(x),
        "params": flat(torch.cat([p.reshape(-1) for p in ps])) if ps else [],
        "dy": flat(dy),
        "y": flat(y),
        "dx": flat(x.grad),
        "dparams": flat(torch.cat([p.grad.reshape(-1) for p in ps])) if ps else [],
    }
    return case


def same_pads(size, k, s):
    """TF 'same': (before, after) padding along one axis; the extra one goes after."""
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def pad_nchw(x, k, s, value=0.0):
    """Pads an NCHW tensor for a TF 'same' window of size k and stride s."""
    top, bottom = same_pads(x.shape[2], k, s)
    left, right = same_pads(x.shape[3], k, s)
    return F.pad(x, (left, right, top, bottom), value=value)


def nhwc_to_nchw(x):
    return x.permute(0, 3, 1, 2)


def nchw_to_nhwc(x):
    return x.permute(0, 2, 3, 1)


def make_layers():
    cases = []

    # Dense: in 5, units 4, batch 3
    x = randn(3, 5)
    w = randn(5, 4, scale=0.6)  # Keras layout (in, units)
    b = randn(4, scale=0.3)
    for act, fa in ACTIVATIONS.items():
        cases.append(layer_case(f"dense_{act}", lambda x, w, b, fa=fa: fa(x @ w + b), x, [w, b]))

    # Conv2D: input (2, 6, 5, 3) NHWC, 4 filters, kernel 3
    x = randn(2, 6, 5, 3)
    k = randn(3, 3, 3, 4, scale=0.3)  # Keras layout (kh, kw, cin, cout)
    b = randn(4, scale=0.3)

    def conv(x, k, b, stride, same):
        xt = nhwc_to_nchw(x)
        if same:
            xt = pad_nchw(xt, 3, stride)
        wt = k.permute(3, 2, 0, 1)  # (cout, cin, kh, kw)
        return nchw_to_nhwc(F.conv2d(xt, wt, b, stride=stride))

    for pad, stride in (("valid", 1), ("same", 1), ("same", 2), ("valid", 2)):
        cases.append(layer_case(f"conv2d_{pad}_s{stride}",
                                lambda x, k, b, s=stride, same=(pad == "same"): conv(x, k, b, s, same), x, [k, b]))

    # Pooling on the same kind of input
    x = randn(2, 6, 5, 3)

    def max_pool(x, k, s, same):
        xt = nhwc_to_nchw(x)
        if same:
            xt = pad_nchw(xt, k, s, value=-math.inf)
        return nchw_to_nhwc(F.max_pool2d(xt, k, s))

    def avg_pool(x, k, s, same):
        xt = nhwc_to_nchw(x)
        if not same:
            return nchw_to_nhwc(F.avg_pool2d(xt, k, s))
        ones = torch.ones_like(xt)
        # TF rule: the mean over the cells inside the input (sum over window / count inside)
        return nchw_to_nhwc(F.avg_pool2d(pad_nchw(xt, k, s), k, s) / F.avg_pool2d(pad_nchw(ones, k, s), k, s))

    cases.append(layer_case("max_pooling2d_p2_valid", lambda x: max_pool(x, 2, 2, False), x, []))
    cases.append(layer_case("max_pooling2d_p3_s2_same", lambda x: max_pool(x, 3, 2, True), x, []))
    cases.append(layer_case("average_pooling2d_p2_valid", lambda x: avg_pool(x, 2, 2, False), x, []))
    cases.append(layer_case("average_pooling2d_p3_s2_same", lambda x: avg_pool(x, 3, 2, True), x, []))

    # Standalone activations on (3, 7)
    x = randn(3, 7, scale=1.5)
    for act in ("relu", "sigmoid", "tanh", "softmax", "gelu"):
        cases.append(layer_case(f"activation_{act}", ACTIVATIONS[act], x, []))

    # Layers added later draw from their own seed, so the cases above (and the loss and optimizer
    # families below) keep their values.
    state = torch.get_rng_state()
    torch.manual_seed(20261125)
    x = randn(2, 6, 5, 3)
    cases.append(layer_case("global_average_pooling2d", lambda x: x.mean(dim=(1, 2)), x, []))
    cases.append(layer_case("global_max_pooling2d", lambda x: x.amax(dim=(1, 2)), x, []))
    # F.pad on NHWC pads the last axes first: (c_before, c_after, left, right, top, bottom)
    cases.append(layer_case("zero_padding2d_1", lambda x: F.pad(x, (0, 0, 1, 1, 1, 1)), x, []))
    cases.append(layer_case("zero_padding2d_0_1_3_2", lambda x: F.pad(x, (0, 0, 3, 2, 0, 1)), x, []))
    x = randn(3, 7, scale=1.5)
    cases.append(layer_case("leaky_relu_0.3", lambda x: F.leaky_relu(x, 0.3), x, []))
    # LayerNormalization(epsilon=1e-3) over the last axis, with gamma and beta away from their defaults
    x = randn(3, 2, 5, scale=2.0) + 0.5
    gamma, beta = f32(1.0 + randn(5, scale=0.3)), randn(5, scale=0.3)
    cases.append(layer_case("layer_normalization",
                            lambda x, g, b: F.layer_norm(x, (5,), g, b, eps=1e-3), x, [gamma, beta]))
    # BatchNormalization(momentum=0.9, epsilon=1e-3) on (4, 3, 2, 3): channels last, statistics over the
    # 24 rows of each channel. Training: the batch's mean and biased variance normalise, and the moving
    # statistics become 0.9 moving + 0.1 batch (Keras' rule, with the biased variance: torch's running_var
    # uses the unbiased one, so it is computed here). Inference: the moving statistics normalise.
    x = randn(4, 3, 2, 3, scale=1.5) + 0.7
    gamma, beta = f32(1.0 + randn(3, scale=0.3)), randn(3, scale=0.3)
    moving = torch.cat([randn(3, scale=0.5), uniform(0.5, 2.0, 3)])
    rows = x.reshape(-1, 3)
    after = torch.cat([0.9 * moving[:3] + 0.1 * rows.mean(0), 0.9 * moving[3:] + 0.1 * rows.var(0, unbiased=False)])

    def batch_norm(x, g, b, training):
        flat_x = x.reshape(-1, 3)
        if training:
            mean, var = flat_x.mean(0), flat_x.var(0, unbiased=False)
        else:
            mean, var = moving[:3], moving[3:]
        return ((flat_x - mean) / torch.sqrt(var + 1e-3) * g + b).reshape(x.shape)

    case = layer_case("batch_normalization_training", lambda x, g, b: batch_norm(x, g, b, True), x, [gamma, beta])
    case.update(training=True, state=flat(moving), state_after=flat(after))
    cases.append(case)
    case = layer_case("batch_normalization_inference", lambda x, g, b: batch_norm(x, g, b, False), x, [gamma, beta])
    case.update(training=False, state=flat(moving), state_after=flat(moving))
    cases.append(case)
    # DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2) and SeparableConv2D(4, 3,
    # padding="same") on (2, 6, 5, 3): grouped convolutions in torch (groups = channels)
    x = randn(2, 6, 5, 3)
    dk = randn(3, 3, 3, 2, scale=0.3)  # Keras layout (kh, kw, channels, multiplier)
    db = randn(6, scale=0.3)

    def depthwise(x, k, stride, same, b=None):
        xt = nhwc_to_nchw(x)
        if same:
            xt = pad_nchw(xt, 3, stride)
        c, m = k.shape[2], k.shape[3]
        wt = k.permute(2, 3, 0, 1).reshape(c * m, 1, 3, 3)  # output channel ch * m + j
        return nchw_to_nhwc(F.conv2d(xt, wt, b, stride=stride, groups=c))

    cases.append(layer_case("depthwise_conv2d_same_s2_x2", lambda x, k, b: depthwise(x, k, 2, True, b), x, [dk, db]))
    sk = randn(3, 3, 3, 1, scale=0.3)
    pk = randn(1, 1, 3, 4, scale=0.3)  # Keras layout (1, 1, channels multiplier, filters)
    pb = randn(4, scale=0.3)
    cases.append(layer_case("separable_conv2d_same",
                            lambda x, k, p, b: depthwise(x, k, 1, True) @ p.reshape(3, 4) + b, x, [sk, pk, pb]))
    # Embedding(6, 3) on indices (3, 4), some repeated: the table's gradient adds their rows; no dx
    table = randn(6, 3, scale=0.5).requires_grad_(True)
    x = torch.tensor([[0, 2, 2, 5], [1, 2, 0, 0], [3, 3, 5, 2]])
    y = F.embedding(x, table)
    dy = randn(*y.shape)
    (y * dy).sum().backward()
    cases.append({"name": "embedding", "x_shape": list(x.shape), "y_shape": list(y.shape),
                  "x": [float(v) for v in x.reshape(-1).tolist()], "params": flat(table), "dy": flat(dy),
                  "y": flat(y), "dparams": flat(table.grad)})
    # UpSampling2D (nearest) on NHWC: each value repeated along the rows, then the columns
    x = randn(2, 6, 5, 3)
    cases.append(layer_case("up_sampling2d_2", lambda x: x.repeat_interleave(2, 1).repeat_interleave(2, 2), x, []))
    cases.append(layer_case("up_sampling2d_3_2", lambda x: x.repeat_interleave(3, 1).repeat_interleave(2, 2), x, []))
    # Conv2D(4, 3, padding="same", use_bias=False): the kernel is the one parameter
    kn = randn(3, 3, 3, 4, scale=0.3)
    cases.append(layer_case("conv2d_same_s1_no_bias", lambda x, k: conv(x, k, None, 1, True), x, [kn]))
    # Dense(4, activation="relu", use_bias=False) on (3, 5)
    x, wn = randn(3, 5), randn(5, 4, scale=0.6)
    cases.append(layer_case("dense_relu_no_bias", lambda x, w: F.relu(x @ w), x, [wn]))
    # Conv2D with non-square kernels, dilation and groups: TF 'same' pads for the window's span
    # (k - 1) * dilation + 1; the grouped kernel is (kh, kw, cin / groups, cout)
    def conv_general(x, k, b, stride=(1, 1), dilation=(1, 1), same=False, groups=1):
        xt = nhwc_to_nchw(x)
        if same:
            spans = [(k.shape[i] - 1) * dilation[i] + 1 for i in (0, 1)]
            top, bottom = same_pads(xt.shape[2], spans[0], stride[0])
            left, right = same_pads(xt.shape[3], spans[1], stride[1])
            xt = F.pad(xt, (left, right, top, bottom))
        wt = k.permute(3, 2, 0, 1)
        return nchw_to_nhwc(F.conv2d(xt, wt, b, stride=stride, dilation=dilation, groups=groups))

    x = randn(2, 6, 5, 3)
    k32, b4 = randn(3, 2, 3, 4, scale=0.3), randn(4, scale=0.3)
    cases.append(layer_case("conv2d_k3x2_s2x1", lambda x, k, b: conv_general(x, k, b, stride=(2, 1)), x, [k32, b4]))
    kd = randn(3, 3, 3, 4, scale=0.3)
    cases.append(layer_case("conv2d_same_dilation2",
                            lambda x, k, b: conv_general(x, k, b, dilation=(2, 2), same=True), x, [kd, b4]))
    xg = randn(2, 5, 4, 4)
    kg, bg = randn(3, 3, 2, 6, scale=0.3), randn(6, scale=0.3)
    cases.append(layer_case("conv2d_same_groups2",
                            lambda x, k, b: F.relu(conv_general(x, k, b, same=True, groups=2)), xg, [kg, bg]))

    # Conv2DTranspose: kernel (kh, kw, filters, cin); the full transposed convolution, cropped (or
    # extended with zeros) to Keras' output length (deconv_output_length, with output_padding when
    # given), the crop's start TF's 'same' pad before for that length
    def conv_transpose(x, k, b, stride, dilation=(1, 1), same=False, output_padding=None):
        xt = nhwc_to_nchw(x)
        full = F.conv_transpose2d(xt, k.permute(3, 2, 0, 1), None, stride=stride, dilation=dilation)
        out, start = [], []
        for i, axis in ((0, 2), (1, 3)):
            span = (k.shape[i] - 1) * dilation[i] + 1
            if output_padding is not None:
                pad = span // 2 if same else 0
                length = (xt.shape[axis] - 1) * stride[i] + span - 2 * pad + output_padding[i]
            elif same:
                length = xt.shape[axis] * stride[i]
            else:
                length = xt.shape[axis] * stride[i] + max(span - stride[i], 0)
            out.append(length)
            start.append(same_pads(length, span, stride[i])[0] if same else 0)
        full = F.pad(full, (0, max(0, start[1] + out[1] - full.shape[3]), 0, max(0, start[0] + out[0] - full.shape[2])))
        y = full[:, :, start[0]:start[0] + out[0], start[1]:start[1] + out[1]]
        return nchw_to_nhwc(y) + (b if b is not None else 0)

    x = randn(2, 3, 4, 3)
    kt, bt = randn(3, 3, 4, 3, scale=0.3), randn(4, scale=0.3)
    cases.append(layer_case("conv2d_transpose_valid_s2",
                            lambda x, k, b: conv_transpose(x, k, b, (2, 2)), x, [kt, bt]))
    cases.append(layer_case("conv2d_transpose_same_s2",
                            lambda x, k, b: conv_transpose(x, k, b, (2, 2), same=True), x, [kt, bt]))
    kt2 = randn(2, 3, 4, 3, scale=0.3)
    cases.append(layer_case("conv2d_transpose_k2x3_s3x2_relu",
                            lambda x, k, b: F.relu(conv_transpose(x, k, b, (3, 2))), x, [kt2, bt]))
    cases.append(layer_case("conv2d_transpose_same_dilation2_no_bias",
                            lambda x, k: conv_transpose(x, k, None, (1, 1), (2, 2), same=True), x, [kt]))
    # DepthwiseConv2D(3, padding="same", depth_multiplier=2, use_bias=False, activation="relu")
    x, dkn = randn(2, 6, 5, 3), randn(3, 3, 3, 2, scale=0.3)
    cases.append(layer_case("depthwise_conv2d_same_x2_relu_no_bias", lambda x, k: F.relu(depthwise(x, k, 1, True)),
                            x, [dkn]))
    torch.set_rng_state(state)
    # Conv2DTranspose with output_padding, from a generator of their own (the cases above keep their numbers)
    with torch.random.fork_rng():
        torch.manual_seed(20261127)
        x, kt = randn(2, 3, 4, 3), randn(3, 3, 4, 3, scale=0.3)
        kt2, bt = randn(2, 3, 4, 3, scale=0.3), randn(4, scale=0.3)
        cases.append(layer_case("conv2d_transpose_same_s2_output_padding1",
                                lambda x, k, b: conv_transpose(x, k, b, (2, 2), same=True, output_padding=(1, 1)),
                                x, [kt, bt]))
        cases.append(layer_case("conv2d_transpose_same_k2x3_s2_output_padding1x0",
                                lambda x, k, b: conv_transpose(x, k, b, (2, 2), same=True, output_padding=(1, 0)),
                                x, [kt2, bt]))
        cases.append(layer_case("conv2d_transpose_valid_k2x3_s3x2_output_padding2x1",
                                lambda x, k, b: conv_transpose(x, k, b, (3, 2), output_padding=(2, 1)), x, [kt2, bt]))
    return cases


# ---- losses -----------------------------------------------------------------------------------------
def loss_case(name, fn, y_true, y_pred):
    p = y_pred.clone().requires_grad_(True)
    per_row = fn(y_true, p)  # one loss per row (batch,)
    value = per_row.mean()  # sum_over_batch_size
    value.backward()
    return {
        "name": name,
        "true_shape": list(y_true.shape),
        "pred_shape": list(y_pred.shape),
        "y_true": flat(y_true),
        "y_pred": flat(y_pred),
        "value": float(f"{value.item():.9g}"),
        "grad": flat(p.grad),
    }


def make_losses():
    n, c = 4, 5
    cases = []
    logits = randn(n, c, scale=1.5)
    # probabilities: softmax of mild logits, every entry inside (0.05, 0.95), rows sum to 1 (up to float32)
    probs = f32(torch.softmax(randn(n, c, scale=0.5), dim=-1))
    assert probs.min() > 0.05 and probs.max() < 0.95
    labels = torch.tensor([1.0, 0.0, 4.0, 2.0], dtype=DT)
    onehot = F.one_hot(labels.long(), c).to(DT)
    onehot[3] = torch.tensor([0.1, 0.0, 0.6, 0.3, 0.0], dtype=DT)  # one soft-target row
    onehot = f32(onehot)
    binary = f32((torch.rand(n, c, dtype=DT) > 0.5).to(DT))
    bprobs = uniform(0.06, 0.94, n, c)

    li = labels.long()

    def scce_logits(t, z):
        return -torch.log_softmax(z, -1).gather(1, li[:, None])[:, 0]

    def scce_probs(t, p):  # clip, no renormalisation
        return -torch.log(p.clamp(EPS, 1 - EPS).gather(1, li[:, None])[:, 0])

    def cce_logits(t, z):
        return -(t * torch.log_softmax(z, -1)).sum(-1)

    def cce_probs(t, p):  # renormalise, clip
        q = (p / p.sum(-1, keepdim=True)).clamp(EPS, 1 - EPS)
        return -(t * torch.log(q)).sum(-1)

    def bce_logits(t, z):
        return F.binary_cross_entropy_with_logits(z, t, reduction="none").mean(-1)

    def bce_probs(t, p):
        q = p.clamp(EPS, 1 - EPS)
        return -(t * torch.log(q + EPS) + (1 - t) * torch.log(1 - q + EPS)).mean(-1)

    def mse(t, p):
        return ((p - t) ** 2).mean(-1)

    cases.append(loss_case("sparse_categorical_crossentropy_logits", scce_logits, labels, logits))
    cases.append(loss_case("sparse_categorical_crossentropy_probs", scce_probs, labels, probs))
    cases.append(loss_case("categorical_crossentropy_logits", cce_logits, onehot, logits))
    cases.append(loss_case("categorical_crossentropy_probs", cce_probs, onehot, probs))
    cases.append(loss_case("binary_crossentropy_logits", bce_logits, binary, logits))
    cases.append(loss_case("binary_crossentropy_probs", bce_probs, binary, bprobs))
    cases.append(loss_case("mean_squared_error", mse, randn(n, c), randn(n, c)))
    return cases


# ---- optimizers -------------------------------------------------------------------------------------
def keras_form(name, p0, gs):
    """The Keras/dtrain update rule (numpy, float64), only to report its distance from torch's."""
    p = p0.numpy().copy()
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    vh = np.zeros_like(p)
    a = np.zeros_like(p)
    out = []
    for t, g in enumerate(gs, start=1):
        g = g.numpy()
        if name.startswith("adam"):
            lr = 0.01
            if name == "adamw":
                p = p * (1 - lr * 0.004)
            alpha = lr * math.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
            m += (g - m) * 0.1
            v += (g * g - v) * 0.001
            vh = np.maximum(vh, v)
            p = p - alpha * m / (np.sqrt(vh if name == "adam_amsgrad" else v) + EPS)
        elif name.startswith("rmsprop"):
            v = 0.9 * v + 0.1 * g * g
            denom = v
            if name == "rmsprop_centered":
                a = 0.9 * a + 0.1 * g
                denom = v - a * a
            inc = 0.01 * g / np.sqrt(denom + EPS)
            if name == "rmsprop_momentum":
                m = 0.5 * m + inc
                inc = m
            p = p - inc
        else:
            return None
        out.append(p.copy())
    return out


def make_optimizers():
    n = 10
    p0 = randn(n)
    # gradients of magnitude 0.1 .. 1 with random signs (keeps the epsilon-placement difference tiny)
    sign = lambda: torch.where(torch.rand(n, dtype=DT) < 0.5, -1.0, 1.0).to(DT)
    g1 = f32(sign() * (0.1 + 0.9 * torch.rand(n, dtype=DT)))
    g2 = f32(sign() * (0.1 + 0.9 * torch.rand(n, dtype=DT)))
    configs = {
        "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
        "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
        "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
        "adam": lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.9, 0.999), eps=1e-7),
        "adam_amsgrad": lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.9, 0.999), eps=1e-7, amsgrad=True),
        "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=0.01, alpha=0.9, eps=1e-7),
        "rmsprop_momentum": lambda ps: torch.optim.RMSprop(ps, lr=0.01, alpha=0.9, eps=1e-7, momentum=0.5),
        "rmsprop_centered": lambda ps: torch.optim.RMSprop(ps, lr=0.01, alpha=0.9, eps=1e-7, centered=True),
        "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, betas=(0.9, 0.999), eps=1e-7, weight_decay=0.004),
    }
    cases = []
    for name, make in configs.items():
        p = p0.clone().requires_grad_(True)
        opt = make([p])
        steps = []
        for g in (g1, g2):
            p.grad = g.clone()
            opt.step()
            steps.append(p.detach().clone())
        kf = keras_form(name, p0, [g1, g2])
        if kf is not None:
            d = max(float(np.max(np.abs(k - s.numpy()))) for k, s in zip(kf, steps))
            print(f"  {name}: max |keras form - torch| over both steps = {d:.3g}")
        cases.append({"name": name, "p0": flat(p0), "g1": flat(g1), "g2": flat(g2),
                      "p1": flat(steps[0]), "p2": flat(steps[1])})
    return cases


def make_sequence_layers():
    """Layers over (steps, features); drawn after every other case, so theirs keep their random inputs."""
    cases = []

    def conv1d(x, k, b, stride=1, dilation=1, padding="valid"):
        xt = x.permute(0, 2, 1)  # (n, channels, steps)
        span = (k.shape[0] - 1) * dilation + 1
        if padding == "causal":
            xt = F.pad(xt, (span - 1, 0))
        elif padding == "same":
            xt = F.pad(xt, same_pads(x.shape[1], span, stride))
        wt = k.permute(2, 1, 0)  # (K, cin, cout) -> (cout, cin, K)
        return F.conv1d(xt, wt, b, stride=stride, dilation=dilation).permute(0, 2, 1)

    x = randn(2, 7, 3)
    k, b = randn(3, 3, 4, scale=0.5), randn(4, scale=0.1)
    cases.append(layer_case("conv1d_causal_dilation2", lambda x, k, b: conv1d(x, k, b, dilation=2, padding="causal"),
                            x, [k, b]))
    k4 = randn(4, 3, 4, scale=0.5)
    cases.append(layer_case("conv1d_same_s2", lambda x, k, b: conv1d(x, k, b, stride=2, padding="same"), x, [k4, b]))
    cases.append(layer_case("global_average_pooling1d", lambda x: x.mean(dim=1), x, []))

    # MultiHeadAttention as Keras computes it (einsum projections of kernels (d, h, k) and (h, v, d)),
    # the attention by torch's scaled_dot_product_attention
    def attention(x, wq, bq, wk, bk, wv, bv, wo, bo, causal):
        q = torch.einsum("ntd,dhk->nhtk", x, wq) + bq[None, :, None, :]
        k = torch.einsum("ntd,dhk->nhtk", x, wk) + bk[None, :, None, :]
        v = torch.einsum("ntd,dhk->nhtk", x, wv) + bv[None, :, None, :]
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return torch.einsum("nhtv,hvd->ntd", o, wo) + bo

    x = randn(2, 4, 6)
    H, K, V, D = 2, 3, 2, 6
    weights = [randn(D, H, K, scale=0.4), randn(H, K, scale=0.1), randn(D, H, K, scale=0.4), randn(H, K, scale=0.1),
               randn(D, H, V, scale=0.4), randn(H, V, scale=0.1), randn(H, V, D, scale=0.4), randn(D, scale=0.1)]
    for causal in (False, True):
        cases.append(layer_case("multi_head_attention" + ("_causal" if causal else ""),
                                lambda x, *w, c=causal: attention(x, *w, c), x, weights))
    return cases


def make_recurrent_layers():
    """LSTM and GRU by torch's cells with Keras-layout weights (checked against nn.LSTM / nn.GRU); drawn last."""
    cases = []
    n, T, f, u = 2, 5, 3, 4
    x = randn(n, T, f)
    lw = [randn(f, 4 * u, scale=0.5), randn(u, 4 * u, scale=0.5), randn(4 * u, scale=0.2)]
    gw = [randn(f, 3 * u, scale=0.5), randn(u, 3 * u, scale=0.5), randn(2, 3 * u, scale=0.2)]
    # the cells are the modules' arithmetic: nn.LSTM / nn.GRU given the same weights agree
    with torch.no_grad():
        m = torch.nn.LSTM(f, u, batch_first=True).double()
        m.weight_ih_l0.copy_(lw[0].t()), m.weight_hh_l0.copy_(lw[1].t()), m.bias_ih_l0.copy_(lw[2])
        m.bias_hh_l0.zero_()
        assert torch.allclose(m(x)[0], functional_lstm(x, *lw, True), atol=1e-12)
        g = torch.nn.GRU(f, u, batch_first=True).double()
        g.weight_ih_l0.copy_(gru_blocks(gw[0], u).t()), g.weight_hh_l0.copy_(gru_blocks(gw[1], u).t())
        g.bias_ih_l0.copy_(gru_blocks(gw[2][0], u)), g.bias_hh_l0.copy_(gru_blocks(gw[2][1], u))
        assert torch.allclose(g(x)[0], functional_gru(x, *gw, True), atol=1e-12)
    for sequences in (False, True):
        tail = "_sequences" if sequences else ""
        cases.append(layer_case("lstm" + tail, lambda x, *w, s=sequences: functional_lstm(x, *w, s), x, lw))
        cases.append(layer_case("gru" + tail, lambda x, *w, s=sequences: functional_gru(x, *w, s), x, gw))
    return cases


def gru_blocks(w, u):
    """Keras' GRU blocks (z, r, h) along the last axis in torch's order (r, z, n)."""
    return torch.cat([w[..., u:2 * u], w[..., :u], w[..., 2 * u:]], dim=-1)


def functional_lstm(x, kernel, recurrent, bias, sequences):
    """torch.nn.LSTM's arithmetic through torch's own cell, with tensors (not Parameters) as weights."""
    u = recurrent.shape[0]
    zeros = torch.zeros(4 * u, dtype=x.dtype)
    h = torch.zeros(x.shape[0], u, dtype=x.dtype)
    c = torch.zeros_like(h)
    ys = []
    for t in range(x.shape[1]):
        h, c = torch._VF.lstm_cell(x[:, t], (h, c), kernel.t(), recurrent.t(), bias, zeros)
        ys.append(h)
    return torch.stack(ys, dim=1) if sequences else h


def functional_gru(x, kernel, recurrent, bias, sequences):
    """torch.nn.GRU's cell (reset_after) with Keras' blocks reordered to torch's."""
    u = recurrent.shape[0]
    h = torch.zeros(x.shape[0], u, dtype=x.dtype)
    ys = []
    for t in range(x.shape[1]):
        h = torch._VF.gru_cell(x[:, t], h, gru_blocks(kernel, u).t(), gru_blocks(recurrent, u).t(),
                               gru_blocks(bias[0], u), gru_blocks(bias[1], u))
        ys.append(h)
    return torch.stack(ys, dim=1) if sequences else h


def main():
    layers = make_layers()
    losses = make_losses()
    optimizers = make_optimizers()
    golden = {
        "generator": "tests/golden/make_golden.py (torch " + torch.__version__ + ", float64)",
        "layers": layers + make_sequence_layers() + make_recurrent_layers(),
        "losses": losses,
        "optimizers": optimizers,
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden.json")
    with open(path, "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes): {len(golden['layers'])} layer, "
          f"{len(golden['losses'])} loss, {len(golden['optimizers'])} optimizer cases")


if __name__ == "__main__":
    main()
