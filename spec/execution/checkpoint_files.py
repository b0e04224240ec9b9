"""Checkpoints on disk: a safetensors file, or a folder of shards with its index, mapped to a
variant's parameters, checked against its shapes before any tensor is read.

The file's header (each tensor's name, dtype, shape and place) is read and checked first; the
tensors are memory-mapped, not read into memory as a whole (the only copies made are the
parameters themselves, in the run's dtype). The names are the spec's own (files that
``weights.save`` writes) or those of a Hugging Face family, mapped by the family's map in
``checkpoints`` (chosen by the variant's choices: ``FAMILIES``), which names every tensor it
leaves out and why. bfloat16 has no NumPy type: its bits are the top half of a float32's, so
it widens exactly by a shift. Pickled checkpoints (``.bin``, ``.pt``, ``.pth``) are refused:
unpickling one runs whatever code it holds.
"""

import itertools
import json
import math
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tspec.checking import limits
from tspec.errors import ConfigError, UsageError, hidden, quoted
from tspec.execution import checkpoints, weights
from tspec.execution.weights import FLOAT_DTYPES, WeightsError
from tspec.files import open_regular
from tspec.importing.convert import identity, imported
from tspec.importing.families import model_type_of
from tspec.importing.fields import shown
from tspec.importing.source import read_config
from tspec.inputs import LongInteger, count_text, json_loads, short_repr, user_path
from tspec.ops.catalogue import SETTINGS

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
PICKLED = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
MAX_HEADER = 100_000_000        # bytes; safetensors' own limit
MAX_INDEX = 100_000_000
MAX_RANK = 64                   # axes of a tensor: NumPy's own limit
MAX_SIZE = 2 ** 63              # one axis's size: below it, as NumPy's indices are

# safetensors' dtypes: element size, and the NumPy dtype the bytes are read as (bfloat16 and
# float8 as unsigned integers of their width: NumPy has no type for them)
_DTYPES = {"F64": (8, "float64"), "F32": (4, "float32"), "F16": (2, "float16"),
           "BF16": (2, "uint16"), "F8_E4M3": (1, "uint8"), "F8_E5M2": (1, "uint8"),
           "I64": (8, "int64"), "I32": (4, "int32"), "I16": (2, "int16"), "I8": (1, "int8"),
           "U64": (8, "uint64"), "U32": (4, "uint32"), "U16": (2, "uint16"),
           "U8": (1, "uint8"), "BOOL": (1, "bool"), "C64": (8, "complex64")}
_FLOATS = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}


@dataclass(frozen=True)
class Entry:
    """One tensor of a checkpoint: its dtype (safetensors' name), shape, and bytes in a file."""
    dtype: str
    shape: tuple[int, ...]
    file: Path
    start: int                  # absolute offsets in the file
    stop: int


class Checkpoint(Mapping):
    """A checkpoint's tensors by name (``Entry``: nothing read); ``array`` maps one."""
    lazy = True                 # a map given one returns a Plan of views (checkpoints._Source)

    def __init__(self, path: Path, entries: dict[str, Entry]):
        self.path, self.entries = path, entries
        self._maps: dict[Path, np.memmap] = {}

    def __getitem__(self, name: str) -> Entry:
        return self.entries[name]

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def array(self, name: str) -> np.ndarray:
        """The tensor as stored, memory-mapped (bfloat16 and float8 as their bits)."""
        entry = self.entries[name]
        if entry.file not in self._maps:
            self._maps[entry.file] = np.memmap(entry.file, np.uint8, mode="r")
        raw = self._maps[entry.file][entry.start:entry.stop]
        return raw.view(_DTYPES[entry.dtype][1]).reshape(entry.shape)

    def close(self) -> None:
        self._maps.clear()


