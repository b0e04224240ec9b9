"""Parameters for generated code: their names and shapes, random ones, and loading real ones.

Generated functions take parameters as nested dictionaries keyed by the spec's names
(``params["encoder"]["layers"][0]["self_attention"]["W_Q"]``). On disk and in reports they are
flat, dotted: ``encoder.layers.0.self_attention.W_Q``. ``expected_shapes`` gives every flat name
with its concrete shape for a variant; loaders check each array against it and name the
parameter, the expected and the actual shape on a mismatch.
"""

import contextlib
import io
import lzma
import math
import os
import re
import tokenize
import zipfile
import zlib
from pathlib import Path

import numpy as np
import sympy

from tspec.checking.limits import MAX_CALL_DEPTH
from tspec.checking.prove import concrete_values, evaluate
from tspec.errors import LimitError, SpecError, UsageError, VariantError
from tspec.files import open_regular, write_atomic
from tspec.language.model import BlockCall, Spec, TensorDecl, select, under

# the dtypes generated code computes in (no erf, BLAS or CUDA kernel takes float128)
FLOAT_DTYPES = tuple(np.dtype(name) for name in ("float16", "float32", "float64"))


class WeightsError(VariantError):
    """Parameters that do not fit the spec: missing, unexpected, or of the wrong shape."""


def expected_shapes(spec: Spec, choices: dict[str, str], dims: dict[str, int], *,
                    cap: int | None = None) -> dict:
    """Every parameter's flat name and concrete shape (family axis first), in spec order.
    ``cap``: at most that many copies of a repeated block (``cap=1``: the first layer's names
    alone, to tell a file's names by without listing a million layers)."""
    chosen = spec.choice_values(choices)
    spec = under(spec, chosen)          # the blocks as the model under these choices names them
    values = concrete_values(spec, chosen, dims)
    out: dict[str, tuple[int, ...]] = {}

    def walk(statements, prefix, active=()):
        for s in select(statements, chosen):
            if isinstance(s, TensorDecl) and s.role == "param" and s.shape is not None:
                name = prefix + s.name
                family = (_size(s.shape.family, name, values),) \
                    if s.shape.family is not None else ()
                out[name] = family + tuple(_size(d, name, values) for d in s.shape.dims)
            elif isinstance(s, BlockCall):
                block = _called(spec, s, active)
                if s.repeat is None:
                    walk(block.body, f"{prefix}{s.instance}.", (*active, s.block))
                else:
                    count = _size(s.repeat, prefix + s.instance, values)
                    for index in range(count if cap is None else min(count, cap)):
                        walk(block.body, f"{prefix}{s.instance}.{index}.", (*active, s.block))

    walk(spec.body, "")
    return out


def _called(spec: Spec, call: BlockCall, active: tuple[str, ...]):
    """The block a call calls, refused where it is one of the blocks calling it (a spec the
    checker refuses, whose parameters have no end) or past the checker's depth."""
    if call.block in active:
        cycle = [*active[active.index(call.block):], call.block]
        raise SpecError(f"block {call.block} calls itself: {' -> '.join(cycle)}",
                        file=call.file, line=call.line)
    if len(active) >= MAX_CALL_DEPTH:
        raise LimitError(f"blocks call blocks more than {MAX_CALL_DEPTH} deep; the checker "
                         f"follows at most {MAX_CALL_DEPTH}", file=call.file, line=call.line)
    return spec.blocks[call.block]


def layer_counts(spec: Spec, choices: dict[str, str], dims: dict[str, int]
                 ) -> tuple[dict[str, int], int]:
    """Without listing them: each repeated block's count by the prefix of its copies
    (``decoder.layers`` -> N; a repeat inside one, under its first copy:
    ``decoder.layers.0.experts``), and how many parameters the spec has at ``dims``, every
    copy counted (a product, not a list)."""
    chosen = spec.choice_values(choices)
    spec = under(spec, chosen)
    values = concrete_values(spec, chosen, dims)
    counts: dict[str, int] = {}

    def walk(statements, prefix, active=()) -> int:
        total = 0
        for s in select(statements, chosen):
            if isinstance(s, TensorDecl) and s.role == "param" and s.shape is not None:
                total += 1
            elif isinstance(s, BlockCall):
                block = _called(spec, s, active)
                inner = (*active, s.block)
                if s.repeat is None:
                    total += walk(block.body, f"{prefix}{s.instance}.", inner)
                else:
                    count = _size(s.repeat, prefix + s.instance, values)
                    counts[prefix + s.instance] = count
                    total += count * walk(block.body, f"{prefix}{s.instance}.0.", inner)
        return total

    return counts, walk(spec.body, "")


