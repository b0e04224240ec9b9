"""`tspec run`: a variant's generated forward pass on random (seeded) weights and tokens."""

import time
from dataclasses import dataclass

import numpy as np

from codegen import weights
from codegen.backends import backend as backend_named
from codegen.lower import lower
from codegen.render import render
from codegen.runtime import load_source
from spec.errors import UsageError
from spec.model import TensorDecl, select
from spec.prove import evaluate
from spec.variant import Variant

# sizes for the dims a variant leaves free, so that it can run
RUN_DEFAULTS = {"B": 2, "T": 32, "T_dec": 32, "V": 1000, "max_len": 512}


@dataclass
class RunResult:
    sizes: dict[str, int]
    shapes: list[tuple[str, tuple[int, ...]]]    # every traced tensor, flat name -> shape
    outputs: dict[str, np.ndarray]
    seconds: float
    parameters: int


def run(variant: Variant, backend: str = "numpy", seed: int = 0, dtype: str = "float32",
        typecheck: bool = False) -> RunResult:
    spec = variant.spec
    choices = spec.choice_values(variant.choices)
    sizes = {**{k: v for k, v in RUN_DEFAULTS.items() if k in spec.dims}, **variant.dims}
    lowered = lower(spec, choices, backend_named(backend))
    module = load_source(render(lowered), typecheck=typecheck)
    entry_ir = next(f for f in lowered.functions if f.name == lowered.entry)
    shapes = weights.expected_shapes(spec, choices, sizes)
    params = weights.random_params(shapes, seed, np.dtype(dtype))
    rng = np.random.default_rng(seed + 1)
    arguments = []
    entry = getattr(module, spec.name)
    for name, shape, kind in _inputs(spec, choices, sizes):
        if kind == "int":
            arguments.append(rng.integers(0, sizes["V"], shape))
        elif kind == "bool":
            arguments.append(np.ones(shape, dtype=bool))
        else:
            arguments.append(rng.standard_normal(shape).astype(dtype))
    required = [k.name for k in entry_ir.keywords if k.default is None]
    missing = [k for k in required if k not in sizes]
    if missing:
        raise UsageError(f"{', '.join(missing)} must have a value to run: --set {missing[0]}=...")
    keywords = {k: sizes[k] for k in required}
    trace: dict = {}
    start = time.perf_counter()
    result = entry(*arguments, params, **keywords, trace=trace)
    seconds = time.perf_counter() - start
    outputs = result if isinstance(result, tuple) else (result,)
    flat = weights.flatten(trace)
    return RunResult(sizes, [(n, tuple(v.shape)) for n, v in flat.items()],
                     dict(zip(spec.outputs, outputs)), seconds,
                     sum(int(np.prod(s)) for s in shapes.values()))


def _inputs(spec, choices, sizes):
    symbols = spec.symbols()
    values = {symbols[k]: v for k, v in sizes.items()}
    for s in select(spec.body, choices):
        if isinstance(s, TensorDecl) and s.role == "input":
            shape = tuple(int(evaluate(d, values)) for d in s.shape.dims)
            yield s.name, shape, s.dtype
