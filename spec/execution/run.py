"""`tspec run`: a variant's generated forward pass on random (seeded) weights and tokens, and
with `--decode`, the same sequence decoded step by step from a prompt."""

import contextlib
import math
import sys
import time
import traceback
from dataclasses import dataclass, replace

import numpy as np
import sympy

from tspec.analysis import counts
from tspec.checking import limits
from tspec.checking.check import check
from tspec.checking.prove import concrete_values, evaluate
from tspec.codegen.backends import backend as backend_named
from tspec.codegen.lowering.lower import DECODING, lower
from tspec.codegen.lowering.spelling import Spelling
from tspec.codegen.rendering.render import render
from tspec.errors import RunError, TspecError, UsageError
from tspec.execution import weights
from tspec.execution.loading import load_source
from tspec.inputs import integer, short_repr
from tspec.language.model import (
    NEW,
    PAST,
    Equation,
    OpNode,
    TensorDecl,
    TensorRef,
    model_inputs,
    prompt_dims,
    select,
    step_choices,
)
from tspec.language.model import outputs as model_outputs
from tspec.language.uses import used_dims
from tspec.language.variant import RUN_DEFAULTS, Variant
from tspec.numbers import integer_text

# sizes for the dims a variant leaves free, so that it can run
MAX_RANK = 64              # axes a NumPy (or CuPy) array may have


def with_run_defaults(variant: Variant) -> Variant:
    """The variant with RUN_DEFAULTS for the dims it leaves free that its choices use, so that
    it can be checked (T <= max_len and the rest) and then run at those sizes (a rotary model
    has no position table to size)."""
    spec = variant.spec
    used = used_dims(spec, variant.choices if variant.is_spec else
                     spec.choice_values(variant.choices))
    free = {k: v for k, v in RUN_DEFAULTS.items()
            if k in spec.dims and k not in variant.dims and k in used
            and spec.dims[k].value is None}
    return replace(variant, dims={**free, **variant.dims},
                   defaulted=variant.defaulted | set(free))


@dataclass
class DecodeResult:
    prompt: int                                  # positions prefill takes
    steps: int                                   # positions decoded after it, one a step
    prefill_seconds: float
    step_seconds: list[float]
    cache: list[tuple[str, tuple[int, ...]]]     # the first layer's states after the last step
    difference: float                            # max |step logits - full forward logits|
    scale: float                                 # max |full forward logits|
    tolerance: float                             # the most ``difference`` may be (the dtype's)

    @property
    def agrees(self) -> bool:
        """Whether decoding gives the full forward's logits, within rounding: a cache that
        keeps something else (a state started from the wrong tensor of the right shape)
        gives other numbers."""
        return self.difference <= self.tolerance


# the most decoded logits may differ from the full forward's, relative to the largest logit
# (at least 1): a few roundings of the dtype, summed over the model's layers and positions
DECODE_TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 3e-2}


@dataclass
class RunResult:
    sizes: dict[str, int]
    shapes: list[tuple[str, tuple[int, ...]]]    # every traced tensor, flat name -> shape
    outputs: dict[str, np.ndarray]
    seconds: float
    parameters: int
    decoded: DecodeResult | None = None          # with decode_steps: the same sequence decoded
    weights: dict | None = None                  # with weights_path: checkpoint_files.Weights


@dataclass
class _Prepared:
    """A variant's generated module with random weights and inputs, ready to call."""
    spec: object
    choices: dict[str, str]
    sizes: dict[str, int]
    lowered: object
    module: object
    params: dict
    shapes: dict
    inputs: dict[str, np.ndarray]
    settings: dict
    dtype: str                  # the float dtype of the run


# What Python and NumPy keep beside the elements, measured with `ru_maxrss` (CPython 3.11,
# NumPy 2.4; benchmarks/RESULTS.md): tiny arrays in huge numbers cost these, not their elements
ARRAY_BYTES = 640          # an array: the ndarray (112 bytes), its buffer's allocation, its
#                            entries in the trace and the parameters, their names, its shape
CALL_BYTES = 2048          # a block call: its frame, its trace's dict, its parameters' dict
STEP_BYTES = 20 * 1024     # an equation or call of a body (once, not per copy): its generated
#                            code, parsed and compiled


