"""The array backends generated code can target: one table, read by lowering and the templates.

Templates never name an array library: they place ``backend.alias`` (``np``, ``cp``) and the
other strings here. Everything else two backends do differently is a field of this table:
which helper templates a backend replaces with its own (CuPy's fused kernels), and how the
attention core is computed. Adding a backend is adding a row.

Beside it, the helpers of a backend's runtime (generated/<backend>/_runtime.py): those no op
owns (``RUNTIME_HELPERS``) and each op's own (its ``helper`` in spec/ops/catalogue.py), with
the helpers and imports each one's code uses; the runtime defines them in ``runtime_order``.
"""

from dataclasses import dataclass, field, replace

from tspec.errors import CodegenError, UsageError
from tspec.ops.base import CATALOGUE
from tspec.ops.catalogue import OPS


@dataclass(frozen=True)
class Backend:
    name: str              # the --backend value and the folder under generated/
    module: str            # what is imported
    alias: str             # the name generated code uses for it
    array_type: str        # the array class, for jaxtyping annotations
    erf_import: str        # the import that provides erf (exact GELU)
    description: str
    # how a block that is exactly softmax(q @ k.T + L) @ V is computed (spec.attention)
    # without a trace: the runtime helper the model calls, and what the model says of it
    # ("attend_in_blocks": a block of query rows at a time, each over the keys its mask
    # leaves visible; "attend_fused": q @ k.T + L and the softmax in one kernel, the scores
    # never stored); with a trace, the equations as written
    attention: str
    attention_note: str
    # attention's query blocks and long row-wise passes (GELU, LayerNorm, softmax) on a pool
    # of threads, BLAS on one thread each: for NumPy, which runs every ufunc on one core but
    # releases the GIL in ufuncs and matrix products; off where the library runs them in
    # parallel itself (a GPU)
    thread_pool: bool
    # exact GELU in float32 by a polynomial in tanh accurate to float32 (scipy's erf takes
    # about 20 ns an element on the CPU); off where erf is a fast kernel of its own
    float32_gelu: bool
    # a state a decoding step extends (the key-value cache) kept in a buffer with room to grow
    # (the extend helper), so that a step appends instead of copying the whole state
    growing_states: bool
    # the memory a function's tensors may take at most when MEMORY_LIMIT is None, in bytes:
    # the body of memory_total(), lines that return it (the process's for NumPy: the
    # machine's, or less under an address-space limit, None where the system tells neither;
    # the GPU's for CuPy)
    memory_total: tuple[str, ...]
    memory_owner: str      # whose memory that is, as the error says
    # the helper for a product of two stacks of matrices (None: the @ operator)
    batched_matmul: str | None = None
    # whether the attention helper applies a chain of element-wise ops to the scores (``scores=``:
    # soft-capping, a bias over rows and keys); where it does not, a core whose scores pass
    # through one is computed as written, and `tspec generate` says so
    score_chains: bool = False
    # the address of an array's first element, "{}" standing for the array (extend compares
    # a state's with its buffer's)
    data_address: str = '{}.__array_interface__["data"][0]'
    # whether a view can be made read-only (NumPy's flags.writeable; CuPy has no such flag):
    # extend's states, which share one buffer
    read_only_views: bool = True
    # a residual sum that feeds a LayerNorm or RMSNorm added in the norm's kernel, which
    # reads both summands (and writes the sum where it is used again): residual= and total=
    # of the norms' helpers (codegen.passes.residual)
    fused_residual: bool = False
    # helpers whose template this backend replaces: helper name -> template under templates/
    helpers: dict[str, str] = field(default_factory=dict)
    # the helpers and the imports of the backend's own templates (of those in ``helpers``),
    # where they differ from the shared templates' (``RUNTIME_HELPERS``, the ops' entries)
    helper_needs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    helper_imports: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def template(self, helper: str) -> str:
        """The template a helper is rendered from for this backend."""
        return self.helpers.get(helper, f"helpers/{helper}.py.j2")

    @property
    def chosen(self) -> tuple[str, ...]:
        """The helpers this backend's choices call: its attention strategy's, its product of
        two stacks' (if any), and extend where states grow."""
        return (self.attention, *((self.batched_matmul,) if self.batched_matmul else ()),
                *(("extend",) if self.growing_states else ()))


