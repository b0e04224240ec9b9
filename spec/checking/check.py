"""The checker: proves every shape in a spec for all sizes the constraints allow.

For each combination of choices it selects the statements in force, orders the equations by
their data flow (a cycle is an error), infers each equation's output shape from its inputs'
*declared* shapes through the op rules, and proves the result equal to the declared shape.
Block calls bind the block's local dims by matching its inputs (``T_q = T_dec``), then check
the body once per binding. Every claim that fails becomes a ``Finding`` with a counterexample;
given dim values (a variant), the same run also evaluates every shape and constraint.

This module owns the entry (``check``, ``combinations``) and what is done across runs: the
result, the findings merged and weighed, a redeclaration offered only where a re-check shows
it fixes the finding. One run is ``run.Run`` (see the package's docstring for the rest).
"""

from dataclasses import dataclass, field, replace

from tspec.checking import limits
from tspec.checking.blame import (
    calls_in,
    grouped_findings,
    misfit_declaration,
    misfits,
    place,
    settles,
    weighed_hint,
)
from tspec.checking.claims import declaration
from tspec.checking.coverage import ChoiceSpace
from tspec.checking.decoding import decoding_findings
from tspec.checking.findings import Finding
from tspec.checking.limits import TIME_LIMIT, require_tensor_count
from tspec.checking.run import Run
from tspec.checking.scope import Memo, TensorRow
from tspec.errors import LimitError, SpecError
from tspec.language.model import (
    DECODING,
    FULL,
    STEP,
    Note,
    Reused,
    Spec,
    TensorDecl,
    When,
    decodes,
    every_record,
    select,
    selections,
    under,
)
from tspec.symbolic.shape import Shape, format_expr


@dataclass
class Result:
    """The outcome of checking one spec under one or all choice combinations."""
    spec: Spec
    findings: list[Finding]
    combinations: list[dict]
    tensors: list[TensorRow] = field(default_factory=list)    # for the first combination
    notes: list[Note] = field(default_factory=list)
    values: dict = field(default_factory=dict)                # dim values in force
    lets: dict = field(default_factory=dict)                  # derived dims (first combination)

    @property
    def ok(self) -> bool:
        return not self.findings


def combinations(spec: Spec, fixed: dict | None = None) -> ChoiceSpace:
    """Every combination of choice values, with ``fixed`` ones held (a sequence computed on
    demand: the checker never lists them)."""
    fixed = fixed or {}
    spec.choice_values(fixed)     # validates names and options
    return ChoiceSpace({name: (fixed[name],) if name in fixed else choice.options
                        for name, choice in spec.choices.items()})


def check(spec: Spec, choices: dict | None = None, values: dict | None = None, *,
          all_choices: bool = False, time_limit: float | None = TIME_LIMIT,
          proved: Result | None = None) -> Result:
    """Check a spec: under the given choices (defaults for the rest), or under all of them.

    ``values`` binds dims to sizes (a variant): shapes and constraints are then evaluated too.
    ``proved``, the check of the same spec under the same choices without values, where it
    found nothing, spares the evaluation of every shape (see ``_values_only``).
    Past ``time_limit`` seconds, or for a spec that expands past ``limits.MAX_TENSORS``
    tensors, a LimitError (see spec.limits).
    """
    require_tensor_count(spec)
    with limits.time_limit(time_limit):
        try:
            return _check(spec, choices, values, all_choices, proved=proved)
        except LimitError as error:       # a bound deep in the prover: where it was reached
            raise limits.placed(error) from None