def _size(expr, where: str, values: dict) -> int:
    try:
        value = evaluate(sympy.sympify(expr), values)
    except KeyError as missing:
        raise UsageError(f"{where}: dim {missing.args[0]} has no value; give it with "
                         f"--set {missing.args[0]}=VALUE") from None
    return int(value)


def nest(flat: dict[str, np.ndarray]) -> dict:
    """Dotted names to nested dictionaries, numeric parts to lists."""
    root: dict = {}
    for name, value in flat.items():
        node = root
        parts = name.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return _lists(root)


def _lists(node):
    if not isinstance(node, dict):
        return node
    if node and all(key.isdigit() for key in node):
        return [_lists(node[str(i)]) for i in range(len(node))]
    return {key: _lists(value) for key, value in node.items()}


def flatten(nested, prefix: str = "") -> dict[str, np.ndarray]:
    out = {}
    items = enumerate(nested) if isinstance(nested, list) else nested.items()
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, (dict, list)):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def random_params(shapes: dict[str, tuple], seed: int = 0, dtype=np.float32) -> dict:
    """Seeded random parameters: LayerNorm gains 1, biases 0, matrices N(0, 1/fan_in).
    Parameters that would not fit in memory are a UsageError, not an allocation."""
    dtype = np.dtype(dtype)
    size = sum(math.prod(shape) for shape in shapes.values()) * dtype.itemsize
    room = memory_bytes()
    if room is not None and size > room:
        raise UsageError(f"the parameters take {size:,} bytes in {dtype}, more than the "
                         f"{room:,} bytes of memory this process may use; give smaller dims "
                         "with --set")
    rng = np.random.default_rng(seed)
    flat = {}
    for name, shape in shapes.items():
        leaf = name.rsplit(".", 1)[-1]
        if leaf.startswith("gamma"):
            flat[name] = np.ones(shape, dtype)
        elif leaf.startswith(("beta", "b_")):
            flat[name] = np.zeros(shape, dtype)
        else:
            fan_in = shape[-2] if len(shape) >= 2 else shape[-1]
            flat[name] = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(dtype)
    return nest(flat)


def memory_bytes() -> int | None:
    """The memory this process may use: the machine's, or less under an address-space or data
    limit (ulimit -v, ulimit -d); None where neither is known."""
    sizes = []
    with contextlib.suppress(AttributeError, ValueError, OSError):
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    with contextlib.suppress(ImportError, AttributeError, ValueError, OSError):
        import resource
        for limit in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
            soft, _ = resource.getrlimit(limit)
            if soft != resource.RLIM_INFINITY:
                sizes.append(soft)
    return min(sizes) if sizes else None


def validate(flat: dict[str, np.ndarray], shapes: dict[str, tuple], where: str) -> dict:
    """Check names, shapes and dtypes against the spec; return the nested parameters."""
    _check({name: (tuple(np.shape(array)), getattr(array, "dtype", np.asarray(array).dtype))
            for name, array in flat.items()}, shapes, where)
    return nest({name: flat[name] for name in shapes})


