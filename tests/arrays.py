"""The array backends tests run generated code on: NumPy always, CuPy where a GPU is.

A test parametrised with ``BACKEND_DTYPES`` runs once per backend and dtype; the CuPy cases
skip with the reason when CuPy or a CUDA device is missing (as in CI), and their PyTorch
references then run on the GPU too.
"""

import numpy as np
import pytest


def _find_cupy():
    try:
        import cupy
    except ImportError:
        return None, "CuPy is not installed"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "no CUDA device"
    except cupy.cuda.runtime.CUDARuntimeError as error:      # no driver or no device
        return None, f"no usable CUDA device ({type(error).__name__}: {error})"
    return cupy, ""


cupy, CUPY_MISSING = _find_cupy()
needs_cupy = pytest.mark.skipif(cupy is None, reason=f"needs CuPy and a GPU: {CUPY_MISSING}")


class Arrays:
    """Moving test data to a backend and back: ``put`` numpy -> backend, ``get`` back."""

    def __init__(self, name: str):
        self.name = name
        self.device = "cuda" if name == "cupy" else "cpu"     # where PyTorch references run

    def put(self, value):
        if isinstance(value, dict):
            return {k: self.put(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.put(v) for v in value)
        if isinstance(value, np.ndarray) and self.name == "cupy":
            return cupy.asarray(value)
        return value

    def __repr__(self):
        return self.name


def to_numpy(value):
    """A NumPy array for a NumPy or CuPy array (or anything np.asarray takes)."""
    return value.get() if hasattr(value, "__cuda_array_interface__") else np.asarray(value)


NUMPY, CUPY = Arrays("numpy"), Arrays("cupy")
BACKEND_DTYPES = [
    pytest.param(NUMPY, "float64", id="numpy-float64"),
    pytest.param(NUMPY, "float32", id="numpy-float32"),
    pytest.param(CUPY, "float64", id="cupy-float64", marks=needs_cupy),
    pytest.param(CUPY, "float32", id="cupy-float32", marks=needs_cupy),
    pytest.param(CUPY, "float16", id="cupy-float16", marks=needs_cupy),
]
