"""The decoding pass: a step's states against the full model's tensors they start from,
the step's inputs and outputs against the full model's, and each state written.
"""

import difflib

import sympy

from tspec.checking.blame import declares
from tspec.checking.coverage import ChoiceSpace, Cover
from tspec.checking.findings import Finding
from tspec.checking.prove import SEARCH_MAX, Prover
from tspec.checking.ways import choices_used
from tspec.language.flow import calls_at, fed_by
from tspec.language.model import (
    DECODING,
    FULL,
    NEW,
    PAST,
    STEP,
    Spec,
    TensorDecl,
    Update,
    decodes,
    model_inputs,
    prompt_dims,
    select,
    under,
)
from tspec.symbolic.shape import Shape, format_expr


def decoding_findings(spec: Spec, members: ChoiceSpace, runs: list) -> list[tuple]:
    """What a decoding step needs of the full model that starts it, as code generation and
    `tspec run --decode` need it, each finding with the combinations it holds in (a Cover)
    and the declarations it is a use of (a step's and the full model's inputs, a state; a
    state that fits its start comes with None for its finding):

    - states are kept only under ``decoding = step`` (a full forward keeps none);
    - each state of the step starts as the full model's tensor its ``from`` names, computed
      at the same place (the same instances), of the state's dtype and shape: every axis
      equal, the positions axis once the full model runs over the PAST positions decoded
      before the step (prefill: the sequence's positions, T_dec, count PAST);
    - the step takes inputs the full model takes, each axis all of the full input's, the
      positions so far (PAST + NEW) or the new ones (NEW), and the full model's inputs run
      over exactly one dim of positions.

    A state or start that an earlier finding made doubtful (``Run.alternatives``) follows
    from it where its other shape fits. ``runs`` are (way, run) for each way of setting the
    model's own choices."""
    found: list[tuple] = []
    nothing = members.nothing
    step = members.matching({DECODING: STEP}) if decodes(spec) else nothing
    inputs = {id(run): tuple(model_inputs(spec, run.choices)) for _, run in runs}
    decls_by_id = {id(d): d for group in inputs.values() for d in group}
    # the inputs as a key: their ids (a declaration is no dict key)
    ids = {key: tuple(map(id, group)) for key, group in inputs.items()}
    # each state once, with the combinations that keep it and the run's prover and inputs
    states: dict[tuple, int] = {}
    provers = {run.prover_key: run.prover for _, run in runs}
    state_choices: dict[tuple, dict] = {}     # each state: the choices of a run keeping it
    for way, run in runs:
        for name, decl, shape, selection, other in run.states:
            key = (name, id(decl), shape, other, run.prover_key, ids[id(run)])
            states[key] = states.get(key, nothing) | members.matching(way | selection)
            if key not in state_choices:
                state_choices[key] = spec.choice_values(run.choices | selection)
    decls = {id(entry[1]): entry[1] for _, run in runs for entry in run.states}
    # the states of a step that no `update` writes, with the choices of one run that keeps
    # them (each such state is judged below by what its start is computed from)
    unwritten: dict[tuple, list] = {}
    for way, run in runs:
        for name, decl, shape, selection, _ in run.states:
            if (run.choices | selection).get(DECODING) != STEP:
                continue
            # (a choice no body the run checked consults: at its default)
            chosen = spec.choice_values(run.choices | selection)
            if not _written(spec, decl, chosen):
                entry = unwritten.setdefault((name, id(decl)), [nothing, chosen, shape])
                entry[0] |= members.matching(way | selection)
    for (name, decl_id, *_), bits in states.items():
        decl = decls[decl_id]
        if bits - step:
            found.append((Finding(
                kind="decoding-mismatch",
                message=f"state {decl.name} is kept where the model runs whole: a full "
                        "forward keeps no states, only a decoding step (under "
                        f"`{DECODING} == {STEP}`, a choice `{DECODING} = {FULL} | {STEP}`)",
                file=decl.file, line=decl.line, tensor=name,
                equation=f"state {decl.name} from {decl.start}",
                hint=f"declare states in the blocks the decoding step calls, under "
                     f"`when {DECODING} == {STEP}`"), bits - step, ()))
    if not step:
        return found
    past = spec.symbols().get(PAST)
    # what each full run stands for: the step combinations it starts (decoding flipped)
    full_runs = [(members.matching(way | {DECODING: STEP}), way, run) for way, run in runs
                 if run.choices.get(DECODING) != STEP]
    starts: dict[str, dict] = {}
    for _, way, run in full_runs:
        for name, dtype, shape, selection, other in run.starts:
            if selection.get(DECODING) != STEP:
                place = starts.setdefault(name, {})
                key = (dtype, shape, other, ids[id(run)])
                place[key] = place.get(key, nothing) | members.matching(way | selection |
                                                                  {DECODING: STEP})
    kept = nothing        # the step combinations that keep a state
    misnamed: dict[tuple, Finding] = {}      # (file, line) of a step's call -> its finding
    misbound: dict[tuple, Finding] = {}      # the same, for a call that binds a local dim
    misfits: dict[str, list] = {}            # a place -> its states that misfit their starts
    kept_at: dict[str, set] = {}             # a place -> the names of the states it keeps
    for name, decl_id, *_ in states:
        kept_at.setdefault(name[:len(name) - len(decls[decl_id].name)], set()).add(
            decls[decl_id].name)
    for key, bits in states.items():
        name, decl_id, shape, other, prover_key, step_inputs = key
        bits &= step
        if not bits:
            continue
        decl = decls[decl_id]
        kept |= bits
        prefix = name[:len(name) - len(decl.name)]
        covered = nothing
        for (dtype, start, start_other, full_inputs), start_bits in \
                starts.get(prefix + decl.start, {}).items():
            both = bits & start_bits
            if both:
                covered |= both
                sequence = _sequence(spec, [decls_by_id[i] for i in full_inputs],
                                     [decls_by_id[i] for i in step_inputs])
                prefill = {sequence: past} if past is not None and sequence is not None \
                    else {}
                finding = _state_start(provers[prover_key], name, decl, shape, dtype, start,
                                       prefill)
                if finding is not None:
                    finding.cause = _started_otherwise(provers[prover_key], name, decl,
                                                       (shape, other), (start, start_other),
                                                       dtype, prefill)
                if finding is not None and finding.cause is None and start is not None:
                    misfits.setdefault(prefix, []).append(
                        (finding, state_choices[key], decl, shape, start.subs(prefill),
                         provers[prover_key], both))
                # a use of the state's declaration that fits it (no finding) or not
                found.append((finding, both, (decl,)))
        if bits - covered:
            where = prefix.rstrip(".") or "its top level"
            state = Finding(
                kind="decoding-mismatch",
                message=f"state {decl.name} starts from {decl.start}, which the full model "
                        f"does not compute at {where}",
                file=decl.file, line=decl.line, tensor=name,
                equation=f"state {decl.name} from {decl.start}",
                hint=f"start it from a tensor the full model ({DECODING} = {FULL}) computes "
                     "in the block it calls at the same place")
            call = _misnamed_call(spec, state_choices[key], where, found, misnamed,
                                  bits - covered)
            if call is not None:
                state.cause = call.key()    # the call's instance, not the state, is the slip
            found.append((state, bits - covered, ()))
    # every state of a place misfitting its start along a local dim of the block: the call
    # that binds that dim, not each state, is the slip (one state misfitting alone: its start)
    for prefix, entries in misfits.items():
        if {entry[2].name for entry in entries} != kept_at.get(prefix, set()):
            continue
        for finding, chosen, decl, shape, start, prover, both in entries:
            call = _misbound_call(spec, chosen, prefix.rstrip("."), decl, shape, start, prover,
                                  found, misbound, both)
            if call is not None:
                finding.cause = call.key()
    # a state no update writes is judged by what its start is computed from, where the start
    # fits it (one that does not is the slip: cross-attention keys started from the queries)
    misfit = {f.tensor for f, _, _ in found if f is not None and
              f.equation.startswith("state ") and f.kind != "decoding-mismatch"}
    found += [entry for entry in _unwritten_states(spec, unwritten, decls, step)
              if entry[0].tensor not in misfit]
    pairs: dict[tuple, Cover] = {}      # (step inputs, full inputs, prover) -> combinations
    doubted: dict[tuple, dict] = {}     # the same -> outputs an earlier finding made doubtful
    for way, run in runs:
        step_bits = members.matching(way) & step & kept
        if not step_bits:
            continue
        for full_bits, full_way, full_run in full_runs:
            # (ways that set a choice otherwise share no combination: no diagram to build)
            if any(way.get(name, value) != value for name, value in full_way.items()
                   if name != DECODING):
                continue
            both = step_bits & full_bits
            if both:
                key = (ids[id(run)], ids[id(full_run)], run.outputs, full_run.outputs,
                       run.prover_key)
                pairs[key] = pairs.get(key, nothing) | both
                provers[run.prover_key] = run.prover
                doubted.setdefault(key, full_run.output_causes | run.output_causes)
    for key, bits in pairs.items():
        step_ids, full_ids, step_outputs, full_outputs, prover_key = key
        prover = provers[prover_key]
        step_inputs = [decls_by_id[i] for i in step_ids]
        full_inputs = [decls_by_id[i] for i in full_ids]
        sequence = _sequence(spec, full_inputs, step_inputs)
        found += [(finding, bits, compared) for finding, compared in
                  _step_inputs(spec, prover, step_inputs, full_inputs, sequence)]
        if sequence is not None:
            for finding in _step_outputs(spec, prover, step_outputs, full_outputs, sequence):
                # an output whose shape an earlier finding made doubtful follows from it
                finding.cause = doubted[key].get(finding.tensor)
                found.append((finding, bits, ()))
    return found