class Weights(dict):
    """Nested parameters as the generated functions take them, with where they came from:
    ``names`` (the spec's own, or the Hugging Face family whose map placed them), ``dtype``
    (the parameters'), ``stored`` (the checkpoint's dtypes of the tensors used), ``unused``
    (checkpoint tensor -> why the spec has no place for it)."""

    def __init__(self, nested: dict, path: Path, names: str, dtype: np.dtype,
                 stored: list[str], unused: dict[str, str]):
        super().__init__(nested)
        self.path, self.names, self.dtype = path, names, dtype
        self.stored, self.unused = stored, unused

    def summary(self) -> str:
        """One line for `tspec run`: the file, the names, the dtypes, what was left out."""
        stored = ", ".join(self.stored)
        converted = f"{stored} converted to {self.dtype}" if stored != str(self.dtype) \
            else stored
        unused = "; unused: " + ", ".join(
            f"{weights._shown(name)} ({why})" for name, why in list(self.unused.items())[:3]) \
            + (f" and {len(self.unused) - 3} more" if len(self.unused) > 3 else "") \
            if self.unused else ""
        return f"weights from {self.path} ({self.names} names, {converted}){unused}"


# The families whose Hugging Face names a map places, by the variant's choices
FAMILIES = ("GPT-2 (arch=decoder_only, positional=learned, normalization=layer_norm), "
            "BERT (encoder_io=bert or bert_unpooled), Llama, Mistral, Qwen2 (arch=decoder_only, "
            "positional=rotary, normalization=rms_norm)")
# The model_types of the checkpoints whose names each map reads, as a config.json names them
# (``model_type``, and each class in ``architectures``: importing.families.CLASSES), and how
# an error says so
MODEL_TYPES = {"GPT-2": ("gpt2",), "BERT": ("bert",), "Llama": ("llama", "mistral", "qwen2")}
_READS = {"GPT-2": "GPT-2 checkpoints (model_type gpt2, and its classes)",
          "BERT": "BERT checkpoints (model_type bert, and its classes)",
          "Llama": "Llama, Mistral and Qwen2 checkpoints (model_type llama, mistral or qwen2, "
                   "and their classes)"}


def family(choices: dict[str, str]):
    """The family name and map for a variant's choices (every choice, defaults included), or
    None where no map fits them. The map takes a checkpoint and, as ``layers``, the variant's
    layers (None: any number)."""
    if choices.get("encoder_io") in ("bert", "bert_unpooled") and \
            choices.get("arch") == "encoder_only":
        pooler = choices.get("encoder_io") == "bert"
        return "BERT", lambda state, layers=None: checkpoints.from_bert(
            state, pooler=pooler, layers=layers)
    if choices.get("arch") == "decoder_only":
        tied = {"output_embedding": choices.get("output_embedding", "separate")}
        if choices.get("positional") == "learned" and \
                choices.get("normalization") == "layer_norm":
            return "GPT-2", lambda state, layers=None: checkpoints.from_gpt2(
                state, **tied, layers=layers)
        if choices.get("positional") == "rotary" and choices.get("normalization") == "rms_norm":
            return "Llama", lambda state, layers=None: checkpoints.from_llama(
                state, **tied, layers=layers)
    return None


def load_variant(path: str | Path, spec, choices: dict[str, str], dims: dict[str, int],
                 variant: str, dtype=None, settings: dict[str, float] | None = None) -> Weights:
    """A variant's parameters from ``path``: a .npz file of the spec's names (``weights.load``)
    or a checkpoint (``load``), at the shapes the spec gives them at ``dims``; a checkpoint
    beside a Hugging Face config.json must be of the model it describes (``require_described``:
    the variant's ``settings``, the rest at the catalogue's defaults). The layer counts are
    compared before the variant's parameters are listed (a million layers take seconds)."""
    path = user_path(path, "a weights path")
    if dtype is not None:
        dtype = _dtype({}, None, dtype, str(path))
    limits.require_tensor_count(spec)       # blocks calling blocks 2**60 times: refused
    chosen = spec.choice_values(choices)

    def described(names: str) -> None:
        require_described(path, spec, chosen, dims, settings or {}, variant, names)
    if path.suffix != ".npz":
        return load(path, spec, chosen, dims, variant, dtype, described)
    described("tspec")
    names = weights.npz_names(path)
    if names is not None:               # else the load says why it is unreadable
        _check_layers(names, *weights.layer_counts(spec, chosen, dims), str(path), variant)
    params = weights.load(path, weights.expected_shapes(spec, chosen, dims))
    flat = weights.flatten(params)
    stored = sorted({str(array.dtype) for array in flat.values()})
    converted = flat
    if dtype is not None:
        with np.errstate(over="ignore", invalid="ignore"):     # said below, by parameter
            converted = {name: array.astype(dtype, copy=False) for name, array in flat.items()}
        params = weights.nest(converted)
    else:
        dtype = np.dtype(stored[0]) if stored else np.dtype("float32")
    for name, array in converted.items():
        _require_finite(array, flat[name], name, name, str(path))
    return Weights(params, path, "tspec", dtype, stored, {})


