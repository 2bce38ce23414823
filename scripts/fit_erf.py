#!/usr/bin/python3
"""Fit the piecewise erf of src/kernels/cpu/fast_math.h and print its table.

[0, 4) is cut into P pieces of width w = 4 / P; erf on |x| in [i w, (i + 1) w)
is c0 + u (c1 + u (c2 + ... + u c(T-1))) with u = 2 (|x| - centre) / w in
[-1, 1); on the first piece the centre is 0 and |x| itself replaces c0, so
that the fit is of erf(a) - a and keeps its relative accuracy near 0. The
kernels take 16 pieces of 7 terms where they are AVX-512 (one permute of a
16-entry register per coefficient) and 4 pieces of 11 terms elsewhere.
Each piece is fitted in double, weighted to the ulps of the float result
and pushed towards minimax by iterative reweighting (Lawson). The
coefficients are then rounded to float one at a time, lowest degree first,
the higher ones refitted to what each rounding left.

The printed fit error is the worst error of the float coefficients over the
sample points, in ulps, before the float evaluation's own rounding. The
kernel's claim (within 1 ulp of the correctly rounded erf at every float in
[-4.5, 4.5]) is checked by `make check-erf`, which runs the kernel itself.

usage: scripts/fit_erf.py [PIECES TERMS] > table.txt   (default 4 11)
"""
import math
import sys

import numpy as np

PIECES, TERMS = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) == 3 else (4, 11)
WIDTH = 4.0 / PIECES
CENTRES = [0.0] + [(i + 0.5) * WIDTH for i in range(1, PIECES)]


def ulps(values):
    v = np.abs(values).astype(np.float32)
    return (np.nextafter(v, np.float32(np.inf)) - v).astype(np.float64)


def fit_piece(i):
    n = 6000
    t = np.cos(np.pi * (np.arange(n) + 0.5) / n)  # Chebyshev nodes: dense at the edges
    a = (i + (t + 1) / 2) * WIDTH
    if i == 0:  # relative accuracy near 0
        a = np.concatenate([a[a > 1e-6], np.linspace(1e-6, 1e-3, 200)])
    a = a.astype(np.float32).astype(np.float64)
    y = np.array([math.erf(v) for v in a])
    u = (a - CENTRES[i]) * 2.0 / WIDTH
    weight = 1.0 / ulps(y)
    if i == 0:  # c0 is |x| itself: fit c1 .. c10 to erf(a) - a
        target, first = y - a, 1
    else:
        target, first = y, 0
    cols = np.stack([u ** k for k in range(first, TERMS)], 1)
    c = np.zeros(cols.shape[1])
    for k in range(cols.shape[1]):  # round c_k, refit the higher ones to the rest
        free = list(range(k, cols.shape[1]))
        resid = target - cols[:, :k] @ c[:k]
        w = np.ones(len(u))
        for _ in range(60):
            s = weight * np.sqrt(w)
            sol, *_ = np.linalg.lstsq(cols[:, free] * s[:, None], resid * s, rcond=None)
            e = np.abs((cols[:, free] @ sol - resid) * weight)
            w = w * (e + 1e-30)
            w /= w.sum()
        c[free] = sol
        c[k] = float(np.float32(c[k]))
    worst = float(np.max(np.abs((cols @ c - target) * weight)))
    return ([0.0] * first) + list(c), worst


def literal(v):
    return "0.f" if v == 0 else ("%.9g" % v).replace("e-0", "e-") + "f"


def main():
    pieces = []
    for i in range(PIECES):
        coef, worst = fit_piece(i)
        print(f"piece {i}: fit error {worst:.3f} ulp", file=sys.stderr)
        pieces.append(coef)
    print(f"inline constexpr int kErfPieces = {PIECES}, kErfTerms = {TERMS};  // c0 .. c{TERMS - 1}")
    print("inline constexpr float kErfCenter[kErfPieces] = {%s};" % ", ".join(literal(c) for c in CENTRES))
    print("inline constexpr float kErfCoef[kErfTerms][kErfPieces] = {")
    for k in range(TERMS):
        print("    {" + ", ".join(literal(p[k]) for p in pieces) + "},  // c%d" % k)
    print("};")
    return 0


if __name__ == "__main__":
    sys.exit(main())
