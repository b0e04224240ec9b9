"""Which names a spec may use: every name becomes code, so only plain identifiers pass."""

import builtins
import keyword
import re

from tspec.errors import SpecError

MAX_NAME_LENGTH = 64
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
# Words the spec language reserves, and the module-level names generated code uses (its
# imports and helpers), which a tensor, dim or block named the same would shadow.
RESERVED = frozenset({
    "spec", "source", "note", "dim", "let", "require", "choice", "when", "else", "input",
    "param", "tensor", "output", "block", "as", "in", "repeat", "float", "int", "bool", "reused",
    "state", "update", "rename", "cache", "prefill", "decode_step", "StateRecorder", "recorder",
    "require_size", "check_cache", "CACHE_STATES", "require_memory", "MEMORY_LIMIT", "memory_total",
    "params", "np", "xp", "cp", "numpy", "cupy", "scipy", "special", "math", "os", "sys",
    "torch", "typing", "jaxtyping", "jaxtyped", "typechecker", "beartype", "Float", "Int",
    "Bool", "Shaped", "Array", "Params", "dataclass", "dataclasses", "annotations", "self",
    "cls", "erf", "trace", "layer", "i", "typechecked", "subtrace", "project", "embed",
    "positional_encoding", "log_mask", "causal_mask", "padding_mask", "relative_position_bias",
    "split_heads", "concat_heads", "softmax", "layer_norm", "gelu", "gelu_tanh",
    "query_blocks", "QUERY_BLOCK", "rows", "keys", "blocks", "query_block",
    "join_query_blocks", "relu", "in_parallel", "row_chunks", "in_row_chunks", "BLAS",
    "WORKERS", "POOL", "SHARING", "PARALLEL_MIN_WORK", "PIECE_SIZE", "GELU_FLOAT32_CLIP",
    "GELU_FLOAT32_P", "functools", "itertools", "threading", "concurrent",
    "ThreadPoolExecutor", "threadpoolctl", "ThreadpoolController", "BlasOnOneThread",
    "BLAS_ON_ONE_THREAD", "workspace", "WORKSPACE", "WORKSPACE_LIMIT", "WORKSPACE_MIN",
    "WORKSPACE_LOCK", "table_rows", "softmax_parts", "softmax_matmul", "add_into",
    "LONG_QUERY_AXIS", "extend", "read_only", "GROWING", "GROWING_LOCK", "rms_norm", "silu",
    "rotary", "repeat_heads", "masked_softmax", "batched_matmul", "rows_kernel", "rows_of",
    "launch_rows", "stacked", "ACCUMULATE", "STORAGE",
    "ROWS_PER_BLOCK", "ROWS_PRELUDE", "SOFTMAX_SOURCE", "LAYER_NORM_SOURCE", "GELU_KERNEL",
    "GELU_TANH_KERNEL", "GEMM_SCALARS", "GEMM_TYPES", "ctypes", "resource", "warnings",
    "weakref", "Optional", "Tuple", "TypedDict", "rounded_to_float16", "inspect",
    "in_place_or_apart", "checked_axis", "result_into", "widened", "dtype", "member",
})


def check_name(name: str, what: str, *, file: str | None = None, line: int | None = None,
               value_only: bool = False) -> str:
    """Return ``name`` if it is safe to become a Python identifier in generated code.

    A name must be ASCII letters, digits and underscores, start with a letter, be at most
    MAX_NAME_LENGTH long, and be neither a Python keyword, a builtin, nor a reserved word.
    ``value_only`` names (choice options) never become identifiers, so only the first rules
    apply to them.
    """
    if len(name) > MAX_NAME_LENGTH:
        raise SpecError(f"{what} name {name[:20]!r}... is {len(name)} characters long; "
                        f"the limit is {MAX_NAME_LENGTH}", file=file, line=line)
    if not _IDENTIFIER.match(name):
        raise SpecError(f"{what} name {name!r} is not a plain identifier "
                        "(ASCII letter first, then letters, digits, underscores)",
                        file=file, line=line)
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise SpecError(f"{what} name {name!r} is a Python keyword", file=file, line=line)
    if value_only:
        return name
    if name in RESERVED:
        raise SpecError(f"{what} name {name!r} is reserved by the spec language and its generated code",
                        file=file, line=line)
    if hasattr(builtins, name):
        raise SpecError(f"{what} name {name!r} shadows a Python builtin", file=file, line=line)
    return name