def require_described(path: Path, spec, choices: dict[str, str], dims: dict[str, int],
                      settings: dict[str, float], variant: str, names: str = "tspec") -> None:
    """Refuse a checkpoint whose folder's config.json (Hugging Face's, beside the file or the
    shards) describes a model other than the variant: one of the same names and shapes (a
    Gemma read as Llama, a RoBERTa as BERT; 16 heads for 12, another epsilon, rotary base or
    rope scaling, tied for untied) would load and run to wrong numbers.

    ``names``: the family whose Hugging Face names the variant's map reads ("Llama"), or
    "tspec" for the spec's own. A family's checkpoint must be of that family by the config: its
    model_type and every class its ``architectures`` names (none: not asked). Then the config
    is imported as tspec imports it (``tspec import``: a config whose architectures are not of
    its model_type, of a model_type tspec does not import, or with a field it cannot read, is
    refused as none it can compare), in the built-in spec's names: each dim it gives must be a
    dim of the variant's spec with the variant's value, each choice the variant's, each setting
    the variant's (the catalogue's default where the variant sets none). The escape for a
    deliberate load is moving the config away, which each refusal says."""
    config = (path if path.is_dir() else path.parent) / "config.json"
    beside = f"{path}: the config.json beside it"
    if not config.is_file():
        if os.path.lexists(config):     # a folder, a broken link: no config to compare with
            raise WeightsError(f"{beside} is not a file tspec can read; move it away to "
                               "load the tensors unchecked")
        return
    pooler = choices.get("encoder_io") != "bert_unpooled"

    def uncomparable(error: ConfigError | UsageError) -> WeightsError:
        why = error.message.replace(f"{quoted(str(config))}: ", "").removeprefix(
            "a config dict: ")
        if error.line is not None:                          # where in config.json
            why += f", at line {error.line}" + (
                f", column {error.column}" if error.column is not None else "")
        return WeightsError(f"{beside} is not one tspec can compare with {variant} ({why}); "
                            "move it away to load the tensors unchecked")
    try:
        data, _ = read_config(config)
        model_type, classes = identity(data, quoted(str(config)))
    except (ConfigError, UsageError) as error:
        raise uncomparable(error) from None
    if names in MODEL_TYPES and (
            model_type not in (None, *MODEL_TYPES[names]) or
            any(model_type_of(name) not in MODEL_TYPES[names] for name in classes)):
        what = ", ".join(([f"model_type {shown(model_type)}"] if model_type is not None
                          else []) + ([f"architectures {shown(classes)}"] if classes else []))
        instead = "move it away to load the tensors regardless"
        try:
            imported(data, pooler=pooler)
            instead = (f"run the variant it describes, tspec run "
                       f"{shlex.quote(str(config.parent))} --weights {shlex.quote(str(path))}, "
                       f"or {instead}")
        except (ConfigError, UsageError):
            pass
        raise WeightsError(f"{beside} is of another family than {variant} reads ({what}); "
                           f"{variant} reads {_READS[names]}; {instead}")
    try:
        described, _ = imported(data, pooler=pooler)
    except (ConfigError, UsageError) as error:
        raise uncomparable(error) from None
    differ = []
    for name, value in described.dims.items():
        if name not in spec.dims:
            differ.append(f"{name} = {value} there, no dim {name} in {variant}")
        elif name in dims and dims[name] != value:
            differ.append(f"{name} = {value} there, {dims[name]} in {variant}")
    for name, option in described.choices.items():
        if choices.get(name) != option:
            differ.append(f"{name} = {option} there, {choices.get(name, 'no such choice')} "
                          f"in {variant}")
    for name, value in described.settings.items():
        ours = float(settings.get(name, SETTINGS[name].default))
        if ours != value:
            differ.append(f"{name} = {value!r} there, {ours!r} in {variant}")
    if differ:
        raise WeightsError(f"{beside} describes another model than {variant} "
                           f"({'; '.join(differ)}); run the variant it describes, setting "
                           f"none of these: tspec run {shlex.quote(str(config.parent))} "
                           f"--weights {shlex.quote(str(path))}, or move it away to load the "
                           "tensors regardless")