@dataclass(frozen=True)
class MemoryEstimate:
    """What a run holds at once, in bytes: the parameters, the inputs, and every tensor the
    forward computes (it keeps them all, to show their shapes): the spec's counts; and what
    Python keeps for them (``overhead``: ``arrays`` arrays, ``calls`` block calls, ``steps``
    equations and calls of generated code)."""
    parameters: int
    inputs: int
    activations: int
    arrays: int = 0
    calls: int = 0
    steps: int = 0

    @property
    def overhead(self) -> int:
        return self.arrays * ARRAY_BYTES + self.calls * CALL_BYTES + self.steps * STEP_BYTES

    @property
    def total(self) -> int:
        return self.parameters + self.inputs + self.activations + self.overhead


def estimate_memory(variant: Variant, dtype: str = "float32") -> MemoryEstimate:
    """The memory ``run`` needs for a variant that ``with_run_defaults`` completed: from the
    spec's parameter and activation counts (the docs' figures) and the inputs' shapes, and
    for the overhead, how many arrays and calls those are, before anything is allocated."""
    spec = variant.spec
    choices = spec.choice_values(variant.choices)
    bodies = counts.costs(spec, choices)
    model = bodies[spec.name]
    paths = counts.call_paths(bodies, spec.name)
    size = {"float": np.dtype(dtype).itemsize, "int": counts.INT_BYTES,
            "bool": counts.BOOL_BYTES}              # bytes of an element, by dtype class

    def number(expr) -> int:
        return counts.evaluate(expr, spec, choices, variant.dims)
    try:
        parameters = number(model.parameters)
        activations = sum(number(getattr(model.activations, kind)) * size[kind]
                          for kind in size)
        # every copy of a body: its parameters and each tensor it computes are arrays
        copies = {name: number(sympy.Add(*(times for _, _, times in paths.get(name, []))))
                  if body.block is not None else 1 for name, body in bodies.items()}
    except KeyError as missing:
        raise UsageError(f"dim {missing.args[0]} has no value; give it with --set "
                         f"{missing.args[0]}=VALUE") from None
    shapes = list(_inputs(spec, choices, variant.dims))
    inputs = sum(int(np.prod(shape, dtype=object)) * size[kind] for _, shape, kind, _ in shapes)
    arrays = len(shapes) + sum((len(body.steps) + len(body.own_params)) * copies[name]
                               for name, body in bodies.items())
    calls = sum(copies[name] for name, body in bodies.items() if body.block is not None)
    steps = sum(len(body.steps) for body in bodies.values())
    return MemoryEstimate(parameters * size["float"], inputs, activations, arrays, calls,
                          steps)


def require_memory(variant: Variant, dtype: str, limit: int | None) -> MemoryEstimate:
    """Refuse a run whose estimate is past ``limit`` bytes (None: the memory this process may
    use, weights.memory_bytes)."""
    estimate = estimate_memory(variant, dtype)
    whose = "the limit given" if limit is not None else "the memory this process may use"
    limit = weights.memory_bytes() if limit is None else limit
    if limit is not None and estimate.total > limit:
        size = counts.size_text
        raise UsageError(
            f"{variant.name} needs about {size(estimate.total)} to run in {dtype} (parameters "
            f"{size(estimate.parameters)}, inputs {size(estimate.inputs)}, activations "
            f"{size(estimate.activations)}, overhead {size(estimate.overhead)} for "
            f"{integer_text(estimate.arrays, True)} arrays and "
            f"{integer_text(estimate.calls, True)} calls), more than {whose} "
            f"({size(limit)}): make its dims smaller with --set, or raise --max-memory")
    return estimate


