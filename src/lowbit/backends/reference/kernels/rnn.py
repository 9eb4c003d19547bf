"""Reference kernel of LSTM (lowbit.ops.rnn): float64 throughout, outputs rounded once to X's
dtype."""

from __future__ import annotations

import numpy as np

from lowbit.backends.reference.kernels import kernel

DEFAULT_ALPHA = {"LeakyRelu": 0.01, "ThresholdedRelu": 1.0, "HardSigmoid": 0.2, "Elu": 1.0,
                 "Affine": 1.0, "ScaledTanh": 1.0}
DEFAULT_BETA = {"HardSigmoid": 0.5, "Affine": 0.0, "ScaledTanh": 1.0}
"""ONNX's defaults for the activations that take alpha or beta."""


def _activation(name: str, alpha: float | None, beta: float | None):
    a = DEFAULT_ALPHA.get(name, 0.0) if alpha is None else alpha
    b = DEFAULT_BETA.get(name, 0.0) if beta is None else beta
    return {
        "Relu": lambda x: np.maximum(x, 0.0),
        "Tanh": np.tanh,
        "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
        "Affine": lambda x: a * x + b,
        "LeakyRelu": lambda x: np.where(x >= 0, x, a * x),
        "ThresholdedRelu": lambda x: np.where(x > a, x, 0.0),
        "ScaledTanh": lambda x: a * np.tanh(b * x),
        "HardSigmoid": lambda x: np.clip(a * x + b, 0.0, 1.0),
        "Elu": lambda x: np.where(x >= 0, x, a * (np.exp(x) - 1.0)),
        "Softsign": lambda x: x / (1.0 + np.abs(x)),
        "Softplus": lambda x: np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0),
    }[name]


def _functions(node, dirs: int) -> list[list]:
    """(f, g, h) per direction, with the alphas and betas consumed in order by the
    activations that take them."""
    names = node.attrs.get("activations") or ["Sigmoid", "Tanh", "Tanh"] * dirs
    alphas = list(node.attrs.get("activation_alpha") or [])
    betas = list(node.attrs.get("activation_beta") or [])
    funcs = []
    for name in names:
        alpha = alphas.pop(0) if name in DEFAULT_ALPHA and alphas else None
        beta = betas.pop(0) if name in DEFAULT_BETA and betas else None
        funcs.append(_activation(name, alpha, beta))
    return [funcs[3 * d:3 * d + 3] for d in range(dirs)]


@kernel("LSTM")
def lstm(node, inputs):
    x, w, r, b, lens, h0, c0, p = (list(inputs) + [None] * 8)[:8]
    batch_first = bool(node.attrs["layout"])
    xs = np.asarray(x, np.float64)
    if batch_first:
        xs = xs.transpose(1, 0, 2)
        h0 = None if h0 is None else np.asarray(h0).transpose(1, 0, 2)
        c0 = None if c0 is None else np.asarray(c0).transpose(1, 0, 2)
    seq, batch, _ = xs.shape
    dirs, rows, _ = w.shape
    hidden = rows // 4
    clip = node.attrs.get("clip")
    coupled = bool(node.attrs["input_forget"])
    lengths = np.full(batch, seq, np.int64) if lens is None else np.asarray(lens, np.int64)
    y = np.zeros((seq, dirs, batch, hidden))
    y_h = np.zeros((dirs, batch, hidden))
    y_c = np.zeros((dirs, batch, hidden))
    for d, (f, g, h) in enumerate(_functions(node, dirs)):
        reverse = node.attrs["direction"] == "reverse" or d == 1
        wd, rd = np.asarray(w[d], np.float64), np.asarray(r[d], np.float64)
        bias = np.zeros(8 * hidden) if b is None else np.asarray(b[d], np.float64)
        bias = bias[:4 * hidden] + bias[4 * hidden:]
        peep = np.zeros(3 * hidden) if p is None else np.asarray(p[d], np.float64)
        pi, po, pf = peep[:hidden], peep[hidden:2 * hidden], peep[2 * hidden:]
        hs = np.zeros((batch, hidden)) if h0 is None else np.array(h0[d], np.float64)
        cs = np.zeros((batch, hidden)) if c0 is None else np.array(c0[d], np.float64)
        for step in range(seq):
            active = step < lengths
            t = np.where(active, lengths - 1 - step, 0) if reverse else np.full(batch, step)
            xt = xs[t, np.arange(batch)]
            gates = xt @ wd.T + hs @ rd.T + bias
            if clip is not None:
                gates = np.clip(gates, -clip, clip)
            gi, go, gf, gc = np.split(gates, 4, axis=1)
            i = f(gi + pi * cs)
            forget = 1.0 - i if coupled else f(gf + pf * cs)
            c_new = forget * cs + i * g(gc)
            o = f(go + po * c_new)
            h_new = o * h(c_new)
            keep = active[:, None]
            cs = np.where(keep, c_new, cs)
            hs = np.where(keep, h_new, hs)
            y[t[active], d, np.arange(batch)[active]] = h_new[active]
        y_h[d], y_c[d] = hs, cs
    if batch_first:
        y, y_h, y_c = y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2), y_c.transpose(1, 0, 2)
    return [a.astype(x.dtype) for a in (y, y_h, y_c)]
