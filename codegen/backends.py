"""The array backends generated code can target: one table, read by the templates.

Templates never name an array library: they place ``backend.alias`` (``np``, ``cp``) and the
other strings here. Adding a backend is adding a row.
"""

from dataclasses import dataclass

from spec.errors import UsageError


@dataclass(frozen=True)
class Backend:
    name: str              # the --backend value and the folder under generated/
    module: str            # what is imported
    alias: str             # the name generated code uses for it
    array_type: str        # the array class, for jaxtyping annotations
    erf_import: str        # the import that provides erf (exact GELU)
    description: str
    # attention's query blocks and long row-wise passes (GELU, LayerNorm, softmax) on a pool
    # of threads, BLAS on one thread each: for NumPy, which runs every ufunc on one core but
    # releases the GIL in ufuncs and matrix products; off where the library runs them in
    # parallel itself (a GPU)
    thread_pool: bool
    # exact GELU in float32 by a polynomial in tanh accurate to float32 (scipy's erf takes
    # about 20 ns an element on the CPU); off where erf is a fast kernel of its own
    float32_gelu: bool


BACKENDS: dict[str, Backend] = {
    "numpy": Backend("numpy", "numpy", "np", "np.ndarray", "from scipy.special import erf",
                     "NumPy on the CPU", thread_pool=True, float32_gelu=True),
    "cupy": Backend("cupy", "cupy", "cp", "cp.ndarray", "from cupyx.scipy.special import erf",
                    "CuPy on an NVIDIA GPU", thread_pool=False, float32_gelu=False),
}


def backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}; backends: {', '.join(BACKENDS)}")
    return BACKENDS[name]