def _check(spec: Spec, choices: dict | None, values: dict | None, all_choices: bool,
           verify: bool = True, provers: dict | None = None,
           block_cache: dict | None = None, proved: Result | None = None) -> Result:
    """See ``check``; ``verify`` False offers every hint unchecked (the check a hint's fix is
    checked by, see ``_offered``, which shares the ``provers``, the constraints and derived
    dims being the same, and what the blocks it does not change gave)."""
    limits.reached(spec)
    given = dict(values or {})
    for name, dim in spec.dims.items():
        if dim.value is not None:
            if name in given and given[name] != dim.value:
                raise SpecError(f"dim {name} is fixed to {dim.value} by the spec; cannot set "
                                f"{given[name]}", file=dim.file, line=dim.line)
            given[name] = dim.value
    unknown = [n for n in given if n not in spec.dims]
    if unknown:
        raise SpecError(f"unknown dim {unknown[0]!r}", file=spec.file)
    combos = combinations(spec, choices if all_choices else spec.choice_values(choices))
    fixed = dict(choices or {}) if all_choices else combos[0]
    provers = {} if provers is None else provers
    block_cache = {} if block_cache is None else block_cache
    if proved is not None and given and not all_choices:
        done = _values_only(spec, combos, given, proved, provers)
        if done is not None:
            return done
    # a model comes with its decoding step (generate emits both, and run refuses a model
    # whose step is not proved), and a step with the full model that starts it (prefill):
    # proving one proves the other, ``partner``, the same choices with decoding flipped. A
    # variant's sizes are judged in the model it runs alone (T_past + T_new rows of a table
    # of max_len = 1 is no finding of a model that runs whole); a step's prefill is still
    # run to start its states, its findings not reported (``quiet``)
    partner = _partner(spec, fixed)
    quiet = bool(values) and partner is not None
    if quiet and partner[DECODING] == STEP:
        partner, quiet = None, False
    # the combinations checked: the partner's after those asked (decoding the most
    # significant choice, its asked value first)
    checked = combos if partner is None or quiet else ChoiceSpace(
        {name: (fixed[DECODING], partner[DECODING]) if name == DECODING else options
         for name, options in zip(combos.order, combos.values)}, first=DECODING)
    nothing = checked.nothing
    memo = Memo()
    merged: dict = {}
    seen_in: dict = {}
    causes: set = set()
    rows: list[TensorRow] = []
    notes: list[Note] = []
    lets: dict = {}
    # the model's body is checked once for each way of setting the choices it consults
    # itself; each block it calls, once for each way of setting the choices the block
    # consults that are still open (see ``selections``): the work grows with the sum of the
    # ways, not with their product, the number of combinations
    runs = []
    # the choices asked first (their first way gives the rows), then the partner's
    asked = {} if partner is None else {DECODING: fixed[DECODING]}
    plans = [(fixed, asked)] + ([] if partner is None else [(fixed | partner, partner)])
    for base, flipped in plans:
        for way in selections(spec, None, base):
            first = not runs
            run = Run(spec, base | way, given, provers, block_cache, rows=first,
                       memo=memo)
            top_rows = run.run()
            way = flipped | way
            runs.append((way, run))
            if first:
                rows = top_rows
                notes = run.notes + _block_notes(under(spec, combos[0]), combos[0])
                lets = run.let_map
            for finding in run.findings if not (quiet and base is not fixed) else ():
                key = finding.key()
                merged.setdefault(key, finding)
                seen_in[key] = seen_in.get(key, nothing) | checked.matching(way | finding.selection)
                if finding.cause is None:
                    causes.add(key)        # a cause under some choices is a cause
    for finding, found, compared in decoding_findings(spec, checked, runs):
        if finding is None:             # a state that fits its start: a use that fits
            for decl in compared:
                memo.use(decl).fits[("start", id(decl))] = decl.line
            continue
        key = finding.key()
        merged.setdefault(key, finding)
        seen_in[key] = seen_in.get(key, nothing) | found
        if finding.cause is None:
            causes.add(key)
        for decl in compared:
            # the step's input against the full model's: a use of each that does not fit
            memo.use(decl).fails.setdefault(key, []).append(key)
    for key, (earlier, later, local, given) in memo.conflicts.items():
        # two arguments that disagree on a local dim, where the later one's value makes a
        # decoding state fit its start: evidence for the later one
        fitting = sorted({f.line for f in merged.values() if f.cause == key and
                          f.equation.startswith("state ")})
        if key in merged and fitting:
            merged[key].hint += (
                f"; with {later}'s {local} ({format_expr(given)}), the state"
                f"{'s' if len(fitting) > 1 else ''} at line{'s' if len(fitting) > 1 else ''} "
                f"{', '.join(map(str, fitting))} fit{'' if len(fitting) > 1 else 's'} "
                f"{'their starts' if len(fitting) > 1 else 'its start'}: {earlier} is the "
                "likelier one not meant")
    block_inputs = {id(d) for block in spec.blocks.values() for d in block.inputs}
    for decl, failed, fits in misfits(memo.uses.values(), merged, causes, block_inputs):
        # a finding at the declaration itself (a step's input the full model takes otherwise)
        # is the cause; else the declaration, as a finding of its own
        own = next((merged[k] for k in failed
                    if (merged[k].file, merged[k].line) == (decl.file, decl.line)), None)
        inside = sorted({f.line for f in merged.values() if f.cause in failed}) \
            if id(decl) in block_inputs else []
        declared = own or misfit_declaration(decl, [merged[k] for k in failed], fits, inside)
        key = declared.key()
        merged.setdefault(key, declared)
        causes.add(key)
        seen_in[key] = seen_in.get(key, nothing)
        for use in failed:
            if own is None:
                seen_in[key] |= seen_in.get(use, nothing)
            if use != key and use in causes and merged[use].cause is None:
                merged[use].cause = key
                causes.discard(use)
    # findings one constraint fixes (the hint of each suggests it): the first is the cause,
    # the rest follow from it (pasting the constraint once removes them all)
    fixed_by: dict = {}
    for key in sorted(causes, key=lambda k: place(merged[k])):
        if merged[key].suggested is not None:
            fixed_by.setdefault(merged[key].suggested, []).append(key)
    # and those such a constraint proves, whatever their own hints say (`require T <=
    # max_len` settles a relative bias's 2*T - 1 <= 2*max_len - 1 too)
    for relation, keys in fixed_by.items():
        for key in sorted(causes, key=lambda k: place(merged[k])):
            claim = merged[key].claim
            if key not in keys and claim is not None and merged[key].caused_by is None and \
                    settles(claim, relation):
                keys.append(key)
    for first, *rest in fixed_by.values():
        for key in rest:
            if key in causes:
                merged[key].cause = first
                causes.discard(key)
    for key, said in memo.evidence.items():
        if key in merged and len(said) == 1:
            merged[key].hint = weighed_hint(merged[key], *said.items())
    findings = list(merged.values())
    if len(checked) > 1:
        options = {name: choice.options for name, choice in spec.choices.items()}
        for key, finding in merged.items():
            finding.choices = "" if len(combos) == 1 and checked[0] in seen_in[key] else \
                seen_in[key].describe(options)
    for finding in findings:
        finding.selection = {}
        finding.combinations = seen_in[finding.key()]
    findings.sort(key=lambda f: (f.file or "", f.line or 0, f.kind, f.tensor))
    ordered = grouped_findings(findings, merged, causes)
    for finding in ordered if verify else ():
        if finding.caused_by is None and finding.redeclare is not None:
            combo = seen_in[finding.key()].first() or checked[0]
            finding.hint = _offered(spec, finding, combo, ordered, provers, block_cache)
            if finding.operands and finding.hint.startswith("fix the equation ("):
                # the claim's own redeclaration moves the mismatch: a declaration the
                # equation reads, far from it, may be the one wrong
                finding.hint = _declaration_hint(spec, finding, combo, ordered, provers,
                                                 block_cache)
    for finding in ordered:
        if finding.caused_by is not None and finding.redeclare is not None:
            # its redeclaration is unchecked, and its cause's fix is its own
            root = finding.caused_by
            while root.caused_by is not None:
                root = root.caused_by
            finding.hint = f"fix the {root.kind} at line {root.line} first: this follows from it"
    return Result(spec, ordered, combos, rows, notes, given, lets)


