"""The array backends generated code can target: one table, read by lowering and the templates.

Templates never name an array library: they place ``backend.alias`` (``np``, ``cp``) and the
other strings here. Everything else two backends do differently is a field of this table:
which helper templates a backend replaces with its own (CuPy's fused kernels), and how the
attention core is computed. Adding a backend is adding a row.
"""

from dataclasses import dataclass, field

from tspec.errors import UsageError


@dataclass(frozen=True)
class Backend:
    name: str              # the --backend value and the folder under generated/
    module: str            # what is imported
    alias: str             # the name generated code uses for it
    array_type: str        # the array class, for jaxtyping annotations
    erf_import: str        # the import that provides erf (exact GELU)
    description: str
    # how a block that is exactly softmax(X + L) @ V is computed (spec.attention):
    # "query_blocks": a block of query rows at a time, each over the keys its mask leaves
    # visible; "fused": X + L and the softmax in one kernel (masked_softmax), the scores
    # never stored; either way the equations as written when a trace is asked for
    attention: str
    # attention's query blocks and long row-wise passes (GELU, LayerNorm, softmax) on a pool
    # of threads, BLAS on one thread each: for NumPy, which runs every ufunc on one core but
    # releases the GIL in ufuncs and matrix products; off where the library runs them in
    # parallel itself (a GPU)
    thread_pool: bool
    # exact GELU in float32 by a polynomial in tanh accurate to float32 (scipy's erf takes
    # about 20 ns an element on the CPU); off where erf is a fast kernel of its own
    float32_gelu: bool
    # a state a decoding step extends (the key-value cache) kept in a buffer with room to grow
    # (the extend helper), so that a step appends instead of copying the whole state; off for
    # CuPy, where it has not run on a GPU yet
    growing_states: bool
    # the memory a function's tensors may take at most when MEMORY_LIMIT is None, in bytes:
    # the body of memory_total(), lines that return it (the process's for NumPy: the
    # machine's, or less under an address-space limit, None where the system tells neither;
    # the GPU's for CuPy)
    memory_total: tuple[str, ...]
    memory_owner: str      # whose memory that is, as the error says
    # the helper for a product of two stacks of matrices (None: the @ operator)
    batched_matmul: str | None = None
    # helpers whose template this backend replaces: helper name -> template under templates/
    helpers: dict[str, str] = field(default_factory=dict)
    # helpers the backend's own templates call, beyond the shared ones' needs
    helper_needs: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def template(self, helper: str) -> str:
        """The template a helper is rendered from for this backend."""
        return self.helpers.get(helper, f"helpers/{helper}.py.j2")


BACKENDS: dict[str, Backend] = {
    "numpy": Backend("numpy", "numpy", "np", "np.ndarray", "from scipy.special import erf",
                     "NumPy on the CPU", attention="query_blocks", thread_pool=True,
                     float32_gelu=True, growing_states=True,
                     memory_total=(
                         "sizes = []",
                         'if hasattr(os, "sysconf"):  # Unix only, as resource is',
                         '    pages = os.sysconf("SC_PHYS_PAGES")',
                         '    sizes.append(pages * os.sysconf("SC_PAGE_SIZE"))',
                         "if resource is not None:",
                         "    soft, _ = resource.getrlimit(resource.RLIMIT_AS)  # ulimit -v",
                         "    if soft != resource.RLIM_INFINITY:",
                         "        sizes.append(soft)",
                         "return min(sizes) if sizes else None"),
                     memory_owner="the memory this process may use"),
    "cupy": Backend(
        "cupy", "cupy", "cp", "cp.ndarray", "from cupyx.scipy.special import erf",
        "CuPy on an NVIDIA GPU", attention="fused", thread_pool=False, float32_gelu=False,
        growing_states=False,
        memory_total=("return cp.cuda.Device().mem_info[1]",), memory_owner="the GPU's memory",
        batched_matmul="batched_matmul",
        helpers={name: f"helpers/cupy/{name}.py.j2"
                 for name in ("kernel_support", "softmax", "masked_softmax", "layer_norm",
                              "gelu", "gelu_tanh", "batched_matmul")},
        helper_needs={"softmax": ("kernel_support", "checked_axis"),
                      "masked_softmax": ("softmax",),
                      "layer_norm": ("kernel_support",), "gelu": ("kernel_support",),
                      "gelu_tanh": ("kernel_support",)}),
}


def backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}; backends: {', '.join(BACKENDS)}")
    return BACKENDS[name]
