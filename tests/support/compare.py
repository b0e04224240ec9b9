"""Tensor-by-tensor comparison against a reference, with a table of differences on failure."""

import numpy as np
from support.arrays import to_numpy

# max |ours - reference| <= TOLERANCE * max(1, max |reference|), per tensor
TOLERANCES = {
    "float64": 1e-10,      # float64 code against a float64 reference
    "float32": 5e-5,       # float32 code against a float64 reference
    "float16": 1e-2,       # float16 code (float32 sums) against a float64 reference
}


def differences(ours: dict, reference: dict) -> list[tuple[str, float, float]]:
    rows = []
    for name, expected in reference.items():
        expected = to_numpy(expected).astype(np.float64)
        actual = to_numpy(ours[name]).astype(np.float64)
        assert actual.shape == expected.shape, f"{name}: {actual.shape} vs {expected.shape}"
        # equal entries (infinities of a mask too) differ by 0; a NaN on either side fails
        with np.errstate(invalid="ignore"):          # inf - inf, where both are -inf
            gap = np.where(actual == expected, 0.0, np.abs(actual - expected))
        absolute = float(np.max(gap)) if expected.size else 0.0
        scale = max(1.0, float(np.max(np.abs(expected))) if expected.size else 1.0)
        rows.append((name, absolute, absolute / scale))
    return rows


def assert_close(ours: dict, reference: dict, dtype: str,
                 tolerance: float | None = None) -> list[tuple[str, float, float]]:
    """Every tensor of ``reference`` matches ``ours`` within the dtype's named tolerance (or
    the one given)."""
    assert reference, "nothing to compare"
    tolerance = TOLERANCES[dtype] if tolerance is None else tolerance
    rows = differences(ours, reference)
    bad = [row for row in rows if not row[2] <= tolerance]
    if bad:
        width = max(len(name) for name, _, _ in rows)
        table = "\n".join(f"{name:<{width}}  max abs {a:.3e}  max rel {r:.3e}"
                          f"{'  <-- over ' + format(tolerance, '.0e') if r > tolerance else ''}"
                          for name, a, r in rows)
        raise AssertionError(f"{len(bad)} of {len(rows)} tensors differ beyond {tolerance:.0e} "
                             f"({dtype}):\n{table}")
    return rows


def flat(trace: dict, prefix: str = "") -> dict:
    """A nested trace as dotted names: encoder.layers.0.self_attention.Q_h."""
    out = {}
    for key, value in trace.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat(value, name + "."))
        else:
            out[name] = value
    return out