BACKENDS: dict[str, Backend] = {
    "numpy": Backend("numpy", "numpy", "np", "np.ndarray", "from scipy.special import erf",
                     "NumPy on the CPU", attention="attend_in_blocks",
                     attention_note="the equations below, a block of query rows at a time",
                     score_chains=True,
                     thread_pool=True,
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
        "CuPy on an NVIDIA GPU", attention="attend_fused",
        attention_note="the equations below, the scores and weights in one kernel",
        thread_pool=False, float32_gelu=False,
        growing_states=True, data_address="{}.data.ptr", read_only_views=False,
        memory_total=("return cp.cuda.Device().mem_info[1]",), memory_owner="the GPU's memory",
        batched_matmul="batched_matmul",
        helpers={name: f"helpers/cupy/{name}.py.j2"
                 for name in ("kernel_support", "softmax", "masked_softmax", "attend_fused",
                              "layer_norm", "rms_norm", "relu", "silu", "gelu", "gelu_tanh",
                              "batched_matmul", "project", "glu")},
        helper_needs={"softmax": ("kernel_support", "checked_axis"),
                      **{name: ("kernel_support",)
                         for name in ("layer_norm", "rms_norm", "relu", "silu", "gelu",
                                      "gelu_tanh", "project", "glu")}},
        # memory_total() asks the GPU; the kernels need neither erf nor math; project and glu
        # cache their kernels, one an activation
        helper_imports={"require_memory": ("functools",), "gelu": ("Optional",),
                        "gelu_tanh": ("Optional",), "silu": ("Optional",),
                        "project": ("Optional", "functools"), "glu": ("functools",)},
        fused_residual=True),
}


def backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}; backends: {', '.join(BACKENDS)}")
    return BACKENDS[name]


@dataclass(frozen=True)
class Helper:
    """A helper of the runtime: a template (``Backend.template``) defining one function or a
    few, the helpers its code calls (or that the code calling it calls beside it) and what it
    imports (``IMPORTS``), on every backend and, more, on one with a thread pool (the
    templates' ``{% if backend.thread_pool %}``)."""
    name: str
    needs: tuple[str, ...] = ()
    imports: tuple[str, ...] = ()
    pool_needs: tuple[str, ...] = ()
    pool_imports: tuple[str, ...] = ()
    shared: bool = False       # in a runtime only where a helper it holds needs it
    chosen: bool = False       # in a runtime only where the backend chooses it (Backend.chosen)
    op: str | None = None      # the op whose helper it is; None: the runtime's own


# The helpers no op owns, in the order a runtime defines them (each after those it needs):
# what models call besides the ops' helpers (traces, the cache, the memory guard, the product
# of a batch of vectors and a matrix, attention's strategies) and what helpers share.
RUNTIME_HELPERS = (
    Helper("subtrace"),
    Helper("decoding"),
    Helper("extend", imports=("threading", "weakref"), chosen=True),
    Helper("require_size"),
    Helper("entry", imports=("ast", "functools", "inspect", "math", "operator", "sys", "typing")),
    Helper("require_memory", imports=("functools", "os", "resource")),
    Helper("workspace", imports=("math", "sys", "threading"), shared=True),
    # without a pool, in_parallel alone, one item after another
    Helper("parallel", pool_needs=("workspace",), shared=True,
           pool_imports=("ThreadPoolExecutor", "functools", "inspect", "itertools",
                         "threading")),
    Helper("float16", shared=True),
    Helper("checked_axis", shared=True),
    Helper("residual_sum", shared=True),
    Helper("log_mask"),
    Helper("project", imports=("Optional",), pool_needs=("parallel",)),
    Helper("glu"),
    Helper("keep_masked"),
    # the attention strategies (Backend.attention) and what they are made of
    Helper("query_blocks", needs=("softmax", "workspace"), shared=True),
    Helper("attend_in_blocks", needs=("keep_masked", "parallel", "query_blocks"),
           imports=("Callable", "Optional"), chosen=True),
    Helper("kernel_support", imports=("functools",), shared=True),
    Helper("batched_matmul", imports=("ctypes",), chosen=True),
    Helper("masked_softmax", needs=("kernel_support", "softmax"), imports=("math",),
           shared=True),
    Helper("attend_fused", needs=("kernel_support", "batched_matmul", "masked_softmax"),
           imports=("functools", "math", "warnings"), chosen=True),
)