def load(path: str | Path, spec, choices: dict[str, str], dims: dict[str, int], variant: str,
         dtype=None, described=None) -> Weights:
    """A variant's parameters from a checkpoint: names mapped, the layer counts compared, then
    every name and shape checked against the spec's at ``dims`` (``choices``: every choice,
    defaults included), the memory of the parameters in ``dtype`` counted, then each tensor read
    through the memory map and converted, and refused where a value is not finite. ``dtype``
    None: the checkpoint's own where the generated code computes in it (float16, float32 or
    float64, one for all), else float32. ``described``: called with the names the checkpoint is
    read under ("tspec", or the family whose map reads it) before they are mapped
    (``require_described``)."""
    path = Path(path)
    where = str(path)
    counts, total = weights.layer_counts(spec, choices, dims)
    checkpoint = open_checkpoint(path)
    try:
        # the spec's own names, every layer number as the first layer's (listing them all
        # would take as long as the variant has layers)
        own = weights.expected_shapes(spec, choices, dims, cap=1)
        if any(_first_copy(name) in own for name in checkpoint):
            names = "tspec"
            if described is not None:
                described(names)
            plan = checkpoints.Plan({name: checkpoints.Tensor(name, entry.shape)
                                     for name, entry in checkpoint.items()}, names, {}, [])
        else:
            chosen = family(choices)
            if chosen is None:
                first = next(iter(checkpoint), None)
                raise WeightsError(
                    f"{where}: its tensor names are not the spec's (the first: "
                    f"{weights._shown(first) if first is not None else 'none, it is empty'}), "
                    f"and {variant} is of no family whose names tspec maps: {FAMILIES}")
            names, mapping = chosen
            if described is not None:
                described(names)
            stack = "encoder" if names == "BERT" else "decoder"
            try:
                plan = mapping(checkpoint, layers=counts.get(f"{stack}.layers"))
            except checkpoints.LayersPast as error:
                raise WeightsError(f"{where}: {error.said(stack, variant)}") from None
            except WeightsError as error:
                raise WeightsError(f"{where}: {error}") from None
        # layer counts, names and shapes, then dtypes: all from the headers
        _check_layers(plan, counts, total, where, variant)
        shapes = weights.expected_shapes(spec, choices, dims)
        weights._check({name: (tensor.shape, np.dtype("float32"))
                        for name, tensor in plan.items()}, shapes, where)
        _check_dtypes(plan, checkpoint, where)
        dtype = _dtype(plan, checkpoint, dtype, where)
        size = sum(math.prod(shapes[name]) for name in shapes) * dtype.itemsize
        room = weights.memory_bytes()
        stored = sorted({_FLOATS[checkpoint[plan[name].name].dtype] for name in shapes})
        if room is not None and size > room:
            raise UsageError(f"{where}: the parameters take {size:,} bytes in {dtype} (stored "
                             f"as {', '.join(stored)}), more than the {room:,} bytes of memory "
                             "this process may use")
        for name, other, message in plan.same:
            if not _equal(checkpoint.array(name), checkpoint.array(other)):
                raise WeightsError(f"{where}: {plan.what}: {message}")
        flat = {name: _read(checkpoint, plan[name], dtype, name, where) for name in shapes}
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    finally:
        checkpoint.close()
    return Weights(weights.nest(flat), path, names, dtype, stored, dict(plan.unused))


def _first_copy(name: str) -> str:
    """A flat name with every layer number as the first layer's: decoder.layers.7.W to
    decoder.layers.0.W (a block's instance is a name, never a number)."""
    return ".".join("0" if part.isdigit() else part for part in name.split("."))


# parameters a spec may have past a checkpoint's tensors before the missing ones are not
# listed but counted (listing them is the variant's size, not the file's)
MAX_MISSING = 100_000