def _misbound_call(spec: Spec, chosen: dict, where: str, decl: TensorDecl, shape: Shape,
                   start: Shape, prover: Prover, found: list, misbound: dict,
                   bits: Cover) -> Finding | None:
    """Where a state misfits its start only along axes that are its block's local dims
    (``K_src "B T_x d_k"``, T_x the source's length), those the call at its place binds from
    the arguments passed (``cached_cross_attention(Y_1, L_self_h)`` binds T_x from the self-
    attention mask: T_past + T_new): that call is the one slip behind every state of the
    block. Its finding, made once (and added to ``found``), or None."""
    parent, _, instance = where.rpartition(".")
    calls = calls_at(spec, chosen, parent)
    call = next((c for c in calls or () if c.instance == instance.removesuffix("[i]")), None)
    if call is None or start.rank != shape.rank:
        return None
    block = under(spec, chosen).blocks[call.block]
    local = {d.symbol for d in block.local_dims.values()}
    written = decl.shape
    differing = [i for i, (a, b) in enumerate(zip(shape.dims, start.dims))
                 if not prover.equal(a, b).proved]
    if not differing or any(written.dims[i] not in local for i in differing):
        return None
    dim = written.dims[differing[0]]
    binding = next(((index, d) for index, d in enumerate(block.inputs)
                    if d.shape is not None and dim in d.shape.dims), None)
    if binding is None or binding[0] >= len(call.args):
        return None
    index, given = binding
    return _found_once(found, misbound, (call.file, call.line, str(dim)), bits, lambda: Finding(
        kind="decoding-mismatch",
        message=f"{call.block}'s {dim} is bound by {call.args[index]}, passed as "
                f"{given.name}, to {format_expr(shape.dims[differing[0]])}, where prefill "
                f"starts its state {decl.name} over {format_expr(start.dims[differing[0]])}: "
                f"the states of {instance} misfit their starts",
        file=call.file, line=call.line, tensor=f"{parent}.{call.output}".lstrip("."),
        equation=f"{call.output} = {call.text}" if call.text else "",
        hint=f"pass as {given.name} a tensor whose {dim} is "
             f"{format_expr(start.dims[differing[0]])}, or check which argument is not the "
             "one meant"))


