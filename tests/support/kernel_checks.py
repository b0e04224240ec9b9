"""The checks of the generated CuPy kernels, each on a given device: test_cupy runs them on
a GPU and on the CPU harness, and test_cupy_on_cpu runs them on kernels with a wrong index made
in their source, which must fail them."""

import functools
import math

import numpy as np
from scipy.special import erf
from support.arrays import to_numpy
from support.reference_numpy import softmax as softmax_reference

from tspec import api
from tspec.codegen.generate import source

SPEC = api.read_spec(api.BUILTIN_SPEC)


@functools.cache
def generated(arrays, **choices):
    return arrays.load(source(SPEC, choices, arrays.backend))


def on_device(device, value, dtype):
    return device.xp.asarray(np.asarray(value).astype(dtype))


def softmax_kernel_matches_numpy_on_rows_of_any_length(device, dtype, tolerance, n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((3, 5, n)) * 4).astype(dtype)
    y = generated(device).rt.softmax(device.xp.asarray(x))
    assert y.dtype == np.dtype(dtype) and y.shape == x.shape
    np.testing.assert_allclose(to_numpy(y), softmax_reference(x), atol=tolerance, rtol=0)


def softmax_kernel_edge_cases(device, dtype):
    """Huge and tiny logits do not overflow (float16's largest, 65504, too); a row masked
    everywhere gives zeros; a NaN makes its row NaN rather than vanishing."""
    big = float(np.finfo(dtype).max)
    x = np.array([[big, big / 2, 0.0, -big],
                  [-np.inf, -np.inf, -np.inf, -np.inf],
                  [1e-30, -1e-30, 0.0, 0.0],
                  [np.nan, 0.0, 1.0, 2.0],
                  [-np.inf, 3.0, -np.inf, -np.inf]], dtype=dtype)
    y = to_numpy(generated(device).rt.softmax(device.xp.asarray(x))).astype(np.float64)
    np.testing.assert_allclose(y[0], [1, 0, 0, 0])
    assert (y[1] == 0).all()
    np.testing.assert_allclose(y[2], [0.25] * 4, rtol=1e-3)
    assert np.isnan(y[3]).all()
    np.testing.assert_array_equal(y[4], [0, 1, 0, 0])
    assert not np.isnan(np.delete(y, 3, axis=0)).any()


def masked_softmax_follows_the_masks_broadcasting(device, dtype, mask_shape):
    """softmax(X + L) for masks shared by heads, per head, shared by the batch, without the
    family axis, and one row for every query (a padding mask's shape)."""
    rng = np.random.default_rng(sum(mask_shape))
    X = rng.standard_normal((4, 3, 5, 6)) * 3
    keep = rng.random(mask_shape) < 0.7
    L = np.where(keep, rng.standard_normal(mask_shape), -np.inf)
    L[..., 0, :] = -np.inf                           # a fully masked query row where it has one
    y = generated(device).rt.masked_softmax(on_device(device, X, dtype),
                                            on_device(device, L, dtype))
    expected = softmax_reference(X.astype(dtype).astype(np.float64)
                                 + L.astype(dtype).astype(np.float64))
    tolerance = {"float64": 1e-14, "float32": 1e-6, "float16": 1e-3}[dtype]
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_allclose(to_numpy(y), expected, atol=tolerance, rtol=0)


def layer_norm_kernel_matches_numpy(device, dtype, tolerance):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 7, 48)) * 3 + 1
    gamma, beta = rng.standard_normal(48), rng.standard_normal(48)
    y = generated(device).rt.layer_norm(*(on_device(device, v, dtype) for v in (x, gamma, beta)),
                                        1e-5)
    xs = x.astype(dtype).astype(np.float64)
    centred = xs - xs.mean(-1, keepdims=True)
    expected = centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-5) * \
        gamma.astype(dtype) + beta.astype(dtype)
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_allclose(to_numpy(y), expected, atol=tolerance * np.abs(expected).max())


