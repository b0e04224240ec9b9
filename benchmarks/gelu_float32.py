"""The float32 exact-GELU fast path: where its coefficients come from, its speed and accuracy.

    python benchmarks/gelu_float32.py [--fit]

Generated NumPy code computes exact GELU in float32 as x * Phi(x) with

    Phi(x) = (1 + tanh(c * p(c^2))) / 2,   c = x clipped to [-CLIP, CLIP],
    p(u) = a_0 + a_1 u + ... + a_6 u^6

instead of scipy.special.erf, which runs about 20 ns an element. p is the minimax fit (a
linear program over a fine grid) of atanh(erf(x / sqrt(2))) / x, weighted by how much an error
in it moves Phi: the fitted Phi is within about 2e-8 of the normal CDF on [-CLIP, CLIP], and
beyond CLIP the true Phi is within 2e-8 of 0 or 1 (float32's spacing just below 1 is 6e-8).
`--fit` solves the linear program again and prints the coefficients (they are in
codegen/templates/helpers/gelu.py.j2). Without it: the time of each route on a
(1024, 3072) float32 array, on one thread, and each route's largest error in Phi over a wide
range of float32 inputs, against float64 x * ndtr(x), in units of 2^-24 (half float32's spacing
just below 1). tests/codegen/test_codegen.py checks the same bound.
"""

import argparse
import math
import time

import numpy as np
import scipy.special

CLIP = 5.5
DEGREE = 6


def fit(points: int = 6000) -> tuple[list[float], float]:
    from scipy.optimize import linprog

    x = np.linspace(1e-3, CLIP, points)
    target = np.arctanh(scipy.special.erf(x / math.sqrt(2))) / x       # g(x) / x
    # dPhi / d(g / x), in units of 1e-8 (the solver's tolerances are about 1e-7)
    weight = 0.5 / np.cosh(target * x) ** 2 * x * 1e8
    scale = CLIP * CLIP                         # powers of u / CLIP^2: a well-scaled problem
    powers = np.vander(x * x / scale, DEGREE + 1, increasing=True)
    # minimise t subject to |weight * (powers @ a - target)| <= t
    rows = weight[:, None] * powers
    a_ub = np.vstack([np.hstack([rows, -np.ones((points, 1))]),
                      np.hstack([-rows, -np.ones((points, 1))])])
    b_ub = np.concatenate([weight * target, -weight * target])
    cost = np.zeros(DEGREE + 2)
    cost[-1] = 1
    result = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=[(None, None)] * (DEGREE + 2),
                     method="highs")
    if result.status != 0:
        raise RuntimeError(f"the linear program failed: {result.message}")
    return (result.x[:-1] / scale ** np.arange(DEGREE + 1)).tolist(), float(result.x[-1]) * 1e-8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="solve for the coefficients")
    args = parser.parse_args()
    if args.fit:
        coefficients, error = fit()
        print(f"largest weighted error (in Phi) on the grid: {error:.2e}")
        print(", ".join(repr(c) for c in coefficients))
        return
    from tspec import api
    from tspec.codegen.generate import source
    from tspec.execution.loading import load_source

    module = load_source(source(api.read_spec(api.BUILTIN_SPEC), {"activation": "gelu"}))
    gelu = module.rt.gelu.__wrapped__                 # one call, no row chunks on threads

    def erf_gelu(x):
        return 0.5 * x * (1.0 + scipy.special.erf(x * (1.0 / math.sqrt(2.0))))

    x = np.random.default_rng(0).standard_normal((1024, 3072)).astype(np.float32) * 2
    for name, function in (("scipy erf", erf_gelu), ("fast path", gelu),
                           ("x * ndtr(x)", lambda v: v * scipy.special.ndtr(v))):
        function(x)
        times = []
        for _ in range(7):
            start = time.perf_counter()
            function(x)
            times.append(time.perf_counter() - start)
        print(f"{name:<12} {sorted(times)[3] * 1000:6.1f} ms")
    grid = np.concatenate([np.linspace(-40, 40, 1_600_001), -np.logspace(-30, 30, 20001),
                           np.logspace(-30, 30, 20001), [0.0]]).astype(np.float32)
    exact = grid.astype(np.float64) * scipy.special.ndtr(grid.astype(np.float64))
    for name, function in (("scipy erf", erf_gelu), ("fast path", gelu)):
        error = np.abs(function(grid).astype(np.float64) - exact)
        in_phi = error / np.maximum(np.abs(grid.astype(np.float64)), 1e-300) / 2.0 ** -24
        worst = int(in_phi.argmax())
        print(f"{name:<12} largest error in Phi {in_phi[worst]:.2f} x 2^-24 (at x = "
              f"{grid[worst]:.4g})")


if __name__ == "__main__":
    main()