def _values_only(spec: Spec, combos: ChoiceSpace, given: dict, proved: Result,
                 provers: dict) -> Result | None:
    """A variant's check at its sizes, where the proof under its choices found nothing: every
    claim holds for all sizes the constraints allow, so at sizes that meet the constraints
    (and make each derived dim a positive whole number) nothing is left to find. As a net
    under the prover, each tensor's shape the proof gives is evaluated at the sizes too: a
    positive whole number for every size it can evaluate. None (check in full) where the
    proof is not of this spec and choices or found something, or the sizes fail either."""
    if proved.spec is not spec or proved.findings or len(proved.combinations) != 1 or \
            proved.combinations[0] != combos[0]:
        return None
    run = Run(spec, combos[0], given, provers, {}, rows=False)
    if any(isinstance(s, Reused) for s in select(run.spec.body, run.choices)) or \
            run.check_constraints() or (run.constraints and not run.constraints_satisfiable()) \
            or run.findings:
        return None
    for let in run.lets:
        limits.reached(let)
        if run.prover.norm(let.expr).free_symbols and run.size_failure(
                let.expr, derived_whole=False) is not None:
            return None
    sizes = set()
    for row in proved.tensors:
        if row.shape is not None:
            sizes.update(row.shape.dims)
            if row.shape.family is not None:
                sizes.add(row.shape.family)
    for size in sizes:               # each size once (the tensors of a model share most)
        limits.tick()
        value = run.prover.norm(size)
        if value.is_number and not (value.is_Integer and value >= 1):
            return None
    return Result(spec, [], combos, proved.tensors, proved.notes, given, run.let_map)


