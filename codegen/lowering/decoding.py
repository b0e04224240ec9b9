"""A model that decodes incrementally: the full model's module joined with its decoding
step's functions, ``prefill`` (the full forward, keeping what the step's states start as),
and CACHE_STATES, where each state starts."""

import dataclasses

from tspec.codegen import ir
from tspec.codegen.lowering.body import CACHE, PARAMS
from tspec.codegen.passes import rewrite
from tspec.errors import CodegenError
from tspec.language.model import (
    Block,
    BlockCall,
    Equation,
    Spec,
    TensorDecl,
    select,
    under,
)

PREFILL = "prefill"      # the function that runs the full forward and starts the cache


def cache_starts(spec: Spec, choices: dict[str, str], full: dict[str, str]) -> dict:
    """Where each state of the model under ``choices`` starts: nested like the trace (by
    instance name; a one-item list for every layer of a stack), a state's name mapping to the
    full model's tensor that prefill keeps for it (its ``from``), which the full model under
    ``full`` must compute at the same place."""
    stepped, whole = under(spec, choices), under(spec, full)     # the blocks as each names them

    def body(block: Block | None, twin: Block | None, path: str) -> dict:
        full_statements = select(twin.body if twin else whole.body, full) \
            if twin or path == "" else []
        computed = {s.output: s for s in full_statements
                    if isinstance(s, (Equation, BlockCall))}
        starts: dict = {}
        for s in select(block.body if block else stepped.body, choices):
            if isinstance(s, TensorDecl) and s.role == "state":
                # the checker proved the start computed here, of the state's shape
                if s.start not in computed:
                    raise CodegenError(
                        f"state {s.name} starts from {s.start}, which the full model does not "
                        f"compute at {path.rstrip('.') or 'its top level'} under "
                        f"{describe(full)}",
                        file=s.file, line=s.line)
                starts[s.name] = s.start
            elif isinstance(s, BlockCall):
                call = next((c for c in computed.values() if isinstance(c, BlockCall)
                             and c.instance == s.instance), None)
                inner = body(stepped.blocks[s.block], call and whole.blocks[call.block],
                             f"{path}{s.instance}{'[i]' if s.repeat is not None else ''}.")
                if inner:
                    starts[s.instance] = [inner] if s.repeat is not None else inner
        return starts

    return body(None, None, "")


def with_decoding(full: ir.Module, stepping: ir.Module, starts: dict) -> ir.Module:
    """The full model's module with the decoding step's functions (those it lacks) and
    ``prefill``, which runs the full forward and keeps what the step's states start from."""
    entry = next(f for f in full.functions if f.name == full.entry)
    step = next(f for f in stepping.functions if f.name == stepping.entry)
    known = {f.name: f for f in full.functions}
    functions = list(full.functions)
    for function in stepping.functions:
        if function.name not in known:
            functions.append(function)
        elif function != known[function.name]:
            raise CodegenError(f"function {function.name} differs between the full model and "
                               "its decoding step but was not renamed")
    full_inputs = {a.name for a in entry.arguments}
    foreign = [a.name for a in step.arguments if a.name not in full_inputs]
    if foreign:
        raise CodegenError(f"the decoding step takes {foreign[0]}, which the full model does "
                           "not: keep it in the cache as a state (`state ... from ...`)")
    result = _returned(entry)
    recorder = ir.Name("recorder")
    forward = ir.CallBlock(
        result, entry.name,
        tuple(ir.Name(a.name) for a in entry.arguments) + ((PARAMS,) if entry.params_class
                                                            else ()),
        tuple(ir.Keyword(k.name, ir.Name(k.name)) for k in entry.keywords) +
        (ir.Keyword("trace", recorder),),
        ir.Comment(before="the full forward"))
    body = (ir.Assign((recorder,), ir.call(ir.Runtime("StateRecorder"), ir.Name("CACHE_STATES")),
                      ir.Comment(before="keeps what the states start as")),
            forward,
            ir.Assign((CACHE,), ir.call(ir.Attribute(recorder, "states"))),
            ir.Return((*result, "cache")))
    prefill = ir.Function(
        name=PREFILL,
        summary=f"Prefill: {entry.name} over the prompt, and the cache that {step.name} "
                "extends.",
        source="", where=entry.where,
        equations=(), arguments=entry.arguments, params_class=entry.params_class, cache=False,
        keywords=entry.keywords, returns=(*entry.returns, ir.PlainType("dict")), prologue=(),
        steps=body, traces=False,
        notes=(_cache_note(starts, stepping, step.name),))
    full_classes = {c.name for c in full.params_classes}
    classes = list(full.params_classes) + [
        c for c in stepping.params_classes if c.name not in full_classes]
    # the cache checked first: the step's dims and its memory guard may read it
    check = ir.Evaluate(ir.call(ir.Runtime("check_cache"), CACHE, PARAMS,
                                ir.Name("CACHE_STATES")),
                        ir.Comment(before="the cache prefill made"))
    step = dataclasses.replace(
        step, summary="One decoding step: T_new positions after the T_past the cache holds.",
        **_atomic(step, check))
    functions = [step if f.name == step.name else f for f in functions] + [prefill]
    return ir.Module(
        spec_name=full.spec_name, title=full.title, spec_file=full.spec_file,
        spec_hash=full.spec_hash, choices=full.choices, backend=full.backend,
        params_classes=classes, functions=functions, entry=full.entry,
        constants=[
            ir.Constant("CACHE_STATES", "each state of the cache, nested like params (a "
                        "stack's layers one list item), and the full forward's tensor "
                        "it starts as", starts)])