def _prepare(variant: Variant, backend: str, seed: int, dtype: str,
             typecheck: bool, max_memory: int | None = None,
             weights_path: str | None = None) -> _Prepared:
    spec = variant.spec
    seed, dtype, max_memory = _options(seed, dtype, max_memory)
    choices = spec.choice_values(variant.choices)
    if choices.get(DECODING) == "step":
        raise UsageError("tspec run runs a model whole; a decoding step needs the cache a "
                         "prefill makes: leave decoding=full and pass --decode STEPS")
    require_memory(variant, dtype, max_memory)
    limits.doing(f"generating the forward code of {variant.name}")
    sizes = dict(variant.dims)
    chosen = backend_named(backend)
    try:
        __import__(chosen.module)
    except ImportError:
        raise UsageError(f"backend {backend} needs the {chosen.module} package, which is not "
                         "installed") from None
    lowered = lower(spec, choices, chosen)
    module = load_source(render(lowered), typecheck=typecheck)
    module.MEMORY_LIMIT = max_memory        # the generated functions' own checks: the same
    params = None
    if weights_path is not None:            # its layers compared before the spec's are listed
        from tspec.execution import checkpoint_files
        limits.doing(f"loading the weights of {variant.name}", str(weights_path))
        params = checkpoint_files.load_variant(weights_path, spec, choices, sizes,
                                               variant.name, dtype, variant.settings)
    shapes = weights.expected_shapes(spec, choices, sizes)
    inputs_shapes = [(name, shape) for name, shape, _, _ in _inputs(spec, choices, sizes)]
    for name, shape in [*shapes.items(), *inputs_shapes]:
        if len(shape) > MAX_RANK:
            raise UsageError(f"{name} has {len(shape)} axes; arrays have at most {MAX_RANK}, so "
                             f"{variant.name} cannot run")
    if params is None:
        limits.doing(f"drawing the weights and inputs of {variant.name}")
        params = weights.random_params(shapes, seed, np.dtype(dtype))
    rng = np.random.default_rng(seed + 1)
    inputs = {}
    for name, shape, kind, rows in _inputs(spec, choices, sizes):
        if kind == "int":
            inputs[name] = rng.integers(0, rows, shape)
        elif kind == "bool":
            inputs[name] = np.ones(shape, dtype=bool)
        else:
            inputs[name] = rng.standard_normal(shape).astype(dtype)
    return _Prepared(spec, choices, sizes, lowered, module, params, shapes, inputs,
                     dict(variant.settings), dtype)


def _options(seed, dtype, max_memory) -> tuple[int, str, int | None]:
    """A run's options as the API may give them (NumPy's integers, a dtype object), checked:
    the seed a non-negative integer, the dtype float16, float32 or float64 (by its name),
    the memory limit a positive integer of bytes or None."""
    number = integer(seed)
    if number is None or number < 0:
        raise UsageError(f"--seed must be a non-negative integer, got {short_repr(seed)}")
    try:                        # (np.dtype(None) is float64: None is no dtype here)
        name = None if dtype is None or isinstance(dtype, (bool, int, float)) else \
            np.dtype(dtype).name
    except (TypeError, ValueError):
        name = None
    if name not in DECODE_TOLERANCE:
        raise UsageError(f"a run's dtype is float16, float32 or float64, not "
                         f"{short_repr(dtype)}")
    if max_memory is not None:
        limit = integer(max_memory)
        if limit is None or limit < 1:
            raise UsageError(f"--max-memory must be a positive number of bytes, got "
                             f"{short_repr(max_memory)}")
        max_memory = limit
    return number, name, max_memory


def _steps(steps) -> int:
    """A decoding's step count as the API may give it (a NumPy integer too)."""
    number = integer(steps)
    if number is None:
        raise UsageError(f"--decode takes a number of steps, got {short_repr(steps)}")
    return number


def _params(prepared: _Prepared, name: str) -> list:
    """The parameters argument of generated function ``name``: none if it takes none (a spec
    without parameters)."""
    function = next(f for f in prepared.lowered.functions if f.name == name)
    return [prepared.params] if function.params_class else []


def _keywords(prepared: _Prepared, name: str, sizes: dict[str, int]) -> dict:
    """The keyword arguments generated function ``name`` needs: dims no array reveals, and
    the variant's run-time settings."""
    function = next(f for f in prepared.lowered.functions if f.name == name)
    dim = Spelling.of(prepared.spec).spec_name    # a keyword dim's name in the spec
    required = [k.name for k in function.keywords if k.default is None]
    missing = [dim(k) for k in required if dim(k) not in sizes]
    if missing:
        raise UsageError(f"{', '.join(missing)} must have a value to run: --set {missing[0]}=...")
    # a function with no float array to take its dtype from takes it as a keyword
    dtype = {"dtype": np.dtype(prepared.dtype)} if any(
        k.name == "dtype" for k in function.keywords) else {}
    return {k: sizes[dim(k)] for k in required} | dtype | {
        k.name: prepared.settings[k.name] for k in function.keywords
        if k.name in prepared.settings}


