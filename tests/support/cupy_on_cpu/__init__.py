"""The generated CuPy code on the CPU: its CUDA kernels compiled by g++ and run by a harness
that emulates a GPU's threads (kernels.py, cuda_on_cpu.h), its array code on NumPy through a
stand-in for CuPy (standin.py).

``load_source(text)`` imports a generated CuPy module with ``import cupy`` bound to the
stand-in; nothing else in the process sees it (real CuPy, where installed, stays what
``import cupy`` gives). ``MISSING`` says why the harness cannot run here ("" when it can).
"""

import contextlib
import sys

from tspec.execution import loading as runtime

from . import kernels, standin
from .kernels import CompileError, KernelError

cupy = standin.module
ndarray = standin.ndarray
MISSING = "" if kernels.compiler() else "no C++ compiler (g++, or $CXX) to build kernels with"
TAG = "cupy-on-cpu"        # the loads whose runtime imports the stand-in as CuPy

__all__ = ["MISSING", "CompileError", "KernelError", "cupy", "load_module", "load_source",
           "ndarray"]


@contextlib.contextmanager
def modules_replaced(modules: dict, *more: str):
    """``sys.modules`` with ``modules`` in place within the block; after it, every entry they
    name, and those named ``more`` (what the block imports), as it was before."""
    saved = {name: sys.modules.get(name) for name in [*modules, *more]}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _as_cupy():
    """``import cupy`` (and cupyx.scipy.special) gives the stand-in within the block."""
    return modules_replaced(standin.MODULES)


def load_source(text: str, *, typecheck: bool = False, private: bool = False,
                runtime_text: str | None = None):
    """A generated CuPy module (its source text) imported with the stand-in as CuPy, and its
    runtime too (``runtime_text`` where given): one of their own, apart from the runtime real
    CuPy's modules share."""
    with _as_cupy():
        return runtime.load_source(text, typecheck=typecheck, private=private, tag=TAG,
                                   runtime=runtime_text)


def load_module(path, *, typecheck: bool = False):
    """A generated CuPy module (a file) imported with the stand-in as CuPy, and its runtime
    too (one of their own)."""
    with _as_cupy():
        return runtime.load_module(path, typecheck=typecheck, tag=TAG)
