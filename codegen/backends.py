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


BACKENDS: dict[str, Backend] = {
    "numpy": Backend("numpy", "numpy", "np", "np.ndarray", "from scipy.special import erf",
                     "NumPy on the CPU"),
    "cupy": Backend("cupy", "cupy", "cp", "cp.ndarray", "from cupyx.scipy.special import erf",
                    "CuPy on an NVIDIA GPU"),
}


def backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}; backends: {', '.join(BACKENDS)}")
    return BACKENDS[name]