def run(variant: Variant, backend: str = "numpy", seed: int = 0, dtype: str = "float32",
        typecheck: bool = False, decode_steps: int | None = None,
        max_memory: int | None = None, weights_path: str | None = None) -> RunResult:
    """Run a variant that ``with_run_defaults`` completed and the checker passed; with
    ``decode_steps``, decode the same sequence too (see ``decode``), against this forward.
    A variant whose estimated memory is past ``max_memory`` bytes (None: the machine's) is
    refused before anything is allocated. ``weights_path``: a checkpoint to run with (as
    ``tspec.load_weights`` reads it, converted to ``dtype``) instead of seeded weights."""
    decode_steps = None if decode_steps is None else _steps(decode_steps)
    prepared = _prepare(variant, backend, seed, dtype, typecheck, max_memory, weights_path)
    if decode_steps is not None:
        _can_decode(prepared, variant.name, decode_steps)
    spec = prepared.spec
    entry = getattr(prepared.module, prepared.lowered.entry)
    keywords = _keywords(prepared, prepared.lowered.entry, prepared.sizes)
    trace: dict = {}
    limits.doing(f"running the forward pass of {variant.name}")
    start = time.perf_counter()
    with _generated(prepared, variant.name):
        result = entry(*prepared.inputs.values(), *_params(prepared, prepared.lowered.entry),
                       **keywords, trace=trace)
    seconds = time.perf_counter() - start
    outputs = result if isinstance(result, tuple) else (result,)
    flat = weights.flatten(trace)
    decoded = None if decode_steps is None else _decode(prepared, decode_steps, outputs[0],
                                                        variant.name)
    return RunResult(prepared.sizes, [(n, tuple(v.shape)) for n, v in flat.items()],
                     dict(zip(model_outputs(spec, prepared.choices), outputs)), seconds,
                     sum(int(np.prod(s)) for s in prepared.shapes.values()), decoded,
                     prepared.params if weights_path is not None else None)


def decode(variant: Variant, steps: int, backend: str = "numpy", seed: int = 0,
           dtype: str = "float32", typecheck: bool = False,
           max_memory: int | None = None, weights_path: str | None = None) -> DecodeResult:
    """The variant's random sequence of T_dec positions: the full forward over all of it,
    then prefill over the first T_dec - ``steps`` and decode_step for each of the rest, one
    position a step; the steps' logits against the full forward's at the same positions."""
    steps = _steps(steps)
    prepared = _prepare(variant, backend, seed, dtype, typecheck, max_memory, weights_path)
    _can_decode(prepared, variant.name, steps)
    entry = getattr(prepared.module, prepared.lowered.entry)
    keywords = _keywords(prepared, prepared.lowered.entry, prepared.sizes)
    with _generated(prepared, variant.name):
        full_logits = _first(entry(*prepared.inputs.values(),
                                   *_params(prepared, prepared.lowered.entry), **keywords))
    return _decode(prepared, steps, full_logits, variant.name)


@contextlib.contextmanager
def _generated(prepared: _Prepared, name: str):
    """A call into the generated code of variant ``name``: an error raised in it ends as a
    RunError naming the generated functions it was in (outermost first), on one line; a
    MemoryError (the code's own memory check, or an allocation that failed) as a UsageError,
    as the estimate's refusal before the run."""
    try:
        yield
    except TspecError:
        raise
    except MemoryError as error:
        raise UsageError(f"{name}: {_one_line(error) or 'out of memory'}") from None
    except Exception as error:  # noqa: BLE001 (whatever the generated code raised)
        # the model's functions by name, its runtime's as the model calls them (rt.check_cache)
        prefixes = {prepared.module.__file__: "", prepared.module.rt.__file__: "rt."}
        functions = []
        for frame in traceback.extract_tb(error.__traceback__):
            if frame.filename not in prefixes or frame.name.startswith("<"):
                continue
            named = f"{prefixes[frame.filename]}{frame.name}"
            if named == "rt._check_arguments":      # the entry functions' check (rt.entry)
                named = "rt.entry"
            elif named == "rt.checked" or named.startswith("rt._"):   # its wrapper, helpers'
                continue                                              # own helpers
            if named not in functions[-1:]:
                functions.append(named)
        where = " > ".join(functions) or "its module"
        raise RunError(f"{name}: the generated code raised {type(error).__name__} in {where}: "
                       f"{_one_line(error)}") from None


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def _first(result):
    """A generated function's first output (the logits): it returns a tuple when it has more
    than one."""
    return result[0] if isinstance(result, tuple) else result