def _misnamed_call(spec: Spec, chosen: dict, where: str, found: list, misnamed: dict,
                   bits: Cover) -> Finding | None:
    """Where a state's place (``decoder.layers[i].self_attn``) is a call the decoding step
    names otherwise than the full model at the same place (``as self_attention``): that call
    is the one slip behind every state it keeps. Its finding, made once (and added to
    ``found``), or None where the full model calls a block of that name there."""
    parent, _, instance = where.rpartition(".")
    instance = instance.removesuffix("[i]")
    full = calls_at(spec, chosen | {DECODING: FULL}, parent)
    step = calls_at(spec, chosen, parent)
    if full is None or step is None or any(c.instance == instance for c in full):
        return None
    call = next((c for c in step if c.instance == instance), None)
    if call is None:
        return None
    names = ", ".join(sorted({c.instance for c in full}))
    close = difflib.get_close_matches(instance, [c.instance for c in full], n=1)
    return _found_once(found, misnamed, (call.file, call.line), bits, lambda: Finding(
        kind="decoding-mismatch",
        message=f"the decoding step calls {call.block} as {instance} in "
                f"{parent or 'the model'}, where the full model calls no block of that "
                f"name (it calls {names} there): the states of {instance} start from "
                "tensors the full model does not compute",
        file=call.file, line=call.line, tensor=f"{parent}.{call.output}".lstrip("."),
        equation=f"{call.output} = {call.text}" if call.text else "",
        hint="name the call as the full model names it at the same place"
             + (f" (as {close[0]})" if close else "")))


