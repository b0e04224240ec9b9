"""The array backends tests run generated code on: NumPy always, CuPy where a GPU is, and the
generated CuPy code on the CPU wherever a C++ compiler is.

A test parametrised with ``BACKEND_DTYPES`` runs once per backend and dtype. The "cupy" cases
skip with the reason when CuPy or a CUDA device is missing (as in CI), and their PyTorch
references then run on the GPU too. The "cupy-on-cpu" cases run the same generated CuPy
modules with ``import cupy`` bound to a stand-in (support/cupy_on_cpu: NumPy for the array code,
the CUDA kernels compiled by g++ and run by a harness that emulates a GPU's threads); they skip
only where there is no compiler. The stand-in never replaces real CuPy: the "cupy" cases import
the real one.
"""

import functools
import importlib
import inspect

import numpy as np
import pytest
from support import cupy_on_cpu

from tspec import api
from tspec.execution.loading import load_source


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
needs_compiler = pytest.mark.skipif(bool(cupy_on_cpu.MISSING),
                                    reason=f"needs a C++ compiler: {cupy_on_cpu.MISSING}")


class Arrays:
    """Moving test data to a backend and back (``put`` numpy -> backend; to_numpy back), and
    the generated modules that run on it."""

    def __init__(self, name: str):
        self.name = name
        self.backend = "numpy" if name == "numpy" else "cupy"  # the generated code it runs
        self.device = "cuda" if name == "cupy" else "cpu"     # where PyTorch references run

    @property
    def xp(self):
        """The array module: NumPy, CuPy or the stand-in for CuPy."""
        return {"numpy": np, "cupy": cupy, "cupy-on-cpu": cupy_on_cpu.cupy}[self.name]

    def put(self, value):
        if isinstance(value, dict):
            return {k: self.put(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.put(v) for v in value)
        if isinstance(value, np.ndarray) and self.name != "numpy":
            return self.xp.asarray(value)
        return value

    def load(self, text: str, *, typecheck: bool = False, private: bool = False):
        """A generated module of this backend, from its source text; ``private``: with a
        runtime of its own, for a test that changes the runtime's state."""
        if self.name == "cupy-on-cpu":
            return cupy_on_cpu.load_source(text, typecheck=typecheck, private=private)
        return load_source(text, typecheck=typecheck, private=private)

    def committed(self, name: str):
        """The committed generated module generated/<backend>/<name>.py (imported only when
        asked: CuPy's needs a GPU)."""
        return _committed(self.name, name)

    def __repr__(self):
        return self.name


@functools.cache
def _committed(arrays: str, name: str):
    if arrays == "cupy-on-cpu":
        return cupy_on_cpu.load_module(api.checkout() / "generated" / "cupy" / f"{name}.py")
    backend = "numpy" if arrays == "numpy" else "cupy"
    return importlib.import_module(f"tspec.generated.{backend}.{name}")


def to_numpy(value):
    """A NumPy array for a NumPy, CuPy or stand-in array (or anything np.asarray takes)."""
    if hasattr(value, "__cuda_array_interface__") or isinstance(value, cupy_on_cpu.ndarray):
        return value.get()
    return np.asarray(value)


NUMPY, CUPY, CUPY_ON_CPU = Arrays("numpy"), Arrays("cupy"), Arrays("cupy-on-cpu")
MARKS = {NUMPY: (), CUPY: needs_cupy, CUPY_ON_CPU: needs_compiler}
# the CuPy code on a GPU, and on the CPU
DEVICES = [pytest.param(CUPY, id="cupy", marks=needs_cupy),
           pytest.param(CUPY_ON_CPU, id="cupy-on-cpu", marks=needs_compiler)]
BACKENDS = [pytest.param(NUMPY, id="numpy"), *DEVICES]
BACKEND_DTYPES = [
    pytest.param(NUMPY, "float64", id="numpy-float64"),
    pytest.param(NUMPY, "float32", id="numpy-float32"),
    *(pytest.param(arrays, dtype, id=f"{arrays}-{dtype}", marks=MARKS[arrays])
      for arrays in (CUPY, CUPY_ON_CPU) for dtype in ("float64", "float32", "float16")),
]


def keywords(function, **given):
    """The keyword arguments a generated function requires, from ``given``."""
    names = [p.name for p in inspect.signature(function).parameters.values()
             if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty]
    return {name: given[name] for name in names}