def _declaration_hint(spec: Spec, finding: Finding, combo: dict, known: list,
                      provers: dict, block_cache: dict) -> str:
    """The hint of an equation whose claim's redeclaration would move the mismatch, and
    whose claim a tensor it reads would give, declared otherwise (``finding.operands``): that
    declaration and its line offered first where it is a fix (``_moved``: the spec with it
    has the finding no more and no other it had not); else the hint as ``_offered`` made it,
    the declaration still named, with its line."""
    for decl, shape, wrong in finding.operands:
        written = f'"{declaration(shape)}"'
        where = f" (line {decl.line})" if decl.line is not None else ""
        if not _moved(spec, finding, decl, wrong, combo, known, provers, block_cache):
            rest = finding.hint.removeprefix("fix the equation")
            return f"declare {decl.name}{where} as {written}, or fix the equation{rest}"
    decl, _, wrong = finding.operands[0]
    declared = f'"{declaration(decl.shape)}"'
    where = f" at line {decl.line}" if decl.line is not None else ""
    size = next(format_expr(d) for d in decl.shape.dims if d in wrong)
    return f"{finding.hint}; the equation's {size} comes from {decl.name}, declared{where} " \
        f"as {declared}"


def _moved(spec: Spec, finding: Finding, decl: TensorDecl, wrong: dict, combo: dict,
           known: list, provers: dict, block_cache: dict) -> list | None:
    """The spec with ``decl`` declared otherwise (each size of ``wrong`` put to its value),
    and every copy of it a block built ``from`` another holds, checked under ``combo``: None
    where it has the finding no more and no finding it had not (besides those that followed
    from this one), else the findings it has at the finding's place or new ones."""
    def amended(s):
        if isinstance(s, TensorDecl) and s.shape is not None and \
                (s.file, s.line, s.name, s.role) == (decl.file, decl.line, decl.name, decl.role):
            return replace(s, shape=Shape(tuple(wrong.get(d, d) for d in s.shape.dims),
                                          s.shape.family))
        return None

    still, moved = _rechecked(spec, finding, amended, combo, known, provers, block_cache)
    return still + moved if still or moved else None