def _found_once(found: list, memo: dict, place: tuple, bits: Cover, make) -> Finding:
    """The finding of one place (a call), made once (``make()``) and added to ``found`` with
    the combinations ``bits``; met again under other combinations, its bits widened."""
    if place not in memo:
        memo[place] = make()
        found.append((memo[place], bits, ()))
        return memo[place]
    for index, (finding, more, compared) in enumerate(found):
        if finding is memo[place]:
            found[index] = (finding, more | bits, compared)
    return memo[place]


def _written(spec: Spec, decl: TensorDecl, choices: dict) -> bool:
    """Whether the block that declares a state writes it (``update``) under these choices."""
    original = decl.written or decl
    memo = spec.__dict__.setdefault("_state_blocks", {})
    if id(original) not in memo:
        memo[id(original)] = next((block for block in spec.blocks.values()
                                   if declares(block.body, original)), None)
    block = memo[id(original)]
    if block is None:
        return False
    # the same block under the same options of the choices it consults: the same answer
    relevant = tuple((c, choices[c]) for c in choices_used(spec, block.name))
    key = ("written", id(original), relevant)
    if key not in memo:
        memo[key] = any(isinstance(s, Update) and s.state == original.name
                        for s in select(block.body, choices))
    return memo[key]


def _unwritten_states(spec: Spec, unwritten: dict, decls: dict, step: int) -> list[tuple]:
    """A state no `update` writes keeps what prefill left in it, step after step. That is
    right only for one of a fixed size started from inputs a step never takes anew (the
    source's keys and values a cross-attention reads). One that grows with the positions
    decoded (T_past in its shape) needs its update every step; so does one of a fixed size
    started from the sequence's inputs (a rolling window of the last W positions), which
    each step's new positions change."""
    past = spec.symbols().get(PAST)
    found = []
    for (name, decl_id), (bits, chosen, shape) in unwritten.items():
        bits &= step
        if not bits:
            continue
        decl = decls[decl_id]
        equation = f"state {decl.name} from {decl.start}"
        axes = [str(i) for i, d in enumerate(shape.dims) if past is not None and
                past in sympy.sympify(d).free_symbols]
        if axes:
            message = (f"state {decl.name} ({shape.text()}) grows with {PAST} (axis "
                       f"{', '.join(axes)}), but no `update {decl.name} = ...` writes it: "
                       f"after a step it holds the {PAST} positions it had, where the next "
                       f"step needs {PAST} + {NEW}")
        else:
            full = chosen | {DECODING: FULL}
            prefix = name[:len(name) - len(decl.name)]
            full_inputs = model_inputs(spec, full)
            changing = {d.name for d in full_inputs if d.shape is not None and
                        d.shape.free_symbols() & prompt_dims(full_inputs,
                                                             model_inputs(spec, chosen))}
            fed = (fed_by(spec, full, prefix + decl.start) or set()) & changing
            if not fed:
                continue
            message = (f"state {decl.name} is never updated, yet it starts from "
                       f"{decl.start}, which is computed from the sequence's inputs "
                       f"({', '.join(sorted(fed))}): every step's new positions change it, "
                       "and each step would read what prefill left")
        found.append((Finding(
            kind="decoding-mismatch", message=message, file=decl.file, line=decl.line,
            tensor=name, equation=equation,
            hint=f"write its next value in the block that keeps it: `update {decl.name} = X`, "
                 "X the state with this step's positions"), bits, ()))
    return found


