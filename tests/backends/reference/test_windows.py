"""The reference convolution's sums (lowbit.backends.reference.windows.conv_nd): depthwise-like
convolutions add the kernel offsets' float64 products one offset after another from 0, in
either memory layout, and integer convolutions are exact."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from lowbit.backends.reference.windows import conv_nd, padded_float64
from lowbit.ops.conv_geometry import Window

RNG = np.random.default_rng(3)


def _definition(x, w, window: Window, group: int) -> np.ndarray:
    """y[n, m, o] = 0 + x_pad[n, c(m), o*s + k0*d] * w[m, 0, k0] + ... in kernel-offset
    order, one output element at a time, in float64 (2-D only)."""
    pads = window.resolved_pads(x.shape[2:])
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    out = tuple(int(d) for d in window.output_dims(x.shape[2:]))
    n, m = x.shape[0], w.shape[0]
    mg = m // group
    y = np.zeros((n, m) + out)
    (s0, s1), (d0, d1) = window.strides, window.dilations
    for b, ch, i, j in itertools.product(range(n), range(m), range(out[0]), range(out[1])):
        acc = 0.0
        for k0, k1 in np.ndindex(*w.shape[2:]):
            acc += float(xp[b, ch // mg, i * s0 + k0 * d0, j * s1 + k1 * d1]) * \
                float(w[ch, 0, k0, k1])
        y[b, ch, i, j] = acc
    return y


@pytest.mark.parametrize(("channels", "multiplier", "width", "kernel", "stride", "dilation"), [
    (3, 1, 9, 3, 1, 1),   # channels first: fewer channels than twice the output width
    (12, 1, 5, 3, 1, 1),  # channels last
    (4, 2, 4, 5, 2, 1),   # channels last, two outputs per channel
    (6, 3, 11, 3, 2, 2),  # channels first, three outputs per channel
])  # fmt: skip
def test_depthwise_sums_follow_the_kernel_offsets_in_either_layout(channels, multiplier, width,
                                                                    kernel, stride, dilation):
    x = RNG.standard_normal((2, channels, width + 2, width)).astype(np.float32)
    x[0, 0] = -0.0  # products of -0.0 sum to +0.0 from the initial 0
    w = RNG.standard_normal((channels * multiplier, 1, kernel, kernel)).astype(np.float32)
    w[0] = np.abs(w[0])
    window = Window((kernel, kernel), (stride, stride), (dilation, dilation), "NOTSET",
                    (1, 2, 2, 1))
    got = conv_nd(x, w, window, channels)
    expected = _definition(x, w, window, channels)
    assert got.shape == expected.shape
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()
    assert not np.signbit(got[0, :multiplier]).any()


def test_integer_depthwise_and_grouped_convolutions_are_exact():
    x = RNG.integers(-255, 256, (2, 16, 7, 6)).astype(np.int64)
    for w_shape, group in (((16, 1, 3, 3), 16), ((8, 4, 3, 2), 4)):
        w = RNG.integers(-32767, 32768, w_shape).astype(np.int64)
        window = Window(w_shape[2:], (1, 2), (1, 1), "NOTSET", (1, 0, 1, 1))
        got = conv_nd(x, w, window, group)
        assert got.dtype == np.int64 and got.flags.c_contiguous
        np.testing.assert_array_equal(got, _exact(x, w, window, group))


def _exact(x, w, window: Window, group: int) -> np.ndarray:
    """The grouped convolution in Python integers (2-D)."""
    pads = window.resolved_pads(x.shape[2:])
    xp = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])]).astype(object)
    out = tuple(int(d) for d in window.output_dims(x.shape[2:]))
    n, m, cg = x.shape[0], w.shape[0], w.shape[1]
    mg = m // group
    y = np.zeros((n, m) + out, dtype=object)
    (s0, s1) = window.strides
    for b, ch, i, j in itertools.product(range(n), range(m), range(out[0]), range(out[1])):
        c0 = (ch // mg) * cg
        patch = xp[b, c0:c0 + cg, i * s0:i * s0 + w.shape[2], j * s1:j * s1 + w.shape[3]]
        y[b, ch, i, j] = int((patch * w[ch].astype(object)).sum())
    return y.astype(np.int64)


def test_padding_fills_the_border_in_either_layout():
    x = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    pads = (1, 0, 2, 3)
    expected = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (1, 2), (0, 3)],
                      constant_values=7.0)
    np.testing.assert_array_equal(padded_float64(x, pads, 7.0), expected)
    np.testing.assert_array_equal(padded_float64(x, pads, 7.0, channels_last=True),
                                  expected.transpose(0, 2, 3, 1))
