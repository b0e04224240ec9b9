"""Comparisons against a reference: tensor by tensor, with a table of differences on failure;
and a grid, point by point, against one check and count per combination."""

import numpy as np
from support.arrays import to_numpy

import tspec
from tspec import api
from tspec.analysis.counts import DTYPE, costs, evaluate, used_dims
from tspec.docs.site import sizes_for

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


def one_variant(name, settings, dims):
    """Verdict and counts of one combination, through tspec.check and the docs' counting."""
    variant = api.load(name, settings + [f"{k}={v}" for k, v in dims.items()])
    report = api.check(variant)
    breaks = sorted((f.kind, f.line) for f in report.findings if f.scope == "variant")
    assert report.ok or breaks, [f.text() for f in report.findings]
    if not report.ok:
        return False, breaks, (None, None, None)
    model_spec = variant.spec
    choices = model_spec.choice_values(variant.choices)
    bodies = costs(model_spec, choices)
    sizes = sizes_for(variant, used_dims(model_spec, choices, bodies))
    model = bodies[model_spec.name]
    figures = []
    for expr in (model.parameters, model.flops.total, model.activations.bytes(DTYPE)):
        try:
            figures.append(evaluate(expr, model_spec, choices, sizes))
        except KeyError:
            figures.append(None)
    return True, breaks, tuple(figures)


def assert_agrees(name, settings, axes):
    grid = tspec.grid(name, axes, settings)
    points = list(grid.points())
    assert len(points) == len(grid) > 0
    for point in points:
        valid, breaks, figures = one_variant(name, settings, point.dims)
        assert point.valid == valid, point
        assert sorted((b.kind, b.line) for b in point.breaks) == breaks, point
        assert (point.parameters, point.flops, point.activation_bytes) == figures, point
    return grid