def layer_norm_kernel_edge_cases(device, dtype):
    """A constant row (zero variance) gives beta, not NaN; float16 values whose squares
    overflow float16 (1000^2) are summed in float32."""
    module = generated(device)
    x = np.array([[5.0] * 8, [1000.0, -1000.0] * 4], dtype=dtype)
    beta = np.arange(8, dtype=dtype)
    y = to_numpy(module.rt.layer_norm(device.xp.asarray(x), device.xp.ones(8, dtype=dtype),
                                   device.xp.asarray(beta), 1e-5)).astype(np.float64)
    np.testing.assert_array_equal(y[0], beta)
    np.testing.assert_allclose(y[1], np.array([1.0, -1.0] * 4) + beta, rtol=1e-3, atol=1e-3)


def gelu_kernels_against_the_normal_cdf(device, dtype, tolerance):
    x = np.linspace(-10, 10, 2001).astype(dtype)
    xs = x.astype(np.float64)
    exact = xs * 0.5 * (1 + erf(xs / math.sqrt(2)))
    tanh_form = 0.5 * xs * (1 + np.tanh(math.sqrt(2 / math.pi) * (xs + 0.044715 * xs ** 3)))
    y = generated(device, activation="gelu").rt.gelu(device.xp.asarray(x))
    y_tanh = generated(device, activation="gelu_tanh").rt.gelu_tanh(device.xp.asarray(x))
    assert y.dtype == y_tanh.dtype == np.dtype(dtype)
    scale = np.maximum(1, np.abs(xs))
    assert np.max(np.abs(to_numpy(y) - exact) / scale) <= tolerance
    assert np.max(np.abs(to_numpy(y_tanh) - tanh_form) / scale) <= tolerance


# ---------------------------------------------------------------------------------------------
# The fused residual norms (layer_norm_rows, rms_norm_rows with a residual) and the product's
# bias-and-activation epilogue

NORM_TOLERANCES = {"float64": 1e-12, "float32": 2e-5, "float16": 2e-2}


def norm_reference(name, s, gamma, beta, eps):
    """LayerNorm or RMSNorm of the float64 rows s; a constant row's LayerNorm is beta."""
    if name == "rms_norm":
        root = np.sqrt((s ** 2).mean(-1, keepdims=True) + eps)
        return s / np.where(root == 0, 1.0, root) * gamma
    centred = s - s.mean(-1, keepdims=True)
    y = centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + eps) * gamma + beta
    constant = (s == s[..., :1]).all(-1, keepdims=True)
    return np.where(constant, np.broadcast_to(beta, y.shape), y)


def residual_rows_of(n, dtype, rng):
    """x and r of 4 rows of n entries, in ``dtype``: random ones; a row whose sum x + r is
    constant (zero variance) though neither summand is; a row of large values whose sum and
    squares overflow float16 if summed in it (each sum within float16's range); zeros."""
    x = rng.standard_normal((4, n)) * 3 + 1
    r = rng.standard_normal((4, n)) * 2
    r[1] = np.round(r[1] * 4) / 4                      # quarters: exact in float16
    x[1] = 7.0 - r[1]
    big = np.where(np.arange(n) % 2, 500.0, -300.0) if n > 1 else np.array([700.0])
    x[2], r[2] = big, big / 2
    x[3], r[3] = 0.0, 0.0
    return x.astype(dtype), r.astype(dtype)


def residual_norm_matches_numpy(device, name, dtype, n, keep_sum=True):
    """layer_norm or rms_norm(x, ..., residual=r, total=t): the normalised sum x + r, the sum
    rounded to ``dtype`` first (as x + r is stored), against float64; t is x + r exactly (in
    ``dtype``); rows of width n (odd ones too), a zero-variance sum, float16 values whose sums
    and squares pass 65504, zeros; gamma and beta broadcast from width 1 at n = 1."""
    rng = np.random.default_rng(n)
    x, r = residual_rows_of(n, dtype, rng)
    width = 1 if n == 1 else n
    gamma = rng.standard_normal(width).astype(dtype)
    beta = rng.standard_normal(width).astype(dtype)
    xp, rt = device.xp, generated(device).rt
    total = xp.zeros(x.shape, dtype=dtype) if keep_sum else None
    weights = (gamma,) if name == "rms_norm" else (gamma, beta)
    y = getattr(rt, name)(xp.asarray(x), *(xp.asarray(w) for w in weights), 1e-5,
                          residual=xp.asarray(r), total=total)
    s = (x + r).astype(np.float64)                     # rounded to dtype, as stored
    expected = norm_reference(name, s, gamma.astype(np.float64), beta.astype(np.float64), 1e-5)
    assert y.dtype == np.dtype(dtype) and y.shape == x.shape
    ours = to_numpy(y).astype(np.float64)
    np.testing.assert_allclose(ours, expected, rtol=0,
                               atol=NORM_TOLERANCES[dtype] * max(1.0, np.abs(expected).max()))
    if name == "layer_norm":                           # the constant sum: beta exactly
        np.testing.assert_array_equal(ours[1], np.broadcast_to(beta, (n,)))
    if keep_sum:
        np.testing.assert_array_equal(to_numpy(total), x + r)
    unfused = getattr(rt, name)(xp.asarray(x + r), *(xp.asarray(w) for w in weights), 1e-5)
    np.testing.assert_allclose(ours, to_numpy(unfused).astype(np.float64), rtol=0,
                               atol=NORM_TOLERANCES[dtype] * max(1.0, np.abs(expected).max()))


