"""One run of the checker: one spec under one combination of choices (and optional dim
values), its statements ordered by data flow and each record checked in its scope.
"""

import contextlib
from dataclasses import replace

import sympy

from tspec.checking import limits
from tspec.checking.calls import Calls
from tspec.checking.claims import Claims
from tspec.checking.constraints import Constraints
from tspec.checking.findings import Finding
from tspec.checking.order import check_let_cycles, topological
from tspec.checking.prove import Prover
from tspec.checking.scope import DECLARED, Checked, Fresh, Memo, Scope, TensorRow
from tspec.checking.ways import choices_used, start_names
from tspec.errors import LimitError, SpecError
from tspec.language.model import (
    BlockCall,
    Constraint,
    Equation,
    Flaw,
    Let,
    Note,
    Output,
    Reused,
    Spec,
    TensorDecl,
    Update,
    outputs,
    select,
    under,
)
from tspec.ops.base import Value
from tspec.symbolic.expr import MAX_DEGREE, derived_degrees


def _reused_finding(reused: Reused) -> Finding:
    """A name the source uses for different things: its own finding, whatever the sizes."""
    names = ", ".join(reused.names)
    return Finding(
        kind="name-reused", message=f"the source uses the name {reused.name} for different "
        f"things: {reused.text}", file=reused.file, line=reused.line,
        hint=f"give each its own name (this spec names them {names})" if len(reused.names) > 1
        else f"give each its own name (this spec keeps the one name {names}, so that the "
             "checker judges how its uses clash)")