def _can_decode(prepared: _Prepared, name: str, steps: int) -> None:
    """Refuse a model without a decoding step, or a step count the sequence cannot hold."""
    if not hasattr(prepared.module, "decode_step"):
        raise UsageError(f"{name} has no decoder to decode with (arch="
                         f"{prepared.choices.get('arch')}, {DECODING}="
                         f"{prepared.choices.get(DECODING)}); --decode needs a decoder-only "
                         f"or encoder-decoder model under {DECODING}=full")
    sequence = _sequence(prepared)
    length = prepared.sizes.get(sequence, 0)
    if not 1 <= steps < length:
        raise UsageError(f"--decode takes 1 to {sequence} - 1 = {length - 1} steps (the rest "
                         f"of the {sequence}={length} positions are the prompt), got {steps}")


def _sequence(prepared: _Prepared) -> str:
    """The dim of the sequence's positions: the one the full model's inputs have and its
    decoding step's lack (T_dec; the checker proved there is one), which prefill runs over
    the prompt's positions."""
    spec, choices = prepared.spec, prepared.choices
    (dim,) = prompt_dims(model_inputs(spec, choices),
                         model_inputs(spec, step_choices(spec, choices)))
    return str(dim)


def _decode(prepared: _Prepared, steps: int, full_logits, variant_name: str
            ) -> DecodeResult:
    """Prefill, then one position a step, against the full forward's ``full_logits``."""
    module, sizes = prepared.module, prepared.sizes
    limits.doing(f"decoding with {variant_name}")
    scale = float(abs(full_logits).max())                # NumPy or CuPy
    if not math.isfinite(scale):            # nothing to compare the steps with: say why
        raise RunError(f"{variant_name}: the full forward's logits are not finite (NaN or "
                       f"infinite), so decoding is not compared with them: "
                       f"{_not_finite(prepared)}")
    sequence = _sequence(prepared)
    length = sizes[sequence]
    prompt = length - steps
    stepping = step_choices(prepared.spec, prepared.choices)
    arguments = [_positions(prepared, prepared.choices, name, array, 0, prompt,
                            sizes | {sequence: prompt})
                 for name, array in prepared.inputs.items()]
    keywords = _keywords(prepared, "prefill", sizes)
    start = time.perf_counter()
    with _generated(prepared, variant_name):
        *outputs, cache = module.prefill(*arguments, *_params(prepared, "prefill"), **keywords)
    logits = outputs[0]
    prefill_seconds = time.perf_counter() - start
    step = next(f for f in prepared.lowered.functions if f.name == "decode_step")
    spec_name = Spelling.of(prepared.spec).spec_name     # an input's name as the spec gives it
    step_inputs = [spec_name(a.name) for a in step.arguments]
    axis = _new_positions_axis(prepared, stepping)
    differences = [_difference(logits, full_logits, axis, 0, prompt)]
    step_seconds = []
    for position in range(prompt, length):
        at = sizes | {PAST: position, NEW: 1}
        arguments = [_positions(prepared, stepping, name, prepared.inputs[name], position,
                                position + 1, at) for name in step_inputs]
        keywords = _keywords(prepared, "decode_step", at)
        start = time.perf_counter()
        with _generated(prepared, variant_name):
            logits = _first(module.decode_step(*arguments, *_params(prepared, "decode_step"),
                                               cache, **keywords))
        step_seconds.append(time.perf_counter() - start)
        differences.append(_difference(logits, full_logits, axis, position, position + 1))
    first = weights.flatten(cache)
    states = [(name, tuple(array.shape)) for name, array in first.items()
              if hasattr(array, "shape")]
    # the first layer of a stack; every state of a model without one
    layer = [(name, shape) for name, shape in states if ".0." in f".{name}."] or states
    return DecodeResult(prompt, steps, prefill_seconds, step_seconds, layer,
                        float(max(differences)), scale,
                        DECODE_TOLERANCE[prepared.dtype] * max(1.0, scale))


