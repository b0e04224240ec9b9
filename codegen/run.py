"""`tspec run`: a variant's generated forward pass on random (seeded) weights and tokens."""

import time
from dataclasses import dataclass, replace

import numpy as np

from codegen import weights
from codegen.backends import backend as backend_named
from codegen.lower import lower
from codegen.render import render
from codegen.runtime import load_source
from spec.errors import UsageError
from spec.model import Equation, OpNode, TensorDecl, TensorRef, concrete_values, select
from spec.model import outputs as model_outputs
from spec.prove import evaluate
from spec.variant import Variant

# sizes for the dims a variant leaves free, so that it can run
RUN_DEFAULTS = {"B": 2, "T": 32, "T_dec": 32, "V": 1000, "max_len": 512, "V_type": 2}


@dataclass
class RunResult:
    sizes: dict[str, int]
    shapes: list[tuple[str, tuple[int, ...]]]    # every traced tensor, flat name -> shape
    outputs: dict[str, np.ndarray]
    seconds: float
    parameters: int


def with_run_defaults(variant: Variant) -> Variant:
    """The variant with RUN_DEFAULTS for the dims it leaves free, so that it can be checked
    (T <= max_len and the rest) and then run at those sizes."""
    free = {k: v for k, v in RUN_DEFAULTS.items()
            if k in variant.spec.dims and k not in variant.dims
            and variant.spec.dims[k].value is None}
    return replace(variant, dims={**free, **variant.dims})


def run(variant: Variant, backend: str = "numpy", seed: int = 0, dtype: str = "float32",
        typecheck: bool = False) -> RunResult:
    """Run a variant that ``with_run_defaults`` completed and the checker passed."""
    spec = variant.spec
    if seed < 0:
        raise UsageError(f"--seed must be a non-negative integer, got {seed}")
    choices = spec.choice_values(variant.choices)
    sizes = dict(variant.dims)
    chosen = backend_named(backend)
    try:
        __import__(chosen.module)
    except ImportError:
        raise UsageError(f"backend {backend} needs the {chosen.module} package, which is not "
                         "installed") from None
    lowered = lower(spec, choices, chosen)
    module = load_source(render(lowered), typecheck=typecheck)
    entry_ir = next(f for f in lowered.functions if f.name == lowered.entry)
    shapes = weights.expected_shapes(spec, choices, sizes)
    params = weights.random_params(shapes, seed, np.dtype(dtype))
    rng = np.random.default_rng(seed + 1)
    arguments = []
    entry = getattr(module, spec.name)
    for name, shape, kind, rows in _inputs(spec, choices, sizes):
        if kind == "int":
            arguments.append(rng.integers(0, rows, shape))
        elif kind == "bool":
            arguments.append(np.ones(shape, dtype=bool))
        else:
            arguments.append(rng.standard_normal(shape).astype(dtype))
    required = [k.name for k in entry_ir.keywords if k.default is None]
    missing = [k for k in required if k not in sizes]
    if missing:
        raise UsageError(f"{', '.join(missing)} must have a value to run: --set {missing[0]}=...")
    keywords = {k: sizes[k] for k in required}
    keywords |= {k.name: variant.settings[k.name] for k in entry_ir.keywords
                 if k.name in variant.settings}
    trace: dict = {}
    start = time.perf_counter()
    result = entry(*arguments, params, **keywords, trace=trace)
    seconds = time.perf_counter() - start
    outputs = result if isinstance(result, tuple) else (result,)
    flat = weights.flatten(trace)
    return RunResult(sizes, [(n, tuple(v.shape)) for n, v in flat.items()],
                     dict(zip(model_outputs(spec, choices), outputs)), seconds,
                     sum(int(np.prod(s)) for s in shapes.values()))


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
