"""Lowering: a proved spec, under one choice of options, to the IR the templates render.

Each block becomes a function (``body``) and the model becomes the entry function; a model
that decodes incrementally also gets its decoding step and ``prefill`` (``decoding``). The
result is the spec's semantics alone; ``lower`` then applies the passes
(``codegen.passes``): attention's strategy, the float16 masked scores, bias-and-activation
fusion and the memory guard.
"""

import dataclasses

from tspec.checking.check import check
from tspec.codegen import ir, passes
from tspec.codegen.backends import Backend
from tspec.codegen.lowering.body import Lowerer
from tspec.codegen.lowering.decoding import cache_starts, describe, with_decoding
from tspec.codegen.lowering.spelling import ENTRY_STEP, Spelling
from tspec.errors import CodegenError, SpecError
from tspec.files import where
from tspec.language.model import (
    DECODING,
    Constraint,
    Spec,
    bodies_consulting,
    bodies_deriving,
    decodes,
    select,
    step_choices,
    under,
)
from tspec.language.model import lets as derived_dims
from tspec.language.names import check_name


def lower(spec: Spec, choices: dict[str, str], backend: Backend,
          rewrites: tuple | None = None) -> ir.Module:
    """The IR of ``spec`` under ``choices`` (the rest at their defaults) for ``backend``, after
    the passes ``rewrites`` (by default ``passes.PASSES``, every one; ``()``: the semantics
    alone).

    A model that can decode incrementally (the spec has the choice ``decoding = full |
    step``, and under ``step`` the model keeps states) also gets ``decode_step``, the model
    under ``decoding=step`` (its functions that differ named ``..._step``), and ``prefill``:
    the full forward, whose keys and values start the cache."""
    module = _lowered(spec, choices, backend)
    for rewrite in passes.PASSES if rewrites is None else rewrites:
        module = rewrite(module)
    return module


def _lowered(spec: Spec, choices: dict[str, str], backend: Backend) -> ir.Module:
    chosen = spec.choice_values(choices)
    _require_code_name(spec)
    _require_proved(spec, chosen)
    spelling = Spelling.of(spec)
    module = Lowerer(spec, chosen, backend, spelling=spelling).module()
    reading = [f.name for f in module.functions if f.cache]
    if reading and chosen.get(DECODING) != "step":
        raise CodegenError(f"{reading[0]} reads states (a cache) under {describe(chosen)}: "
                           "a model's full forward keeps none; declare states in the blocks "
                           f"its decoding step calls (under `{DECODING} = step`)",
                           file=spec.file)
    step = step_choices(spec, chosen)
    if step is None:
        return _checking_entries(module, spec, [chosen], spelling)
    # a block named as one of these steps' functions is spelt apart (spelling)
    stepped = under(spec, step)
    functions = {spelling.function(name) for name in stepped.blocks}
    renamed = {name: ENTRY_STEP if name is None else spelling.function(name, True, functions)
               for name in bodies_consulting(stepped, step, DECODING) |
               bodies_deriving(stepped, DECODING)}
    _require_proved(spec, step)
    stepping = Lowerer(spec, step, backend, renamed, spelling).module()
    if not any(function.cache for function in stepping.functions):
        return _checking_entries(module, spec, [chosen], spelling)  # nothing to keep
    return _checking_entries(with_decoding(module, stepping, cache_starts(spec, step, chosen)),
                             spec, [chosen, step], spelling)


ENTRIES = ("decode_step",)      # besides the model's entry function


def _checking_entries(module: ir.Module, spec: Spec, choices: list[dict],
                      spelling: Spelling) -> ir.Module:
    """The module with its entry functions (the model's, the decoding step's) checking their
    arguments on every call, ``rt.entry``, and RULES: the spec's derived dims and its
    top-level constraints under these choices, which the runtime evaluates over the dims the
    arguments give, and the names code spells otherwise than the spec (a keyword dim's)."""
    lets, requires = {}, {}
    for chosen in choices:
        lets |= {let.dim: let.expr for let in derived_dims(spec, chosen)}
        requires |= {c.relation: where(c)
                     for c in select(spec.body, chosen) if isinstance(c, Constraint)}
    rules = ir.Constant("RULES", "the spec's derived dims and constraints, in its notation: "
                        "what the entry functions check their arguments by (rt.entry)",
                        ir.EntryRules(tuple(lets.items()), tuple(requires.items()),
                                      tuple(spelling.respelt(spec.dims).items())))
    functions = [dataclasses.replace(f, checked=True)
                 if f.name == module.entry or f.name in ENTRIES else f
                 for f in module.functions]
    return dataclasses.replace(module, functions=functions,
                               constants=[*module.constants, rules])


def _require_code_name(spec: Spec) -> None:
    """A spec without a `spec NAME` line is named after its file, whose name need not be one
    generated code can use (``my-spec.tspec``, ``class.tspec``): refused, saying so."""
    try:
        check_name(spec.name, "spec")
    except SpecError as error:
        raise CodegenError(f"{error.message}; it is the spec's file name, as the spec has no "
                           '`spec NAME "title"` line: give it one', file=spec.file) from None


def _require_proved(spec: Spec, chosen: dict[str, str]) -> None:
    """Refuse a spec with a finding under ``chosen``. A model and its decoding step are proved
    together, in one proof with the decoding choice left open (where the spec decodes), and
    the findings are kept on the spec, whose records do not change once read: the full
    model's lowering, its step's and every backend's read that one proof."""
    fixed = {k: v for k, v in chosen.items() if k != DECODING} if decodes(spec) else chosen
    memo = spec.__dict__.setdefault("_proved", {})
    key = tuple(sorted(fixed.items()))
    if key not in memo:
        memo[key] = check(spec, fixed, all_choices=True).findings
    found = [f for f in memo[key] if f.combinations is None or chosen in f.combinations]
    if found:
        raise CodegenError(f"spec {spec.name} is not proved under {describe(chosen)}: "
                           f"{len(found)} finding(s); run `tspec check`", file=spec.file)