class Run(Constraints, Claims, Calls):
    """Checks one spec under one combination of choices (and optional dim values)."""

    def __init__(self, spec: Spec, choices: dict, values: dict[str, int], provers: dict,
                 block_cache: dict, rows: bool = True, memo: Memo | None = None):
        spec = under(spec, choices)      # the blocks and tensors renamed under these choices
        self.spec = spec
        self.choices = choices
        self.values = values
        self.fresh = Fresh()
        self.block_cache = block_cache
        self.memo = Memo() if memo is None else memo   # shared by the runs of one check
        self.broken_lets: dict = {}   # derived dim -> the key of its finding, in this run
        self.want_rows = rows
        self.findings: list[Finding] = []
        self.unknowns: dict = {}      # fresh unknown widths -> what they were pinned to
        self.pending: list = []       # unstated shapes, reported once the run is done
        # for the decoding pass (``decoding_findings``): each state of a block, and each
        # tensor a state starts from, as (qualified name, decl or dtype, shape, selection)
        self.states: list = []
        self.starts: list = []
        self.state_choices: dict = {}   # id(a state's decl) -> the choices its block reads
        self.start_names = start_names(spec)
        self.outputs: tuple = ()
        self.output_causes: dict = {}   # output -> the finding that made its value doubtful
        self.active: list[str] = []   # blocks being checked, innermost last (for cycles)
        top = select(spec.body, choices)
        self.lets = [s for s in top if isinstance(s, Let)]
        self.constraints = [s for s in top if isinstance(s, Constraint)]
        self.notes = [s for s in top if isinstance(s, Note)]
        symbols = spec.symbols()
        seen_lets: dict[str, Let] = {}
        for let in self.lets:
            if let.dim in seen_lets:
                raise SpecError(f"dim {let.dim} is derived twice (first at line "
                                f"{seen_lets[let.dim].line})", file=let.file, line=let.line)
            if let.dim in values:
                raise SpecError(f"dim {let.dim} is derived (let {let.dim} = {let.text}) and "
                                "cannot also be given a value", file=let.file, line=let.line)
            seen_lets[let.dim] = let
        self.let_map = {symbols[let.dim]: let.expr for let in self.lets}
        check_let_cycles(self.lets, self.let_map, symbols)
        degrees = derived_degrees(self.let_map)
        for let in self.lets:
            found = degrees[symbols[let.dim]]
            if found > MAX_DEGREE:     # the prover refuses it too, without saying where
                raise LimitError(f"let {let.dim} = {let.text} has degree {found:,} in the dims "
                                 f"once the derived dims it uses are put in; the limit is "
                                 f"{MAX_DEGREE}", file=let.file, line=let.line)
        self.value_map = {symbols[name]: value for name, value in values.items()}
        key = (tuple(sorted((k.name, v) for k, v in self.let_map.items())),
               tuple(c.relation for c in self.constraints),
               tuple(sorted((k.name, v) for k, v in self.value_map.items())))
        if key not in provers:
            provers[key] = (Prover([d.symbol for d in spec.dims.values()],
                                   [c.relation for c in self.constraints], self.let_map,
                                   self.value_map), len(provers))
        # cache keys name the prover by a small number: hashing its whole key every lookup
        # would cost more than the lookups save
        self.prover, self.prover_key = provers[key]

    # -- helpers
    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    def used(self, decl: TensorDecl, record, failed: tuple | None) -> None:
        """A use of a declared tensor by a record (an operand of its ops, a block input bound
        at a call, a state updated) that fits its declared shape (``failed`` None) or does not
        (the key of its finding). A record fits when none of its claims fails."""
        decl = decl.written or decl          # a renamed block's, as the spec writes it
        uses = self.memo.use(decl)
        if failed is None:
            uses.fits[id(record)] = record.line
        else:
            uses.fails.setdefault(id(record), []).append(failed)

    # -- the run
    def run(self) -> list[TensorRow]:
        for reused in (s for s in select(self.spec.body, self.choices) if isinstance(s, Reused)):
            self.add(_reused_finding(reused))
        if self.check_constraints():
            # sizes that break a constraint are outside the spec: nothing more to evaluate
            return []
        if self.constraints and not self.constraints_satisfiable():
            return []
        for let in self.lets:
            limits.reached(let)
            if not self.prover.norm(let.expr).free_symbols:
                continue      # a value: check_constraints has judged it
            failure = self.size_failure(let.expr, derived_whole=False)
            if failure is None:
                continue
            kind, verdict, what = failure
            hint, suggested = self.size_hint(
                kind, let.expr, f"redefine {let.dim}: no constraint to add makes it {what} "
                "for every size the spec allows")
            self.add(Finding(
                kind="unproved" if verdict.unknown else kind,
                message=f"derived dim {let.dim} = {let.text} is not {what} for every "
                        "size the constraints allow",
                file=let.file, line=let.line, equation=f"let {let.dim} = {let.text}",
                counterexample=dict(verdict.counterexample) if verdict.counterexample
                else None, dims=self.dim_values(let.expr.free_symbols), hint=hint,
                suggested=suggested))
            self.broken_lets[self.spec.symbols()[let.dim]] = self.findings[-1].key()
        scope = Scope(self, "", {}, None)
        statements = select(self.spec.body, self.choices)
        self.check_body(scope, statements, [], outputs(self.spec, self.choices), "the model")
        # the model's outputs, for the decoding pass: (name, dtype, shape, where it says so)
        said = next((s for s in statements if isinstance(s, Output)), None)
        self.outputs = tuple(
            (name, scope.values[name].dtype, scope.resolve_shape(scope.values[name].shape),
             (said.file, said.line)) for name in outputs(self.spec, self.choices)
            if name in scope.values and scope.values[name].shape is not None)
        self.output_causes = {name: doubt.cause for name, doubt in scope.suspect.items()
                              if name in outputs(self.spec, self.choices)}
        rows = scope.rows
        if self.pending:
            reported = {}
            for entry in self.pending:
                if entry[0] not in reported:
                    reported[entry[0]] = self.report_unstated(*entry)
            rows = [replace(row, shape=scope.resolve_shape(row.shape)) if row.shape else row
                    for row in rows] + list(reported.values())
        return rows

    # -- bodies
    def structure(self, statements: list, inputs: list[TensorDecl], outputs: list[str],
                  where: str) -> tuple[dict, list]:
        """A body's declarations and its equations in data-flow order; errors for
        duplicates, undefined names and cycles."""
        decls: dict[str, TensorDecl] = {}
        producers: dict[str, Equation | BlockCall] = {}
        for decl in inputs:
            decls[decl.name] = decl
        for s in statements:
            if isinstance(s, TensorDecl):
                previous = decls.get(s.name)
                if previous is not None:
                    if previous.role in DECLARED and \
                            s.role in ("intermediate", "output"):
                        raise SpecError(f"{previous.role} {s.name} (line {previous.line}) "
                                        "cannot also be computed by an equation", file=s.file,
                                        line=s.line)
                    if previous.role in DECLARED or (previous.shape is not None
                                                               and s.shape is not None):
                        raise SpecError(f"tensor {s.name} is declared twice in {where} "
                                        f"(first at line {previous.line})", file=s.file,
                                        line=s.line)
                    if s.shape is None:
                        continue
                decls[s.name] = s
            elif isinstance(s, (Equation, BlockCall)) or isinstance(s, Flaw) and s.output:
                if s.output in producers:
                    raise SpecError(f"tensor {s.output} is defined twice in {where} (first at "
                                    f"line {producers[s.output].line})", file=s.file, line=s.line)
                if s.output in decls and decls[s.output].role in DECLARED:
                    raise SpecError(f"{decls[s.output].role} {s.output} cannot also be "
                                    "computed by an equation", file=s.file, line=s.line)
                producers[s.output] = s
        for name, record in producers.items():
            for used in record.inputs:
                if used not in decls and used not in producers:
                    raise SpecError(f"{name} uses {used}, which is not defined in {where} "
                                    f"under {_describe(self.choices)}", file=record.file,
                                    line=record.line)
                if used in decls and decls[used].role in ("intermediate", "output") and \
                        used not in producers:
                    raise SpecError(f"tensor {used} is declared but never computed in "
                                    f"{where}", file=decls[used].file, line=decls[used].line)
        updated: dict[str, Update] = {}
        for update in (s for s in statements if isinstance(s, Update)):
            if update.state in updated:
                raise SpecError(f"update {update.state} is given twice in {where} (first at "
                                f"line {updated[update.state].line}): a state has one next "
                                "value", file=update.file, line=update.line)
            updated[update.state] = update
            state = decls.get(update.state)
            if state is None or state.role != "state":
                raise SpecError(f"update {update.state}: {update.state} is not a state of "
                                f"{where} under {_describe(self.choices)} (declare it: state "
                                f"{update.state} \"shape\" from ...)", file=update.file,
                                line=update.line)
            if update.value not in producers:
                raise SpecError(f"update {update.state} = {update.value}: {update.value} is "
                                f"not computed in {where}", file=update.file, line=update.line)
        for name in outputs:
            if name not in producers and name not in decls:
                raise SpecError(f"output {name} is not defined in {where} under "
                                f"{_describe(self.choices)}", file=self.spec.file)
        order = topological(producers, where)
        return decls, order

    def check_body(self, scope: Scope, statements: list, inputs: list[TensorDecl],
                   outputs: list[str], where: str) -> None:
        # the declarations and data-flow order of a body depend only on its statements:
        # computed once per selection, not once per choice combination
        structure_key = (tuple(map(id, statements)), tuple(map(id, inputs)),
                         tuple(outputs))
        structure = self.memo.structures.get(structure_key)
        if structure is None:
            structure = self.memo.structures[structure_key] = self.structure(
                statements, inputs, outputs, where)
        decls, order = structure
        scope.decls = decls
        for flaw in (s for s in statements if isinstance(s, Flaw) and s.output is None):
            self.check_flaw(scope, flaw, None)
        for decl in decls.values():
            if decl.role in DECLARED:
                limits.reached(decl)
                shape = None if decl.shape is None else decl.shape.subs(scope.binding)
                scope.values[decl.name] = Value(shape, decl.dtype, tensor=decl.name)
                if shape is not None:
                    self.check_sizes(scope, decl, shape)
                if decl.unstated_family is not None:
                    scope.unstated_family[decl.name] = \
                        sympy.sympify(decl.unstated_family).xreplace(scope.binding)
                if decl.shape is not None:
                    scope.rows.append(TensorRow(scope.qualified(decl.name), decl.role, shape,
                                                decl.dtype, decl.meaning, True, "", decl.file,
                                                decl.line))
        binding_key = tuple(sorted((k.name, v) for k, v in scope.binding.items()))
        for record in order:
            limits.reached(record)
            declared = decls.get(record.output)
            # the same record with the same inputs under the same constraints gives the same
            # answer: remembered across choice combinations (not while widths are unknown)
            key = None
            suspects = [n for n in record.inputs if n in scope.suspect]
            if not self.fresh.symbols:
                blocks = choices_used(self.spec, record.block) \
                    if isinstance(record, BlockCall) else ()
                key = (id(record), tuple(scope.values[n] for n in record.inputs),
                       id(declared), self.prover_key, scope.prefix, binding_key,
                       tuple((c, self.choices.get(c)) for c in blocks), self.want_rows,
                       tuple(scope.suspect[n] for n in suspects))
                hit = self.memo.records.get(key)
                if hit is not None:
                    value, findings, rows, states, starts, suspect = hit
                    scope.values[record.output] = value
                    if suspect is not None:
                        scope.suspect[record.output] = suspect
                    self.findings.extend(findings)
                    scope.rows.extend(rows)
                    self.states.extend(states)
                    self.starts.extend(starts)
                    continue
            start, rows_start = len(self.findings), len(scope.rows)
            states_start, starts_start = len(self.states), len(self.starts)
            self.check_record(scope, record, declared)
            if suspects:
                self.follows(scope, record, declared, suspects, start, states_start,
                             starts_start)
            if key is not None and not self.fresh.symbols:
                self.memo.records[key] = Checked(
                    scope.values[record.output], self.findings[start:], scope.rows[rows_start:],
                    self.states[states_start:], self.starts[starts_start:],
                    scope.suspect.get(record.output))
        for update in (s for s in statements if isinstance(s, Update)):
            start = len(self.findings)
            self.check_update(scope, update, decls[update.state])
            doubt = scope.suspect.get(update.value)
            if len(self.findings) > start and doubt is not None:
                # the value an earlier finding made doubtful: where its other value fits,
                # what the update finds follows from that finding
                with self.aside(scope):
                    scope.values[update.value] = doubt.other
                    again = len(self.findings)
                    self.check_update(scope, update, decls[update.state])
                    clean = len(self.findings) == again
                if clean:
                    for finding in self.findings[start:]:
                        if finding.cause is None:
                            finding.cause = doubt.cause
            # an update is a use of the state's declared shape
            self.used(decls[update.state], update,
                      self.findings[start].key() if len(self.findings) > start else None)
        for name, shape in scope.unstated.items():
            # reported at the end of the run: a caller may still pin these widths down
            decl = decls[name]
            if decl.implied is not None and scope.binding:
                decl = replace(decl, implied=decl.implied.subs(scope.binding))
            self.pending.append((scope.qualified(name), decl, shape,
                                 scope.unstated_like.get(name), {}))
        for name, decl in decls.items():
            if decl.role in DECLARED and decl.shape is None and name not in scope.unstated:
                # never used, so nothing tells its shape; generated code still needs one
                self.pending.append((scope.qualified(name), decl, None, None, {}))
            if decl.role == "state":
                # whether the block writes it follows the choices the block reads
                self.state_choices[id(decl)] = () if scope.block is None else \
                    choices_used(self.spec, scope.block.name)
                self.states.append((scope.qualified(name), decl,
                                    scope.resolve_shape(decl.shape.subs(scope.binding)), {},
                                    None))
        for record in order:
            if record.output in self.start_names:
                value = scope.values[record.output]
                doubt = scope.suspect.get(record.output)
                # a start an earlier finding made doubtful: its other shape, and the finding
                other = None if doubt is None or doubt.other.shape is None else \
                    (scope.resolve_shape(doubt.other.shape), doubt.cause)
                self.starts.append((scope.qualified(record.output), value.dtype,
                                    None if value.shape is None else
                                    scope.resolve_shape(value.shape), {}, other))

    def check_record(self, scope: Scope, record, declared: TensorDecl | None) -> None:
        if isinstance(record, Equation):
            self.check_equation(scope, record, declared)
        elif isinstance(record, Flaw):
            self.check_flaw(scope, record, declared)
        else:
            self.check_call(scope, record, declared)

    def check_flaw(self, scope: Scope, flaw: Flaw, declared: TensorDecl | None) -> None:
        """A statement that cannot stand under these choices: its finding. The tensor it would
        compute keeps its declared shape, which later equations go on from."""
        self.add(Finding(kind=flaw.kind, message=flaw.message, file=flaw.file, line=flaw.line,
                         equation=f"{flaw.output} = {flaw.text}" if flaw.output else flaw.text,
                         tensor=scope.qualified(flaw.output) if flaw.output else "",
                         hint=flaw.hint))
        if flaw.output is not None:
            known = declared is not None and declared.shape is not None
            shape = declared.shape.subs(scope.binding) if known else None
            dtype = declared.dtype if declared is not None else "float"
            scope.values[flaw.output] = Value(shape, dtype, tensor=flaw.output)
            scope.rows.append(TensorRow(
                scope.qualified(flaw.output), declared.role if declared else "intermediate",
                shape, dtype, declared.meaning if declared else "", known,
                f"{flaw.output} = {flaw.text}", flaw.file, flaw.line))

    def follows(self, scope: Scope, record, declared: TensorDecl | None, suspects: list,
                start: int, states_start: int, starts_start: int) -> None:
        """A record that reads tensors an earlier finding made doubtful (``scope.suspect``) is
        checked again with the other value of each. Where that finds nothing, each of its
        findings follows from the earlier one (its ``cause``); where its value differs, its
        value is doubtful too, for the same cause (a chain of consequences, each beneath the
        first cause).

        Each first cause is tried alone: the tensors it made doubtful (itself or through the
        findings that follow from it) take their other value, the rest keep theirs. A finding
        follows from it only where it disappears so (what fixing that cause changes), not
        where it takes another cause's fix too."""
        found = self.findings[start:]
        value = scope.values[record.output]
        # the tensors each first cause made doubtful (through findings that follow from it)
        # take their other values together: fixing it changes them all
        causes = {f.key(): f.cause for f in self.findings[:start] if f.cause is not None}

        def root(key: tuple) -> tuple:
            seen = {key}
            while causes.get(key) is not None and causes[key] not in seen:
                key = causes[key]
                seen.add(key)
            return key

        by_cause: dict = {}
        for name in suspects:
            by_cause.setdefault(root(scope.suspect[name].cause), []).append(name)
        for names in by_cause.values():
            doubt = scope.suspect[names[0]]
            with self.aside(scope):
                for name in names:
                    scope.values[name] = scope.suspect[name].other
                alternative = len(self.findings)
                kept = len(self.states), len(self.starts)
                try:
                    self.check_record(scope, record, declared)
                    clean = len(self.findings) == alternative
                    other = scope.values[record.output]
                    otherwise = self.states[kept[0]:], self.starts[kept[1]:]
                except SpecError:           # the other value breaks an op outright
                    clean, other, otherwise = False, value, None
            if otherwise is not None:
                self.alternatives(states_start, starts_start, *otherwise, doubt.cause)
            if clean != (not found) and names == [doubt.tensor]:
                # a use that fits one of the two alone: the claim, or what the equation
                # gives
                self.memo.evidence.setdefault(doubt.cause, {}).setdefault(
                    "claim" if clean == doubt.declared else "equation", set()).add(
                    record.line)
            if clean:
                for finding in found:
                    if finding.cause is None:
                        finding.cause = doubt.cause
            if record.output not in scope.suspect and other.shape != value.shape:
                scope.suspect[record.output] = doubt._replace(other=other)

    def alternatives(self, states_start: int, starts_start: int, states: list, starts: list,
                     cause: tuple) -> None:
        """The states and starts recorded since the given places, each marked with the shape
        it has in a check with an earlier finding's tensors at their other value (``states``
        and ``starts`` of that check), where that differs: the decoding pass judges them
        with it too (see ``_started_otherwise``)."""
        for kept, first, other in ((self.states, states_start, states),
                                   (self.starts, starts_start, starts)):
            shapes = {(entry[0], tuple(entry[3].items())): entry[2] for entry in other}
            for index in range(first, len(kept)):
                entry = kept[index]
                shape = shapes.get((entry[0], tuple(entry[3].items())))
                if entry[4] is None and shape is not None and shape != entry[2]:
                    kept[index] = entry[:4] + ((shape, cause),)

    @contextlib.contextmanager
    def aside(self, scope: Scope):
        """A check whose findings, rows, values, pinned widths and the states and starts it
        records for the decoding pass are all undone after it."""
        findings, rows, pending = len(self.findings), len(scope.rows), len(self.pending)
        states, starts = len(self.states), len(self.starts)
        values, suspect = dict(scope.values), dict(scope.suspect)
        unknowns, fresh = dict(self.unknowns), set(self.fresh.symbols)
        unstated, like = dict(scope.unstated), dict(scope.unstated_like)
        equation, node = scope.equation, scope.node
        try:
            yield
        finally:
            del self.findings[findings:]
            del scope.rows[rows:]
            del self.pending[pending:]
            del self.states[states:]
            del self.starts[starts:]
            for now, then in ((scope.values, values), (scope.suspect, suspect),
                              (self.unknowns, unknowns), (scope.unstated, unstated),
                              (scope.unstated_like, like)):
                now.clear()
                now.update(then)
            self.fresh.symbols.clear()
            self.fresh.symbols.update(fresh)
            scope.equation, scope.node = equation, node


def _describe(choices: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in choices.items()) or "the spec as written"