def _new_positions_axis(prepared: _Prepared, stepping: dict[str, str]) -> int:
    """The axis of the step's first output (the logits) that holds the new positions (the
    checker proved there is one, the full output's positions there)."""
    first = model_outputs(prepared.spec, stepping)[0]
    (row,) = [r for r in check(prepared.spec, stepping).tensors if r.name == first]
    return [str(d) for d in row.shape.dims].index(NEW)


def _difference(step, full, axis: int, start: int, stop: int) -> float:
    """The largest |step - full| over the positions start..stop of the full output; infinite
    where a step's logit is NaN (which ``max`` of the steps' differences would skip)."""
    index = (slice(None),) * axis + (slice(start, stop),)
    difference = float(abs(step - full[index]).max())    # NumPy or CuPy
    return difference if not math.isnan(difference) else math.inf


def _not_finite(prepared: _Prepared) -> str:
    """Why a forward's outputs are not finite: the first parameter holding a NaN or an
    infinity (looked for on request: here), or else the dtype the values overflowed."""
    for name, array in weights.flatten(prepared.params).items():
        if getattr(array, "size", 0) and not math.isfinite(float(abs(array).max())):
            xp = sys.modules[type(array).__module__.partition(".")[0]]   # NumPy or CuPy
            count = int(array.size - xp.count_nonzero(xp.isfinite(array)))
            return (f"parameter {name} holds {count:,} value{'s' * (count != 1)} that "
                    f"{'are' if count != 1 else 'is'} not finite")
    return (f"every parameter is finite, and the values grow past {prepared.dtype}'s range "
            "on the way")


def _positions(prepared: _Prepared, choices: dict[str, str], name: str, array: np.ndarray,
               start: int, stop: int, sizes: dict[str, int]) -> np.ndarray:
    """The part of a full-sequence input a call takes: its declared shape under ``choices``
    and ``sizes`` says, axis by axis, all of it, the positions before ``stop``, or those from
    ``start``."""
    (decl,) = [s for s in select(prepared.spec.body, choices)
               if isinstance(s, TensorDecl) and s.role == "input" and s.name == name]
    values = concrete_values(prepared.spec, choices, sizes)
    index = []
    for axis, dim in enumerate(decl.shape.dims):
        wanted, whole = int(evaluate(dim, values)), array.shape[axis]
        if wanted == whole:
            index.append(slice(None))
        elif wanted == stop:
            index.append(slice(0, stop))
        elif wanted == stop - start:
            index.append(slice(start, stop))
        else:
            raise UsageError(f"input {name}: axis {axis} is {whole} long in the full sequence "
                             f"and {wanted} in the call; cannot tell which positions it takes")
    return array[tuple(index)]


def _inputs(spec, choices, sizes):
    """Each model input: name, concrete shape, dtype, and for integer ids the number of rows
    of the table they index (token ids: V; token types: V_type), else None."""
    values = concrete_values(spec, choices, sizes)
    statements = select(spec.body, choices)
    tables = {s.name: s for s in statements if isinstance(s, TensorDecl) and s.role == "param"}
    indexed = {}
    for s in statements:
        if isinstance(s, Equation):
            for table, ids in _gathers(s.expr):
                if table in tables:
                    indexed.setdefault(ids, tables[table].shape.dims[0])
    for s in statements:
        if isinstance(s, TensorDecl) and s.role == "input":
            unknown = sorted(str(x) for d in s.shape.dims for x in d.free_symbols
                             if x not in values)
            if unknown:
                raise UsageError(f"input {s.name} ({s.shape.text()}) needs a value for "
                                 f"{', '.join(unknown)} to run: --set {unknown[0]}=...")
            shape = tuple(int(evaluate(d, values)) for d in s.shape.dims)
            rows = indexed.get(s.name)
            if s.dtype == "int" and rows is None:
                raise UsageError(f"input {s.name} holds integers but indexes no table; "
                                 "tspec run cannot tell their range")
            yield s.name, shape, s.dtype, None if rows is None else int(evaluate(rows, values))


def _gathers(term):
    """(table, ids) for every E[t] in an expression whose table and ids are plain names."""
    if isinstance(term, OpNode):
        if term.op == "gather" and all(isinstance(a, TensorRef) for a in term.args):
            yield term.args[0].name, term.args[1].name
        for arg in term.args:
            yield from _gathers(arg)