def _sequence(spec: Spec, full: list[TensorDecl], step: list[TensorDecl]):
    """The dim of the sequence's positions in the full model's inputs, which the decoding
    step's inputs take as the new positions (NEW) or those so far (PAST + NEW): the one the
    inputs of one name agree on (most of them, where one is declared wrong), else the one
    dim the step's inputs lack; None when neither says (memoised)."""
    memo = spec.__dict__.setdefault("_sequence", {})
    key = (tuple(map(id, full)), tuple(map(id, step)))
    if key in memo:
        return memo[key]
    symbols = spec.symbols()
    past, new = symbols.get(PAST), symbols.get(NEW)
    steps = {s for s in (new, None if past is None or new is None else past + new)
             if s is not None}
    votes: dict = {}
    by_name = {d.name: d for d in full if d.shape is not None}
    for decl in step:
        other = by_name.get(decl.name)
        if decl.shape is None or other is None or other.shape.rank != decl.shape.rank:
            continue
        for mine, theirs in zip(decl.shape.dims, other.shape.dims):
            # (the full model's own positions are no step's: T_new there is no sequence)
            if mine in steps and isinstance(theirs, sympy.Symbol) and \
                    theirs not in (past, new):
                votes[theirs] = votes.get(theirs, 0) + 1
    if votes:
        most = max(votes.values())
        chosen = [d for d, n in votes.items() if n == most]
        memo[key] = chosen[0] if len(chosen) == 1 else None
    else:
        prompt = prompt_dims(list(full), list(step))
        memo[key] = next(iter(prompt)) if len(prompt) == 1 else None
    return memo[key]


def _started_otherwise(prover: Prover, name: str, decl: TensorDecl, state: tuple,
                       start: tuple, dtype: str, prefill: dict) -> tuple | None:
    """The earlier finding a state's mismatch with its start follows from: the state or its
    start is doubtful (each a shape and ``(other shape, cause)`` or None), and with its other
    shape the two agree. None where no other shape makes them agree."""
    shape, doubt = state
    first, first_doubt = start
    tries = []
    if doubt is not None:
        tries.append((doubt[0], first, doubt[1]))
    if first_doubt is not None:
        tries.append((shape, first_doubt[0], first_doubt[1]))
    if doubt is not None and first_doubt is not None and doubt[1] == first_doubt[1]:
        tries.append((doubt[0], first_doubt[0], doubt[1]))
    for mine, theirs, cause in tries:
        if _state_start(prover, name, decl, mine, dtype, theirs, prefill) is None:
            return cause
    return None