# What helpers may import, by the name their code uses: its import line (the standard
# library's, then the array module's kin; the backend's erf; resource, which only Unix has)
IMPORTS = {
    **{name: f"import {name}" for name in ("ast", "ctypes", "functools", "inspect",
                                           "itertools", "math", "operator", "os", "sys",
                                           "threading", "typing", "warnings", "weakref")},
    "ThreadPoolExecutor": "from concurrent.futures import ThreadPoolExecutor",
    "Optional": "from typing import Optional",
    "Callable": "from collections.abc import Callable",
    "erf": "",                  # Backend.erf_import
    "resource": "",             # a try block: memory_total() does without it
}


def helpers(backend: Backend) -> dict[str, Helper]:
    """Every helper a runtime of ``backend`` may hold, by name: the runtime's own, then each
    op's (in catalogue order), with the needs and imports of its template on this backend
    (the backend's own where its templates differ)."""
    found = {helper.name: helper for helper in RUNTIME_HELPERS}
    for op in OPS.values():
        if op.helper is None:
            continue
        if op.helper in found:
            raise CodegenError(f"op {op.name}'s helper {op.helper} is already "
                               f"{_owner(found[op.helper])}: name another in {CATALOGUE}")
        # a row-wise helper runs in chunks of rows on the pool (parallel's in_row_chunks)
        found[op.helper] = Helper(op.helper, op.needs, op.imports, op=op.name,
                                  pool_needs=("parallel",) if op.row_wise else ())
    pool = backend.thread_pool
    return {name: replace(
        helper, pool_needs=(), pool_imports=(),
        needs=backend.helper_needs.get(name, helper.needs + (helper.pool_needs if pool else ())),
        imports=backend.helper_imports.get(
            name, helper.imports + (helper.pool_imports if pool else ())))
        for name, helper in found.items()}


def runtime_order(backend: Backend) -> tuple[Helper, ...]:
    """The helpers of ``backend``'s runtime, in the order it defines them: every op's helper
    and the runtime's own (a chosen one where the backend chooses it, a shared one where
    another needs it), each after the helpers it needs, otherwise in ``helpers`` order."""
    known = helpers(backend)
    order: dict[str, Helper] = {}
    visiting: list[str] = []

    def visit(name: str, needed_by: str) -> None:
        if name in order:
            return
        if name not in known:
            raise CodegenError(f"helper {needed_by} needs {name}, which is no helper of the "
                               f"{backend.name} runtime")
        if name in visiting:
            cycle = " -> ".join(visiting[visiting.index(name):] + [name])
            raise CodegenError(f"the helpers' needs go round in a circle: {cycle}")
        visiting.append(name)
        for need in known[name].needs:
            visit(need, name)
        visiting.pop()
        order[name] = known[name]

    for name in backend.chosen:
        if name not in known:
            raise CodegenError(f"backend {backend.name} chooses the helper {name}, which is "
                               "none of codegen.backends.RUNTIME_HELPERS")
    for helper in known.values():
        if not helper.shared and (not helper.chosen or helper.name in backend.chosen):
            visit(helper.name, helper.name)
    return tuple(order.values())


def _owner(helper: Helper) -> str:
    return f"op {helper.op}'s" if helper.op else "one of the runtime's own"