def _rechecked(spec: Spec, finding: Finding, amended, combo: dict, known: list,
               provers: dict, block_cache: dict) -> tuple[list, list]:
    """The spec with each declaration ``amended`` gives another for (None: kept) checked
    under ``combo``, the blocks that hold one and those that call them again, the rest as
    they were: the findings it has at the finding's place (``still``), and those it has that
    the spec had not, besides what followed from this finding (``moved``)."""
    def swap(statements: list) -> list:
        return [replace(s, body=swap(s.body), otherwise=swap(s.otherwise))
                if isinstance(s, When) else amended(s) or s for s in statements]

    changed = {name for name, block in spec.blocks.items()
               if any(amended(s) for s in every_record(block.body)) or
               any(amended(d) for d in block.inputs)}
    amended_spec = replace(spec, body=swap(spec.body), blocks={
        name: replace(block, body=swap(block.body), inputs=swap(block.inputs))
        if name in changed else block for name, block in spec.blocks.items()})
    while True:
        callers = {name for name, block in spec.blocks.items()
                   if name not in changed and calls_in(block.body) & changed}
        if not callers:
            break
        changed |= callers
    kept = {key: value for key, value in block_cache.items() if key[0] not in changed}
    try:
        after = _check(amended_spec, combo, None, False, verify=False, provers=provers,
                       block_cache=kept).findings
    except SpecError:
        after = [finding]

    def root(f: Finding) -> Finding:
        while f.caused_by is not None:
            f = f.caused_by
        return f

    seen = {(f.kind, f.line, f.message) for f in known if root(f) is not finding}
    still = [f for f in after if (f.file, f.line, f.kind) ==
             (finding.file, finding.line, finding.kind)]
    moved = sorted((f for f in after if (f.kind, f.line, f.message) not in seen and
                    f not in still), key=place)
    return still, moved


def _offered(spec: Spec, finding: Finding, combo: dict, known: list, provers: dict,
             block_cache: dict) -> str:
    """A finding's hint, its redeclaration (declare the tensor as its equation gives it, or a
    state as its start) offered only where it is a fix: the spec with that declaration,
    checked under a combination the finding holds in, has the finding no more, nor any finding
    it had not or that followed from this one (a consequence left standing is the mistake
    moved). Else the hint says what the declaration would do."""
    decl, shape = finding.redeclare
    swapped = replace(decl, shape=shape)
    still, moved = _rechecked(spec, finding, lambda s: swapped if s is decl else None, combo,
                              known, provers, block_cache)
    if not still and not moved:
        return finding.hint
    written = f'"{declaration(shape)}"'
    # (where it goes elsewhere too, that line: a finding the new declaration makes at its
    # own line, a state that now grows without an update, says less of where it went)
    moved = [f for f in moved if f.line != finding.line] or moved
    effect = f"would move the mismatch to line {moved[0].line}" if moved else \
        "would not fix it"
    if decl.role == "state":
        return f"start {decl.name} from a tensor of its shape (declared {written}, it " \
               f"{effect})"
    return f"fix the equation (declaring {decl.name} as {written} {effect})"


def _partner(spec: Spec, fixed: dict) -> dict | None:
    """The other half of a model that decodes, where ``fixed`` sets decoding: ``{decoding:
    step}`` for a full model (its decoding step), ``{decoding: full}`` for a step (the prefill
    that starts its states); None where decoding is left open or the spec does not decode."""
    if not decodes(spec) or fixed.get(DECODING) not in (FULL, STEP):
        return None
    return {DECODING: STEP if fixed[DECODING] == FULL else FULL}


def _block_notes(spec: Spec, combo: dict) -> list[Note]:
    notes = []
    for block in spec.blocks.values():
        notes.extend(s for s in select(block.body, combo) if isinstance(s, Note))
    return notes