def rms_norm_kernel_matches_numpy(device, dtype, n):
    """rms_norm alone against float64: random rows, zeros (zeros out, under eps 0 too), float16
    values whose squares overflow float16 (1000^2)."""
    rng = np.random.default_rng(n + 1)
    x = rng.standard_normal((3, 5, n)) * 3
    x[0, 0], x[0, 1] = 0.0, np.where(np.arange(n) % 2, 1000.0, -1000.0)
    x = x.astype(dtype)
    gamma = rng.standard_normal(n).astype(dtype)
    xp, rt = device.xp, generated(device).rt
    for eps in (1e-5, 0.0):
        y = rt.rms_norm(xp.asarray(x), xp.asarray(gamma), eps)
        expected = norm_reference("rms_norm", x.astype(np.float64), gamma.astype(np.float64),
                                  None, eps)
        assert y.dtype == np.dtype(dtype) and y.shape == x.shape
        ours = to_numpy(y).astype(np.float64)
        assert (ours[0, 0] == 0).all()
        np.testing.assert_allclose(ours, expected, rtol=0,
                                   atol=NORM_TOLERANCES[dtype] * max(1.0, np.abs(expected).max()))


def activation_reference(name, x):
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if name == "relu":
            return np.where(x < 0, 0.0, x)
        if name == "silu":
            return x / (1 + np.exp(-x))
        if name == "gelu":
            return x * 0.5 * (1 + erf(x / math.sqrt(2)))
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


ACTIVATION_TOLERANCES = {"float64": 1e-14, "float32": 2e-6, "float16": 2e-3}


def activation_kernel_matches_numpy(device, name, dtype):
    """relu or silu (one kernel each) against float64, within the dtype's rounding of the
    result's scale: -20 .. 20, NaN, +-inf (SiLU(-inf) is NaN, as -inf * 0), the dtype's
    largest values, and a strided view into a strided out."""
    big = float(np.finfo(dtype).max)
    x = np.concatenate([np.linspace(-20, 20, 401), [np.nan, np.inf, big, -big, 0.0]])
    x = x.astype(dtype)
    xp, function = device.xp, getattr(generated(device).rt, name)
    y = to_numpy(function(xp.asarray(x))).astype(np.float64)
    expected = activation_reference(name, x)
    assert y.dtype == np.float64 and y.shape == x.shape
    np.testing.assert_array_equal(np.isnan(y), np.isnan(expected))
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(y[~finite & ~np.isnan(expected)],
                                  expected[~finite & ~np.isnan(expected)])
    scale = np.maximum(1.0, np.abs(expected[finite]))
    assert (np.abs(y[finite] - expected[finite]) / scale <= ACTIVATION_TOLERANCES[dtype]).all()
    strided, out = xp.zeros(2 * len(x), dtype=dtype), xp.zeros(3 * len(x), dtype=dtype)
    strided[::2] = xp.asarray(x)
    function(strided[::2], out=out[::3])
    np.testing.assert_array_equal(to_numpy(out)[::3], to_numpy(function(xp.asarray(x))))
    assert not to_numpy(out)[1::3].any()