def _check_layers(names, counts: dict[str, int], total: int, where: str,
                  variant: str) -> None:
    """A checkpoint (its parameter names, as mapped) with another number of layers than the
    variant (``counts``: weights.layer_counts'), said as such before the names of every
    parameter of the layers one side lacks; a spec with far more parameters at its dims
    (``total``) than the checkpoint has tensors, said by counts."""
    for prefix, wanted in counts.items():
        start = f"{prefix}."
        found = len({name[len(start):].partition(".")[0] for name in names
                     if name.startswith(start)})
        if found != wanted and found and wanted:
            stack = f"{prefix.removesuffix('layers').replace('.', ' ')}layers" \
                if prefix.split(".")[-1] == "layers" else f"copies of {prefix}"
            raise WeightsError(f"{where}: the checkpoint has {found} {stack}; {variant} "
                               f"has {wanted}")
    if total > len(names) + MAX_MISSING:
        raise WeightsError(f"{where}: {variant} has {count_text(total)} parameters at its "
                           f"dims; the checkpoint has {len(names):,} tensors")


def _check_dtypes(plan, checkpoint: Checkpoint, where: str) -> None:
    """Every tensor the spec takes is floating point of a width that converts exactly or
    rounds as the run's dtype would (float8 is refused: its scales are not in the file)."""
    for name, tensor in plan.items():
        label = checkpoint[tensor.name].dtype
        if label not in _FLOATS:
            shown = f"parameter {name}" + (f" (entry {weights._shown(tensor.name)})"
                                           if tensor.name != name else "")
            raise WeightsError(f"{where}: {shown} has dtype {label}; parameters are floating "
                               "point (F16, BF16, F32 or F64)")


def _dtype(plan, checkpoint: Checkpoint, dtype, where: str) -> np.dtype:
    if dtype is not None:
        given = dtype
        try:
            dtype = np.dtype(dtype)
        except (TypeError, ValueError):
            dtype = None
        # (np.dtype(None) is float64, and a dtype compares equal to None)
        if dtype is None or not any(dtype == known for known in FLOAT_DTYPES):
            raise UsageError(f"{where}: parameters are converted to float16, float32 or "
                             f"float64, not {short_repr(given)}")
        return dtype
    stored = {_FLOATS[checkpoint[tensor.name].dtype] for tensor in plan.values()}
    if len(stored) == 1 and next(iter(stored)) != "bfloat16":
        return np.dtype(next(iter(stored)))
    if "float64" in stored:
        raise WeightsError(f"{where}: the tensors mix dtypes ({', '.join(sorted(stored))}); "
                           "give the dtype to convert them to")
    return np.dtype("float32")


def _read(checkpoint: Checkpoint, tensor, dtype: np.dtype, name: str, where: str
          ) -> np.ndarray:
    """One parameter, in the run's dtype: the stored tensor read in its own order (the memory
    map's pages in sequence) and converted, refused where a value is not finite (``name``:
    the parameter's, ``where`` the checkpoint's, for the error). A transpose (nn.Linear's
    y = x W^T) is a view of it, in column order, as PyTorch itself computes with the stored
    matrix: BLAS and the generated code take either order, and no second copy is made; a
    slice (GPT-2's stacked Q, K, V) is copied out of it."""
    stored, label = checkpoint.array(tensor.name), checkpoint[tensor.name].dtype
    whole = _converted(stored, label, dtype)
    if all(step == "T" for step in tensor.steps):       # all of it: checked as stored
        _require_finite(whole, stored, name, tensor.name, where, label)
        return tensor.of(whole)
    part = tensor.of(whole)
    _require_finite(part, tensor.of(stored), name, tensor.name, where, label)
    return np.ascontiguousarray(part)