def _check(found: dict[str, tuple], shapes: dict[str, tuple], where: str) -> None:
    """Names, shapes and dtypes (``found``: name -> (shape, dtype), the dtype a NumPy dtype or
    the name of one NumPy has no type for) against the spec's, before any data is read."""
    missing = [n for n in shapes if n not in found]
    unexpected = [n for n in found if n not in shapes]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing[:5])}"
                         + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
        if unexpected:
            parts.append(f"unexpected {', '.join(_shown(n) for n in unexpected[:5])}"
                         + (f" and {len(unexpected) - 5} more" if len(unexpected) > 5 else ""))
        raise WeightsError(f"{where}: parameters do not match the spec: {'; '.join(parts)}")
    dtypes = set()
    for name, shape in shapes.items():
        actual, dtype = found[name]
        if tuple(actual) != tuple(shape):
            raise WeightsError(f"{where}: parameter {name} has shape {tuple(actual)}; the "
                               f"spec expects {tuple(shape)}")
        if isinstance(dtype, str):
            raise WeightsError(f"{where}: parameter {name} has dtype {dtype}, which NumPy has "
                               "no type for; parameters are float16, float32 or float64")
        if dtype.kind != "f":
            raise WeightsError(f"{where}: parameter {name} has dtype {dtype}; parameters "
                               "are floating point")
        if dtype not in FLOAT_DTYPES:
            raise WeightsError(f"{where}: parameter {name} has dtype {dtype}, which the "
                               "generated code does not compute in; parameters are float16, "
                               "float32 or float64")
        dtypes.add(dtype)
    if len(dtypes) > 1:
        raise WeightsError(f"{where}: parameters mix dtypes ({', '.join(sorted(map(str, dtypes)))})"
                           "; NumPy would silently compute in the widest")


def _shown(name: str) -> str:
    """A name read from a file, as an error message shows it: as it is when it is a plain
    dotted name, else quoted (an empty or odd name stays visible and on one line)."""
    return name if _PLAIN_NAME.fullmatch(name) else repr(name)


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.]{1,200}")

# safetensors' dtypes that NumPy has a type for (BF16 and the float8 kinds it has not)
_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "I64": "int64",
                       "I32": "int32", "I16": "int16", "I8": "int8", "U64": "uint64",
                       "U32": "uint32", "U16": "uint16", "U8": "uint8", "BOOL": "bool",
                       "C64": "complex64"}

# What reading a corrupt archive can raise from the standard library and NumPy: the zip
# (BadZipFile, zlib, bz2 and lzma errors, EOFError), a .npy header (ValueError, and the
# tokenize, syntax and nesting errors of the literal it holds), or the file itself (OSError).
_READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, lzma.LZMAError,
                NotImplementedError, tokenize.TokenError, SyntaxError)
MAX_NPY_HEADER = 10_000     # bytes; NumPy's own default limit for headers it trusts


def load(path: str | Path, shapes: dict[str, tuple]) -> dict:
    """Parameters from a .safetensors or .npz file of flat dotted names.

    The file's own header (each array's name, shape and dtype) is checked against the spec
    before any array is read, so a lying header costs no more memory than the spec's own
    parameters; a file that cannot be read, or whose header and data disagree, is a UsageError
    naming the file and what is wrong, and parameters that do not fit the spec a WeightsError."""
    path = Path(path)
    if path.suffix == ".safetensors":
        return _load_safetensors(path, shapes)
    if path.suffix == ".npz":
        return _load_npz(path, shapes)
    raise UsageError(f"{path}: weights are .safetensors or .npz files")


def _load_safetensors(path: Path, shapes: dict[str, tuple]) -> dict:
    from safetensors import SafetensorError, safe_open

    _opened(path).close()                   # a named pipe would block safetensors' open
    try:
        with safe_open(str(path), framework="np") as file:
            found = {}
            names = file.keys()
            for name in names:
                piece = file.get_slice(name)
                label = piece.get_dtype()
                found[name] = (tuple(piece.get_shape()), np.dtype(_SAFETENSORS_DTYPES[label])
                               if label in _SAFETENSORS_DTYPES else label)
            _check(found, shapes, str(path))
            flat = {name: file.get_tensor(name) for name in shapes}
    except (OSError, ValueError, SafetensorError) as error:
        raise UsageError(f"cannot read {path}: {_one_line(error)}") from None
    return validate(flat, shapes, str(path))


def _load_npz(path: Path, shapes: dict[str, tuple]) -> dict:
    try:
        with _opened(path) as stream, zipfile.ZipFile(stream) as archive:
            headers = _npz_headers(archive, path)
            _check({name: header[:2] for name, header in headers.items()}, shapes, str(path))
            flat = {name: _read_member(archive, headers[name][2]) for name in shapes}
    except _READ_ERRORS as error:
        raise UsageError(f"cannot read {path}: {_one_line(error) or type(error).__name__}"
                         ) from None
    return validate(flat, shapes, str(path))