def epilogue_matches_numpy(device, name, dtype, n):
    """project(X, W, b, activation=rt.<name>): the product, then the bias and the activation
    in one kernel (epilogue_kernel, never the separate passes), against float64 applied to the
    product and the sum rounded to ``dtype`` as the unfused passes store them; n columns (a
    bias of width 1 too), float16 products past 65504 give inf as p += b would."""
    rng = np.random.default_rng(n * 7 + len(name))
    X = rng.standard_normal((2, 3, 16)).astype(dtype)
    W = (rng.standard_normal((16, n)) * 0.5).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    if dtype == "float16":
        X[0, 0] = 120.0
        W[:, 0] = 60.0                      # a product of 16 * 120 * 60, past float16's range
    xp, rt = device.xp, generated(device).rt
    activation = getattr(rt, name)

    def refused(*args, **kwargs):
        raise AssertionError(f"project applied {name} as a pass of its own")
    fused = rt.project
    calls = []
    kernel = rt.epilogue_kernel
    try:                                    # (float16's overflow is the point: no warning)
        rt.epilogue_kernel = lambda *formula: calls.append(formula) or kernel(*formula)
        with np.errstate(over="ignore"):
            y = fused(xp.asarray(X), xp.asarray(W), xp.asarray(b),
                      activation=type("Formula", (), {
                          "device_function": activation.device_function,
                          "__call__": refused})())
    finally:
        rt.epilogue_kernel = kernel
    assert calls == [activation.device_function]
    with np.errstate(over="ignore"):
        product = (X.astype(np.float64) @ W.astype(np.float64)).astype(dtype)
        summed = (product.astype(np.float64) + b.astype(np.float64)).astype(dtype)
        unfused = to_numpy(activation(fused(xp.asarray(X), xp.asarray(W)) + xp.asarray(b)))
    expected = activation_reference(name, summed)
    assert y.dtype == np.dtype(dtype) and y.shape == (2, 3, n)
    ours = to_numpy(y).astype(np.float64)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(ours[~finite], expected[~finite])
    tolerance = {"float64": 1e-12, "float32": 1e-5, "float16": 4e-3}[dtype]
    scale = np.maximum(1.0, np.abs(expected[finite]))
    assert (np.abs(ours[finite] - expected[finite]) / scale <= tolerance).all()
    np.testing.assert_allclose(ours[finite], unfused.astype(np.float64)[finite], rtol=0,
                               atol=tolerance * scale.max())


def glu_matches_numpy(device, name, dtype, n):
    """glu(g, x, activation=rt.<name>): activation(g) * x in one kernel (glu_kernel, never the
    activation's own pass), exactly the numbers of the activation's kernel times x in the
    dtype, and within the dtype's rounding of float64; NaN, +-inf and float16 products past
    65504 (inf) as the separate passes give them."""
    rng = np.random.default_rng(n * 3 + len(name))
    g = rng.standard_normal((2, 5, n)) * 4
    x = rng.standard_normal((2, 5, n)) * 3
    g[0, 0, :3], x[0, 0, :3] = [np.nan, np.inf, -np.inf][:n], 1.0
    if dtype == "float16":
        g[1, 0], x[1, 0] = 300.0, 400.0                 # 300 * 400 > 65504
    g, x = g.astype(dtype), x.astype(dtype)
    xp, rt = device.xp, generated(device).rt
    activation = getattr(rt, name)
    used = []
    kernel = rt.glu_kernel
    try:
        rt.glu_kernel = lambda *formula: used.append(formula) or kernel(*formula)
        with np.errstate(over="ignore", invalid="ignore"):
            y = rt.glu(xp.asarray(g), xp.asarray(x), type("Formula", (), {
                "device_function": activation.device_function,
                "__call__": lambda *a, **k: (_ for _ in ()).throw(
                    AssertionError(f"glu applied {name} as a pass of its own"))})())
            apart = to_numpy(activation(xp.asarray(g))) * x
    finally:
        rt.glu_kernel = kernel
    assert used == [activation.device_function]
    assert y.dtype == np.dtype(dtype) and y.shape == g.shape
    ours = to_numpy(y)
    np.testing.assert_array_equal(ours, apart)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = activation_reference(name, g) * x.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))
    finite = np.isfinite(expected) & np.isfinite(ours)
    scale = np.maximum(1.0, np.abs(expected[finite]))
    assert (np.abs(ours[finite] - expected[finite]) / scale <= 2 * ACTIVATION_TOLERANCES[dtype]
            * np.maximum(1.0, np.abs(x[finite]))).all()