def _converted(stored: np.ndarray, label: str, dtype: np.dtype) -> np.ndarray:
    """A stored tensor as a new array of ``dtype``; bfloat16's bits are the high half of a
    float32's, so it widens exactly by a shift. A value past the dtype's range becomes an
    infinity, silently (``_require_finite`` says so, by parameter)."""
    out = np.empty(stored.shape, dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        if label != "BF16":
            np.copyto(out, stored, casting="unsafe")
            return out
        wide = out if dtype == np.float32 else np.empty(stored.shape, np.float32)
        bits = wide.view(np.uint32)
        np.copyto(bits, stored, casting="unsafe")       # zero-extended ...
        bits <<= 16                                     # ... into the high half
        if wide is not out:
            np.copyto(out, wide, casting="unsafe")
    return out


FINITE_BLOCK = 1 << 20              # elements a finiteness check looks at at once


def _non_finite(array: np.ndarray, label: str | None = None) -> int:
    """How many values of ``array`` (a view: a slice, a memory map) are NaN or infinite, a
    block of rows at a time, so that no mask or copy of the whole is made; ``label``: the
    safetensors dtype whose bits the array holds (BF16), if not its own."""
    if array.ndim == 0:
        array = array.reshape(1)
    row = math.prod(array.shape[1:])
    if row > FINITE_BLOCK:                  # rows too long for one block: each on its own
        return sum(_non_finite(part, label) for part in array)
    count, step = 0, max(1, FINITE_BLOCK // max(row, 1))
    for start in range(0, array.shape[0], step):
        block = array[start:start + step]
        if label == "BF16":
            block = _converted(block, label, np.dtype("float32"))
        elif block.dtype.kind != "f":
            return 0
        count += block.size - int(np.count_nonzero(np.isfinite(block)))
    return count


def _require_finite(array: np.ndarray, stored: np.ndarray, name: str, entry: str,
                    where: str, label: str | None = None) -> None:
    """Refuse a parameter holding a NaN or an infinity (read, or made by converting a value
    past the run's dtype's range), naming it and its checkpoint entry: a model computes
    nothing with it, and what fails later (a decoding check, the logits) would not say why."""
    if not _non_finite(array):
        return
    shown = f"parameter {name}" + (f" (entry {weights._shown(entry)})" if entry != name else "")
    stored_bad = _non_finite(stored, label)
    if not stored_bad:
        limit = np.finfo(array.dtype).max
        raise WeightsError(f"{where}: {shown} holds values past the range of {array.dtype} "
                           f"(largest {limit:.6g}), which converting them made infinite; "
                           "load it in a wider dtype")
    raise WeightsError(f"{where}: {shown} holds {stored_bad:,} value"
                       f"{'s' * (stored_bad != 1)} that {'are' if stored_bad != 1 else 'is'} "
                       "not finite (NaN or infinite); a model's weights are finite")


def _equal(a: np.ndarray, b: np.ndarray, rows: int = 4096) -> bool:
    """Whether two mapped tensors hold the same bits, a block of rows at a time."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.reshape(a.shape[0], -1) if a.ndim else a, b.reshape(b.shape[0], -1) if b.ndim else b
    return all(np.array_equal(a[i:i + rows], b[i:i + rows]) for i in range(0, len(a), rows))


def open_checkpoint(path: Path) -> Checkpoint:
    """The checkpoint's entries from its headers (and the index of a sharded one)."""
    if path.suffix.lower() in PICKLED:
        raise UsageError(_pickled(path))
    try:
        is_folder = path.is_dir()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
    if not is_folder and path.name.endswith(".safetensors.index.json"):   # a shards' index
        return Checkpoint(path.parent, _shards(path.parent, path.name))
    if not is_folder:
        if path.suffix != ".safetensors":
            raise UsageError(f"{path}: weights are a .safetensors or .npz file, or a folder "
                             f"holding {SINGLE} or {INDEX}")
        return Checkpoint(path, _header(path))
    if (path / INDEX).exists():
        return Checkpoint(path, _shards(path))
    if (path / SINGLE).exists():
        return Checkpoint(path, _header(path / SINGLE))
    pickles = sorted(p.name for p in path.iterdir() if p.suffix.lower() in PICKLED)
    if pickles:
        raise UsageError(_pickled(path / pickles[0]))
    raise UsageError(f"{path}: a folder of weights holds {SINGLE} or {INDEX}; this one has "
                     "neither")


def _pickled(path: Path) -> str:
    return (f"{path}: a pickled checkpoint ({path.suffix}), which tspec does not read: "
            "unpickling runs whatever code the file holds; save the model as safetensors "
            "(save_pretrained writes model.safetensors)")


def _header(path: Path) -> dict[str, Entry]:
    """A safetensors file's entries: an 8-byte little-endian header size, a JSON header of
    name -> {dtype, shape, data_offsets}, then the data, each offset checked against the file."""
    def bad(reason: str) -> UsageError:
        return UsageError(f"cannot read {path}: {reason}")
    try:
        with open_regular(path) as stream:
            size = os.fstat(stream.fileno()).st_size
            head = stream.read(8)
            if len(head) < 8:
                raise bad(f"{size} bytes, too short for a safetensors header")
            length = int.from_bytes(head, "little")
            if length > min(MAX_HEADER, size - 8):
                raise bad(f"its header claims {length:,} bytes; the file has {size - 8:,} "
                          f"after the size, and safetensors allows {MAX_HEADER:,}")
            text = stream.read(length)
    except OSError as error:
        raise bad(error.strerror or " ".join(str(error).split())) from None
    try:
        header = json_loads(text.decode("utf-8"))
    except LongInteger as error:
        raise bad(f"its header holds {error}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise bad(f"its header is not JSON ({' '.join(str(error).split())})") from None
    if not isinstance(header, dict):
        raise bad("its header is not a JSON object")
    begin, data = 8 + length, size - 8 - length
    entries, spans = {}, []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        shown = weights._shown(name)
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise bad(f"entry {shown} is not {{dtype, shape, data_offsets}}")
        label, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(label, str) or label not in _DTYPES:
            raise bad(f"entry {shown} has dtype {short_repr(label)}, which safetensors does "
                      "not define")
        # the rank and every size bounded before any arithmetic on them
        if isinstance(shape, list) and len(shape) > MAX_RANK:
            raise bad(f"entry {shown} has a shape of {len(shape):,} axes; a tensor has at most "
                      f"{MAX_RANK}")
        if not isinstance(shape, list) or not all(
                type(n) is int and 0 <= n < MAX_SIZE for n in shape):
            raise bad(f"entry {shown} has the shape {short_repr(shape)}; sizes are non-negative "
                      "integers below 2**63")
        if not isinstance(offsets, list) or len(offsets) != 2 or \
                not all(type(n) is int for n in offsets) or not 0 <= offsets[0] <= offsets[1]:
            raise bad(f"entry {shown} has the data_offsets {short_repr(offsets)}")
        need = math.prod(shape) * _DTYPES[label][0]        # 64 sizes below 2**63 at most
        if offsets[1] - offsets[0] != need or offsets[1] > data:
            raise bad(f"entry {shown} ({label}, shape {short_repr(tuple(shape))}) needs "
                      f"{count_text(need)} bytes; its offsets {short_repr(offsets)} give "
                      f"{count_text(offsets[1] - offsets[0])}, in {data:,} bytes of data")
        entries[name] = Entry(label, tuple(shape), path, begin + offsets[0], begin + offsets[1])
        spans.append((offsets[0], offsets[1], name))
    spans.sort()
    for (_, stop, first), (start, _, second) in itertools.pairwise(spans):
        if start < stop:
            raise bad(f"entries {weights._shown(first)} and {weights._shown(second)} overlap")
    return entries


def _shards(folder: Path, index_name: str = INDEX) -> dict[str, Entry]:
    """A sharded checkpoint: its index's weight_map (name -> shard file in the folder), each
    shard's header, and every name where the index says it is."""
    index = folder / index_name
    try:
        with open_regular(index) as stream:
            text = stream.read(MAX_INDEX + 1)
    except OSError as error:
        raise UsageError(f"cannot read {index}: "
                         f"{error.strerror or ' '.join(str(error).split())}") from None
    try:
        weight_map = json_loads(text.decode(json.detect_encoding(text)))["weight_map"]
    except (UnicodeDecodeError, ValueError, RecursionError, KeyError, TypeError):
        raise UsageError(f"cannot read {index}: not a JSON object with a weight_map") from None
    if not isinstance(weight_map, dict) or not all(
            isinstance(file, str) and file and Path(file).name == file and file not in (".", "..")
            for file in weight_map.values()):
        raise UsageError(f"cannot read {index}: its weight_map maps names to the files of "
                         "shards in the same folder")
    odd = next((file for file in weight_map.values() if any(map(hidden, file))), None)
    if odd is not None:         # a NUL the system refuses; any: no shard is named so
        raise UsageError(f"cannot read {index}: its weight_map names the shard "
                         f"{short_repr(odd)}, whose name holds a control character")
    entries: dict[str, Entry] = {}
    for file in sorted(set(weight_map.values())):
        for name, entry in _header(folder / file).items():
            if weight_map.get(name) != file:
                raise UsageError(f"{index}: shard {file} holds {weights._shown(name)}, which "
                                 f"the index places in {weight_map.get(name, 'no shard')}")
            entries[name] = entry
    missing = [name for name in weight_map if name not in entries]
    if missing:
        raise UsageError(f"{index}: {weights._shown(missing[0])} is not in its shard "
                         f"{weight_map[missing[0]]}")
    return entries
