"""The coefficient table of the AVX-512 erf in rt_torchgelu_avx512.c, and its error check.

erf(a) for 0 <= a < 4 in 8 intervals of width 1/2, i = floor(2a): interval 0 as
a * P0(a^2) (the Taylor series at 0, 12 terms: relative accuracy near 0), interval i > 0 as
Pi(a - c_i), the Taylor series of erf at its centre c_i = i/2 + 1/4, TERMS coefficients each
(mpmath, 50 digits, rounded to double). The kernel keeps p's float32 rounding only when
p * (1 - 1e-12) and p * (1 + 1e-12) round alike, so p must stay well within 1e-12 |p| of erf:
this script checks the table's relative error against libm's erf on 200 000 points of every
interval (ends included) and against mpmath on a subset, and fails above MAX_ERROR.

    python scripts/erf_series.py        # prints the C table after the check
"""

from __future__ import annotations

import math

import mpmath
import numpy as np

TERMS = 15
ZERO_TERMS = 12
MAX_ERROR = 1e-13


def table() -> np.ndarray:
    """[TERMS][8] coefficients, Horner order (highest power first), column i = interval i."""
    mpmath.mp.dps = 50
    tabs = np.zeros((TERMS, 8))
    for n in range(ZERO_TERMS):
        c = 2 / mpmath.sqrt(mpmath.pi) * (-1) ** n / (mpmath.factorial(n) * (2 * n + 1))
        tabs[TERMS - 1 - n][0] = float(c)
    for i in range(1, 8):
        for n, c in enumerate(mpmath.taylor(mpmath.erf, mpmath.mpf(i) / 2 + 0.25, TERMS - 1)):
            tabs[TERMS - 1 - n][i] = float(c)
    return tabs


def evaluate(tabs: np.ndarray, a: np.ndarray) -> np.ndarray:
    """The kernel's p for 0 <= a < 4 (float64, Horner)."""
    i = np.minimum((a * 2).astype(np.int64), 7)
    x = np.where(i == 0, a * a, a - (i * 0.5 + 0.25))
    p = np.zeros_like(a)
    for row in tabs:
        p = p * x + row[i]
    return np.where(i == 0, p * a, p)


def worst_error(tabs: np.ndarray) -> float:
    worst = 0.0
    for i in range(8):
        a = np.linspace(i * 0.5, (i + 1) * 0.5, 200_001)
        if i == 7:
            a = a[:-1]
        if i == 0:
            a = np.concatenate([a[1:], np.geomspace(1e-300, 0.5, 20_000)])
        libm = np.array([math.erf(v) for v in a])
        exact = np.array([float(mpmath.erf(v)) for v in a[::499]])
        worst = max(worst, float(np.max(np.abs(evaluate(tabs, a) - libm) / libm)),
                    float(np.max(np.abs(evaluate(tabs, a[::499]) - exact) / exact)))
    return worst


def main() -> None:
    tabs = table()
    worst = worst_error(tabs)
    if not worst < MAX_ERROR:
        raise SystemExit(f"relative error {worst:.3g} above {MAX_ERROR:g}")
    print(f"/* relative error <= {worst:.2g} (scripts/erf_series.py) */")
    for row in tabs:
        print("    {" + ", ".join(float(v).hex() for v in row) + "},")


if __name__ == "__main__":
    main()