# ---------------------------------------------------------------------------------------------
# Fused attention (attend_fused's kernels)

def attention_reference(q, k, v, L) -> np.ndarray:
    """softmax(q @ k.T + L) @ v in float64, a row whose keys are all masked giving 0."""
    q, k, v, L = (np.asarray(x, dtype=np.float64) for x in (q, k, v, L))
    S = q @ k.swapaxes(-1, -2) + L
    peak = S.max(-1, keepdims=True, initial=-np.inf)
    weights = np.exp(S - np.where(np.isfinite(peak), peak, 0.0))
    total = weights.sum(-1, keepdims=True)
    return (np.where(total > 0, weights / np.where(total > 0, total, 1.0), 0.0)) @ v


class FusedOnly:
    """Within the block, the fused kernels must run: the fallback (masked_softmax) raises."""

    def __init__(self, module):
        self.runtime = module.rt

    def __enter__(self):
        def refused(*args, **kwargs):
            raise AssertionError("attend_fused fell back to masked_softmax")
        self.saved = self.runtime.masked_softmax
        self.runtime.masked_softmax = refused
        return self

    def __exit__(self, *exc):
        self.runtime.masked_softmax = self.saved
        return False


def mask_of(kind: str, shape: tuple, rng) -> np.ndarray:
    """An additive mask L (0 keeps a key, -inf masks it) for scores of ``shape`` (H, B, T_q,
    T_kv): "padding" (B, 1, T_kv) over every query, the last sequence all padding; "causal"
    (T_q, T_kv), bottom-right aligned; "random" (H, B, T_q, T_kv), finite biases among the
    masked keys, every key of query 0 masked; "none" (1, 1, 1, T_kv) zeros."""
    _, B, T_q, T_kv = shape
    if kind == "padding":
        keep = rng.random((B, 1, T_kv)) < 0.8
        keep[:, :, :1] = True
        keep[-1] = False
        return np.where(keep, 0.0, -np.inf)
    if kind == "causal":
        return np.where(np.tri(T_q, T_kv, k=T_kv - T_q) == 1, 0.0, -np.inf)
    if kind == "random":
        L = np.where(rng.random(shape) < 0.3, -np.inf, rng.standard_normal(shape))
        L[..., :1, :] = -np.inf
        return L
    return np.zeros((1, 1, 1, T_kv))


def attention_kernel_matches_numpy(device, dtype, d_k, T_q, T_kv, mask="random", d_v=None,
                                   H=3, B=2, scale=1.0):
    """attend_fused (its kernels, never the fallback) against float64 on inputs rounded to
    ``dtype``, the mask given as the models give it: a broadcast view of its own shape."""
    rng = np.random.default_rng(d_k * 1000 + T_q * 10 + T_kv)
    d_v = d_k if d_v is None else d_v
    q = rng.standard_normal((H, B, T_q, d_k)) * scale / max(1, d_k) ** 0.5
    k = rng.standard_normal((H, B, T_kv, d_k))
    v = rng.standard_normal((H, B, T_kv, d_v))
    L = mask_of(mask, (H, B, T_q, T_kv), rng)
    module = generated(device)
    arguments = [on_device(device, x, dtype) for x in (q, k, v, L)]
    if mask == "padding":                     # (B, 1, T_kv) as padding_mask's view: stride 0
        arguments[3] = device.xp.broadcast_to(arguments[3][None], (1, B, T_q, T_kv))
    with FusedOnly(module):
        O = module.rt.attend_fused(*arguments)
    expected = attention_reference(*(np.asarray(x).astype(dtype) for x in (q, k, v, L)))
    tolerance = {"float64": 1e-13, "float32": 2e-6, "float16": 2e-3}[dtype]
    assert O.dtype == np.dtype(dtype) and O.shape == (H, B, T_q, d_v)
    np.testing.assert_allclose(to_numpy(O).astype(np.float64), expected,
                               atol=tolerance * max(1.0, np.abs(expected).max(initial=0.0)),
                               rtol=0)
    return to_numpy(O)