def _step_outputs(spec: Spec, prover: Prover, step: tuple, full: tuple,
                  sequence) -> list[Finding]:
    """The decoding step returns the full model's outputs over the new positions (NEW) or
    those so far (PAST + NEW) where the full model has the sequence's (``sequence``); the
    first of them first, over the new positions on one axis alone (what `tspec run --decode`
    compares with the full forward, position by position)."""
    symbols = spec.symbols()
    past, new = symbols.get(PAST), symbols.get(NEW)
    found = []
    by_name = {name: (dtype, shape) for name, dtype, shape, _ in full}
    for index, (name, dtype, shape, (file, line)) in enumerate(step):
        other = by_name.get(name)
        problem = None
        if index == 0 and full and full[0][0] != name:
            problem = f" first, where the full model returns {full[0][0]} first"
        elif other is None:
            problem = ", which the full model does not return"
        elif other[0] != dtype:
            problem = f" as {dtype}, which the full model returns as {other[0]}"
        elif other[1].rank != shape.rank or \
                (other[1].family is None) != (shape.family is None):
            problem = f" as {shape.text()}, which the full model returns as {other[1].text()}"
        else:
            theirs = other[1]
            wholes = [i for i, d in enumerate(theirs.dims) if d == sequence]
            for axis, (mine, whole) in enumerate(zip(shape.dims, theirs.dims)):
                if whole == sequence:
                    wanted = [w for w in (new, None if index == 0 or past is None or
                                          new is None else past + new) if w is not None]
                else:
                    wanted = [whole]
                if mine not in wanted and not any(prover.equal(mine, w).proved
                                                  for w in wanted):
                    if not wanted:
                        problem = (f" as {shape.text()}, whose axis {axis} the full model's "
                                   f"{theirs.text()} has as its positions, and the spec "
                                   f"declares no dim {NEW}: a decoding step's new positions "
                                   f"are {NEW}, after the {PAST} it keeps")
                        break
                    shown = " nor ".join(format_expr(w) for w in wanted)
                    problem = (f" as {shape.text()}, whose axis {axis} is neither {shown} of "
                               f"the full model's {theirs.text()}")
                    break
            if problem is None and index == 0 and len(wholes) != 1:
                problem = (f" first as {shape.text()}, over the new positions on "
                           f"{len(wholes)} axes: tspec run --decode compares the first output "
                           f"with the full forward's along one axis of positions")
        if problem is not None:
            found.append(Finding(
                kind="decoding-mismatch",
                message=f"the decoding step returns {name}{problem}",
                file=file, line=line, tensor=name,
                hint=f"return the full model's outputs at the new positions ({NEW})"))
    return found


def _state_start(prover: Prover, name: str, decl: TensorDecl, shape: Shape, dtype: str,
                 start: Shape | None, prefill: dict) -> Finding | None:
    """A state against the full model's tensor it starts as, over the positions prefill
    runs on (``prefill``: each dim the step's inputs lack, the sequence's positions, as
    T_past); None when they agree for every allowed size."""
    equation = f"state {decl.name} from {decl.start}"
    if dtype != decl.dtype:
        return Finding(kind="dtype-mismatch", message=f"state {decl.name} is {decl.dtype} but "
                       f"starts from {decl.start}, which is {dtype}", file=decl.file,
                       line=decl.line, equation=equation, tensor=name,
                       hint=f"start {decl.name} from a {decl.dtype} tensor")
    started = start.subs(prefill)
    same_form = started.rank == shape.rank and \
        (started.family is None) == (shape.family is None)
    pairs = list(zip(shape.dims, started.dims))
    if shape.family is not None and same_form:
        pairs.append((shape.family, started.family))
    verdict = prover.equal_all(pairs) if same_form else None
    if verdict is not None and verdict.proved:
        return None
    over = sorted(str(d) for d in start.free_symbols() if d in prefill)
    told = f" ({decl.start} is {start.text()}, over {' = '.join(over)} = {PAST} positions)" \
        if over else ""
    message = f"state {decl.name} is declared {shape.text()} but prefill starts it as " \
              f"{decl.start}, {started.text()}{told}"
    hint = f"start {decl.name} from a tensor of its shape, or declare it \"" + \
        " ".join(format_expr(d) for d in started.dims) + "\""
    redeclare = (decl, Shape(started.dims, decl.shape.family))
    if verdict is None:
        return Finding(kind="shape-mismatch", message=message, file=decl.file, line=decl.line,
                       equation=equation, tensor=name, expected=shape.text(),
                       inferred=started.text(), hint=hint, redeclare=redeclare)
    differing = [str(i) for i, (a, b) in enumerate(pairs[:shape.rank])
                 if prover.norm(a) != prover.norm(b)]
    if differing:
        message += f" (axis {', '.join(differing)})"
    if verdict.unknown:
        message += f" (not proved, and no counterexample with every dim up to {SEARCH_MAX})"
    return Finding(kind="unproved" if verdict.unknown else "shape-mismatch", message=message,
                   file=decl.file, line=decl.line, equation=equation, tensor=name,
                   expected=shape.text(), inferred=started.text(),
                   counterexample=None if verdict.unknown else dict(verdict.counterexample),
                   hint=hint, redeclare=redeclare)


