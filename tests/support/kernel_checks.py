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