def npz_names(path: Path) -> list[str] | None:
    """The array names of a .npz file, from its zip's directory alone (nothing decompressed),
    or None where it cannot be read as a zip (``load`` says why)."""
    try:
        with _opened(path) as stream, zipfile.ZipFile(stream) as archive:
            return [name.removesuffix(".npy") for name in archive.namelist()]
    except (UsageError, *_READ_ERRORS):
        return None


def _opened(path: Path):
    """The weight file opened for reading, once it is known to be a regular file."""
    try:
        return open_regular(path)
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or _one_line(error)}") from None


def _npz_headers(archive: zipfile.ZipFile, path: Path) -> dict[str, tuple]:
    """Each member's array name -> (shape, dtype, member), from the .npy headers alone."""
    headers: dict[str, tuple] = {}
    for info in archive.infolist():
        member = info.filename
        if not member.endswith(".npy") or info.is_dir():
            raise UsageError(f"cannot read {path}: member {member!r} is not a .npy array")
        if info.flag_bits & 0x1:
            raise UsageError(f"cannot read {path}: member {member!r} is encrypted")
        if info.compress_type not in _COMPRESSIONS:
            raise UsageError(f"cannot read {path}: member {member!r} is compressed with "
                             f"method {info.compress_type}, which is not one zip files of "
                             "arrays use (stored, deflate, bzip2, lzma)")
        name = member[:-len(".npy")]
        if name in headers:
            raise UsageError(f"cannot read {path}: member {member!r} appears twice")
        with archive.open(info) as stream:
            shape, dtype, offset = _npy_header(stream, path, member)
        if dtype.hasobject:
            raise UsageError(f"cannot read {path}: member {member!r} holds Python objects "
                             "(a pickle), which weights never are")
        size = math.prod(shape) * dtype.itemsize
        if info.file_size != offset + size:
            raise UsageError(f"cannot read {path}: member {member!r} holds "
                             f"{info.file_size - offset:,} bytes of data; its header (shape "
                             f"{shape}, dtype {dtype}) needs {size:,}")
        headers[name] = (shape, dtype, info)
    return headers


_COMPRESSIONS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)


def _npy_header(stream, path: Path, member: str) -> tuple[tuple[int, ...], np.dtype, int]:
    """A .npy header's shape, dtype and length, with NumPy's own readers (formats 1 and 2)."""
    try:
        version = np.lib.format.read_magic(stream)
        if version not in _NPY_READERS:
            raise UsageError(f"cannot read {path}: member {member!r} is a .npy file of format "
                             f"{version[0]}.{version[1]}; weights are in formats 1.0 and 2.0")
        shape, _, dtype = _NPY_READERS[version](stream, max_header_size=MAX_NPY_HEADER)
    except (ValueError, SyntaxError, tokenize.TokenError) as error:
        detail = error.args[0] if isinstance(error, tokenize.TokenError) else _one_line(error)
        raise UsageError(f"cannot read {path}: member {member!r} has a malformed .npy header "
                         f"({detail})") from None
    if any(n < 0 for n in shape):
        raise UsageError(f"cannot read {path}: member {member!r} has the shape {shape}, with "
                         "a negative size")
    return tuple(shape), dtype, stream.tell()


_NPY_READERS = {(1, 0): np.lib.format.read_array_header_1_0,
                (2, 0): np.lib.format.read_array_header_2_0}


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """One array whose header was checked against the spec: its size is the spec's."""
    with archive.open(info) as stream:
        return np.lib.format.read_array(stream, allow_pickle=False,
                                        max_header_size=MAX_NPY_HEADER)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def save(path: str | Path, params: dict) -> None:
    """Write nested parameters as flat dotted names (.safetensors or .npz)."""
    path = Path(path)
    flat = {name: np.ascontiguousarray(value) for name, value in flatten(params).items()}
    if path.suffix == ".safetensors":
        from safetensors.numpy import save as safetensors_bytes
        data = safetensors_bytes(flat)
    elif path.suffix == ".npz":
        buffer = io.BytesIO()
        np.savez(buffer, **flat)
        data = buffer.getvalue()
    else:
        raise UsageError(f"{path}: weights are .safetensors or .npz files")
    write_atomic(path, data)                # whole or not at all, as every file tspec writes
