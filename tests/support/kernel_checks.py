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