def _cache_note(starts: dict, stepping: ir.Module, step: str) -> str:
    """What prefill's cache holds, from its states: those the step extends (an ``update``
    replaces them) and those it reads as prefill left them (a cross-attention's source keys
    and values), each group by where it is."""
    updated = {r.state for r in ir.walk(stepping.functions) if isinstance(r, ir.CacheUpdate)}
    groups: dict[tuple[bool, str], list[str]] = {}

    def walk(node: dict, path: str) -> None:
        for key, value in node.items():
            if isinstance(value, list):
                walk(value[0], f"{path}{key}[i].")
            elif isinstance(value, dict):
                walk(value, f"{path}{key}.")
            else:
                groups.setdefault((key in updated, path.rstrip(".")), []).append(key)
    walk(starts, "")

    def held(extended: bool) -> list[str]:
        return [f"{_and(names)} of {where}" if where else _and(names)
                for (grows, where), names in groups.items() if grows == extended]
    parts = [f"{_and(held(True))}, which {step} extends" if held(True) else "",
             f"{_and(held(False))}, which it reads as they are" if held(False) else ""]
    extends = any(grows for grows, _ in groups)
    return (f"The cache holds {', and '.join(p for p in parts if p)} ([i]: one entry a layer). "
            f"Call {step} with the next positions' ids and this cache"
            + (", which it extends in place once every layer has its new entries (a step that "
               "fails or is interrupted part way leaves it as it was)." if extends else "."))


def _and(items: list[str]) -> str:
    """a; a and b; a, b and c."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


STAGED = ir.Name("staged")


def _atomic(step: ir.Function, check: ir.Step) -> dict:
    """The decoding step's prologue and steps made atomic: its layers write their new
    entries into a copy of the cache's dicts and lists (``rt.staged``), which ``rt.commit``
    moves into the cache once the last layer has them; a step that fails or is interrupted
    part way leaves the cache as prefill and the earlier steps made it."""
    def staged(record):
        return rewrite.map_expressions(record, lambda e: STAGED if e == CACHE else e)

    prologue = (check, ir.Assign((STAGED,), ir.call(ir.Runtime("staged"), CACHE),
                                 ir.Comment(before="the step writes here, the cache at the "
                                                   "end")),
                *(staged(s) for s in step.prologue))
    body = [staged(s) for s in step.steps]
    at = next(i for i, s in enumerate(body) if isinstance(s, (ir.Record, ir.Return)))
    body.insert(at, ir.Evaluate(ir.call(ir.Runtime("commit"), STAGED, CACHE),
                                ir.Comment(after="every layer's new entries at once")))
    return {"prologue": prologue, "steps": tuple(body)}


def _returned(function: ir.Function) -> tuple[str, ...]:
    """The names a function returns (its Return step's)."""
    return next(s.values for s in function.steps if isinstance(s, ir.Return))


def describe(choices: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in choices.items()) or "the spec as written"