def _step_inputs(spec: Spec, prover: Prover, step: list[TensorDecl], full: list[TensorDecl],
                 sequence) -> list[tuple[Finding, tuple]]:
    """The decoding step's inputs against the full model's (see ``decoding_findings``), the
    sequence's positions ``sequence`` (see ``_sequence``): each finding with the inputs it
    compares."""
    found = []
    prompt = prompt_dims(full, step)
    symbols = spec.symbols()
    past, new = symbols.get(PAST), symbols.get(NEW)
    by_name = {d.name: d for d in full}
    for decl in step if sequence is not None else ():
        other = by_name.get(decl.name)
        problem = None
        if other is None:
            problem = ", which the full model does not: keep it in the cache as a state " \
                      "(`state ... from ...`)"
        elif other.dtype != decl.dtype:
            problem = f" as {decl.dtype}, which the full model takes as {other.dtype}"
        elif other.shape.rank != decl.shape.rank or \
                (other.shape.family is None) != (decl.shape.family is None):
            problem = f" as {decl.shape.text()}, which the full model takes as " \
                      f"{other.shape.text()}"
        else:
            for axis, (mine, theirs) in enumerate(zip(decl.shape.dims, other.shape.dims)):
                if theirs == sequence:
                    wanted = [w for w in (new, None if new is None or past is None else
                                          past + new) if w is not None]
                else:
                    wanted = [theirs]
                if mine in wanted or any(prover.equal(mine, w).proved for w in wanted):
                    continue
                if theirs == sequence and not wanted:
                    problem = (f" as {decl.shape.text()}, whose axis {axis} the full model's "
                               f"{other.shape.text()} has as its positions, and the spec "
                               f"declares no dim {NEW}: a decoding step's new positions are "
                               f"{NEW}, after the {PAST} it keeps")
                elif theirs == sequence:
                    shown = " nor ".join(format_expr(w) for w in wanted)
                    problem = (f" as {decl.shape.text()}, whose axis {axis} takes neither "
                               f"{shown} of the full model's {other.shape.text()}")
                else:
                    problem = (f" as {decl.shape.text()}, whose axis {axis} is "
                               f"{format_expr(mine)} where the full model's "
                               f"{other.shape.text()} has {format_expr(theirs)}")
                break
        if problem is not None:
            found.append((Finding(
                kind="decoding-mismatch",
                message=f"the decoding step takes {decl.name}{problem}",
                file=decl.file, line=decl.line, tensor=decl.name,
                hint=f"take the full model's input: all of an axis, the positions so far "
                     f"({PAST} + {NEW}) or the new ones ({NEW})"),
                (decl,) if other is None else (decl, other)))
    wholes = {sequence} | {s for s in (past, new) if s is not None}
    for decl in full if sequence is not None else ():
        if any(not d.free_symbols.isdisjoint(wholes) and d != sequence
               for d in decl.shape.dims):
            found.append((Finding(
                kind="decoding-mismatch",
                message=f"the full model's input {decl.name} ({decl.shape.text()}) has an "
                        f"axis that is neither free of the sequence's positions ({sequence}) "
                        "nor those positions: prefill cannot take the prompt's part of it",
                file=decl.file, line=decl.line, tensor=decl.name,
                hint=f"give each axis the sequence's length {sequence}, or a size free of it"),
                (decl,)))
    if found or prompt == {sequence}:
        return found
    # the step's inputs each fit the full model's, yet lack another number of its dims
    positions = sorted(str(d) for d in prompt)
    first = (step or full or [TensorDecl("", "input", None, file=spec.file)])[0]
    return [(Finding(
        kind="decoding-mismatch",
        message=f"the decoding step's inputs lack {len(prompt)} of the full model's input "
                f"dims ({', '.join(positions) or 'none'}), where they must lack one: the "
                f"sequence's positions, in whose place a step takes the new ones ({NEW}) "
                f"and those so far ({PAST} + {NEW})",
        file=first.file, line=first.line, tensor=first.name,
        hint=f"take the new positions ({NEW}) where the full model takes the sequence's"),
        ())]
