"""The checker: proves every shape in a spec for all sizes the constraints allow.

For each combination of choices it selects the statements in force, orders the equations by
their data flow (a cycle is an error), infers each equation's output shape from its inputs'
*declared* shapes through the op rules, and proves the result equal to the declared shape.
Block calls bind the block's local dims by matching its inputs (``T_q = T_dec``), then check
the body once per binding. Every claim that fails becomes a ``Finding`` with a counterexample;
given dim values (a variant), the same run also evaluates every shape and constraint.
"""

import collections
import contextlib
import difflib
import functools
import math
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import sympy

from tspec.checking import limits
from tspec.checking.coverage import ChoiceSpace, Cover
from tspec.checking.findings import Finding, format_value, grouped
from tspec.checking.limits import TIME_LIMIT, require_tensor_count
from tspec.checking.prove import SEARCH_MAX, Prover, Verdict, evaluate, is_whole
from tspec.errors import LimitError, SpecError
from tspec.language.flow import calls_at, fed_by
from tspec.language.model import (
    DECODING,
    FULL,
    NEW,
    PAST,
    STEP,
    Block,
    BlockCall,
    Constraint,
    Equation,
    Flaw,
    Let,
    Note,
    OpNode,
    Output,
    Reused,
    ScalarExpr,
    Spec,
    TensorDecl,
    TensorRef,
    Update,
    When,
    decodes,
    every_record,
    model_inputs,
    outputs,
    prompt_dims,
    select,
    selections,
    tensor_names,
    under,
)
from tspec.ops.base import Value, join_family
from tspec.ops.catalogue import OPS
from tspec.symbolic.expr import MAX_DEGREE, derived_degrees, dim_text
from tspec.symbolic.shape import Shape, format_expr

DECLARED = ("input", "param", "state")   # roles given, not computed by an equation
NEAREST_WINDOW = 4096     # how far to look for valid values near a violating one


@dataclass
class TensorRow:
    """One tensor in the resolved model, for shape tables, docs and code generation."""
    name: str                 # qualified: encoder.layers[i].self_attention.S_h
    role: str
    shape: Shape | None       # the declared shape, or the inferred one when none is declared
    dtype: str
    meaning: str
    declared: bool
    equation: str = ""
    file: str | None = None
    line: int | None = None


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


class _Fresh:
    """Fresh symbols for the dims of parameters whose shape a spec left unstated."""

    def __init__(self):
        self.count = 0
        self.symbols: set = set()

    def __call__(self) -> sympy.Symbol:
        self.count += 1
        symbol = sympy.Symbol(f"_k{self.count}", integer=True, positive=True)
        self.symbols.add(symbol)
        return symbol


class _Doubt(NamedTuple):
    """A tensor whose value a refuted claim made doubtful: later equations go on from one of
    the claim and what the equation gives; ``other`` is the other one."""
    other: Value
    cause: tuple            # the key of the claim's finding
    declared: bool          # whether ``other`` is the claim
    tensor: str             # the tensor whose claim it is


class _Scope:
    """One body being checked: the model, or one block under one binding of its local dims."""

    def __init__(self, checker: "_Run", prefix: str, binding: dict, block: Block | None):
        self.checker = checker
        self.prefix = prefix
        self.binding = binding            # local dim symbol -> expression
        self.block = block
        self.values: dict[str, Value] = {}
        self.unstated: dict[str, Shape] = {}     # param -> shape with fresh unknowns
        self.unstated_like: dict[str, Shape] = {}   # param -> the shape it broadcasts against
        self.unstated_family: dict = {}             # param -> family size, when declared
        self.unknowns = checker.unknowns         # fresh unknown -> what it was bound to
        self.rows: list[TensorRow] = []
        self.equation = None                     # the record being checked, for findings
        self.node = None
        self.decls: dict[str, TensorDecl] = {}   # the body's declarations, for hints
        # tensors whose value an earlier finding made doubtful, see _Run.follows
        self.suspect: dict[str, _Doubt] = {}

    # -- the Context protocol of spec.ops
    def resolve(self, expr):
        expr = sympy.sympify(expr)
        for _ in range(8):
            updated = expr.xreplace(self.unknowns)
            if updated == expr:
                break
            expr = updated
        return expr

    def equal(self, a, b, what, broadcast=False):
        a, b = self.resolve(a), self.resolve(b)
        fresh = self.checker.fresh.symbols
        if a in fresh and a != b:
            self.unknowns[a] = b
            return b
        if b in fresh and a != b:
            self.unknowns[b] = a
            return a
        verdict = self.checker.prover.equal(a, b, broadcast=broadcast)
        if not verdict.proved:
            self.report_claim("operand-mismatch", verdict, f"{what}: {format_expr(a)} vs "
                              f"{format_expr(b)}", [a, b],
                              hint=_operand_hint(what, a, b, self.declared_operands()))
        failed = None if verdict.proved else self.checker.findings[-1].key()
        # each declared tensor the op reads, itself or transposed (E.T), whose shape has one
        # of the two: a use that fits it or not (one the op reads through another op, W in
        # X @ W + b, is judged there)
        viewed = (_viewed(term) for term in getattr(self.node, "args", ()))
        for decl in self.declared_read(tuple(t for t in viewed if isinstance(t, TensorRef))):
            shape = self.resolve_shape(self.values[decl.name].shape)
            if {a, b} & set(shape.dims + (shape.family,)):    # a dim it declares
                self.checker.used(decl, self.equation, failed)
        return a

    def declared_read(self, terms: tuple) -> list[TensorDecl]:
        """The declared tensors (inputs, parameters, states) these terms read, themselves or
        through ops; a block's input is judged by its calls (see bind), not by its body.
        (Remembered for each body's terms, which every choice combination reads alike.)"""
        cache = self.checker.record_cache
        key = ("read", tuple(map(id, terms)), id(self.decls))
        found = cache.get(key)
        if found is None:
            names = dict.fromkeys(n for term in terms for n in tensor_names(term))
            found = cache[key] = [
                decl for decl in map(self.decls.get, names)
                if decl is not None and decl.role in DECLARED and decl.shape is not None and
                (self.block is None or decl not in self.block.inputs)]
        return found

    def divides(self, divisor, n, what):
        divisor, n = self.resolve(divisor), self.resolve(n)
        verdict = self.checker.prover.divides(divisor, n)
        if not verdict.proved:
            relation = sympy.Eq(sympy.Mod(n, divisor), 0, evaluate=False)
            hint, suggested = self.checker.constraint_hint(
                relation, ("divides", divisor, n),
                f"check that the equation divides {format_expr(n)} by the count it means, "
                f"and the declared shapes of {self.declared_operands()}")
            self.report_claim("not-divisible", verdict,
                              f"{what}: {format_expr(divisor)} must divide {format_expr(n)}",
                              [divisor, n], hint=hint, suggested=suggested)
            self.checker.findings[-1].claim = (self.checker.prover, ("divides", divisor, n))

    def at_most(self, a, b, what):
        a, b = self.resolve(a), self.resolve(b)
        verdict = self.checker.prover.at_most(a, b)
        if not verdict.proved:
            relation = sympy.LessThan(a, b, evaluate=False)
            hint, suggested = self.checker.constraint_hint(
                relation, ("at_most", a, b), self.range_advice(a, b, what))
            self.report_claim("out-of-range", verdict,
                              f"{what}: {format_expr(a)} must not exceed {format_expr(b)}",
                              [a, b], hint=hint, suggested=suggested)
            self.checker.findings[-1].claim = (self.checker.prover, ("at_most", a, b))
            table = self.table() if suggested is None and what.endswith("vs table length") \
                else None
            if table is not None:
                # no constraint fixes it: a use of the table its rows do not cover
                self.checker.used(table, self.equation, self.checker.findings[-1].key())

    def table(self) -> TensorDecl | None:
        """The declared table the op being checked takes rows or entries of, if any."""
        node = self.node
        if isinstance(node, OpNode) and node.args and isinstance(node.args[0], TensorRef):
            found = self.declared_read((node.args[0],))
            return found[0] if found else None
        return None

    def declared_operands(self) -> str:
        """The tensors the op being checked reads, each with the line that declares it:
        ``X (line 5) and W (line 6)``."""
        names = []
        for term in getattr(self.node, "args", ()):
            names += [n for n in tensor_names(term) if n not in names]
        shown = [f"{n} (line {self.decls[n].line})" if n in self.decls and
                 self.decls[n].line is not None else n for n in names]
        return " and ".join(shown) if len(shown) < 3 else \
            ", ".join(shown[:-1]) + " and " + shown[-1]

    def range_advice(self, a, b, what: str) -> str:
        """What to do about ``a <= b`` when no constraint is the fix: for the rows taken from
        a declared table, its declaration; else the sizes the equation passes."""
        node = self.node
        if what.endswith("vs table length") and isinstance(node, OpNode) and \
                isinstance(node.args[0], TensorRef):
            table = node.args[0].name
            decl = self.decls.get(table)
            where = f" (line {decl.line})" if decl is not None and decl.line is not None \
                else ""
            if node.op == "relative_position_bias":
                return (f"declare {table}{where} with an entry for every relative offset it "
                        f"serves: its {format_expr(b)} entries do not cover the "
                        f"{format_expr(a)} needed")
            return (f"declare {table}{where} with a row for every position it serves: its "
                    f"{format_expr(b)} rows do not cover {format_expr(a)}")
        if what.startswith("slice start (rows skipped)"):
            return (f"the slice's start {format_expr(b)} must be at least 0 for every size "
                    "the spec allows: check it")
        if what.startswith("slice start vs stop"):
            return (f"the slice's stop {format_expr(b)} must be past its start "
                    f"{format_expr(a - 1)} for every size the spec allows: check both")
        if "queries (the last positions of the keys) vs keys" in what:
            return (f"the queries ({format_expr(a)}) are the last positions of the keys "
                    f"({format_expr(b)}), so never more: check the lengths the equation "
                    "passes, queries first")
        return (f"{format_expr(a)} can exceed {format_expr(b)} for sizes the spec allows: "
                "check the sizes the equation passes")

    def resolve_shape(self, shape: Shape) -> Shape:
        if not self.unknowns:
            return shape
        family = None if shape.family is None else self.resolve(shape.family)
        return Shape(tuple(self.resolve(d) for d in shape.dims), family)

    def shape(self, value: Value, rank: int, role: str, like: Shape | None = None) -> Shape:
        name = value.tensor
        if value.shape is None and name not in self.unstated:
            self.unstated[name] = Shape(tuple(self.checker.fresh() for _ in range(rank)),
                                        self.unstated_family.get(name))
        if name in self.unstated and like is not None and name not in self.unstated_like \
                and like.rank > self.unstated[name].rank:
            self.unstated_like[name] = like
        return self.resolve_shape(self.unstated[name] if value.shape is None else value.shape)

    def error(self, message: str) -> SpecError:
        node = self.node or self.equation
        return SpecError(f"{self.qualified(self.equation.output)}: {message}",
                         file=self.equation.file, line=getattr(node, "line", None))

    # -- findings
    def qualified(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def report_claim(self, kind: str, verdict: Verdict, message: str, exprs: list,
                     hint: str = "", expected: str | None = None,
                     inferred: str | None = None, suggested=None) -> None:
        if verdict.unknown:
            kind = "unproved"
            message += f" (not proved, and no counterexample with every dim up to {SEARCH_MAX})"
        self.finding(kind, message, verdict, exprs, hint, expected, inferred, suggested)

    def finding(self, kind, message, verdict: Verdict | None, exprs, hint="", expected=None,
                inferred=None, suggested=None):
        record = self.equation
        symbols = set()
        for e in exprs:
            symbols |= sympy.sympify(e).free_symbols
        # a claim over a derived dim that is not a whole number (or not positive) is beyond
        # the prover, which assumes derived dims whole: it follows from the derived dim's
        broken = self.checker.broken_lets
        cause = next((broken[s] for s in sorted(symbols, key=str) if s in broken), None) \
            if kind == "unproved" else None
        self.checker.add(Finding(
            kind=kind, message=message, file=record.file, line=record.line,
            equation=f"{record.output} = {record.text}" if record.text else "",
            tensor=self.qualified(record.output), expected=expected, inferred=inferred,
            counterexample=dict(verdict.counterexample) if verdict and verdict.counterexample
            else None,
            dims=self.checker.dim_values(symbols), hint=hint, suggested=suggested,
            cause=cause))


def _simplest(relation):
    """``a <= b`` with what both sides share divided out and each term on the side where it
    is positive: ``2*T_dec - 1 <= 2*max_len - 1`` is ``T_dec <= max_len`` (the same sizes
    meet it: every coefficient, the constant's too, is divided by their common factor)."""
    if not isinstance(relation, sympy.LessThan):
        return relation
    slack = sympy.expand(relation.rhs - relation.lhs)
    terms = sympy.Add.make_args(slack)
    coefficients = [term.as_coeff_Mul()[0] for term in terms]
    if slack == 0 or not all(c.is_Integer for c in coefficients):
        return relation
    common = functools.reduce(math.gcd, (abs(int(c)) for c in coefficients))
    terms = [term / common for term in terms]
    large = sympy.Add(*(t for t in terms if t.as_coeff_Mul()[0] > 0))
    small = -sympy.Add(*(t for t in terms if t.as_coeff_Mul()[0] < 0))
    return sympy.LessThan(small, large, evaluate=False)


def _whole_polynomial(expr) -> bool:
    """Whether ``expr`` is a polynomial in its dims with whole coefficients (whole wherever
    they are)."""
    symbols = sorted(expr.free_symbols, key=str)
    if not symbols or not expr.is_polynomial(*symbols):
        return False
    return all(c.is_Integer for c in sympy.Poly(expr, *symbols).coeffs())


def _unbound(shape: Shape, binding: dict) -> Shape:
    """A shape in a block's terms: each size a call bound one local dim to (alone) written as
    that dim."""
    values = list(binding.values())
    back = {value: local for local, value in binding.items() if values.count(value) == 1}
    if not back:
        return shape
    family = None if shape.family is None else back.get(shape.family, shape.family)
    return Shape(tuple(back.get(d, d) for d in shape.dims), family)


def _viewed(term):
    """The tensor a term is a view of (E in E.T), or the term."""
    while isinstance(term, OpNode) and term.op == "transpose":
        term = term.args[0]
    return term


def _operand_hint(what: str, a, b, declared: str) -> str:
    shapes = f"the declared shapes of {declared}" if declared else "the declared shapes"
    if what.startswith("matmul inner"):
        return ("the last axis of the left operand must equal the second-to-last of the "
                f"right: check {shapes}, or transpose one")
    if "family" in what:
        return f"both operands must be families of the same size: check {shapes}"
    if what.startswith(("layer_norm", "rms_norm")):
        return ("a normalisation's gain and bias have the width of its input's last axis: "
                f"check {shapes}")
    return (f"{format_expr(a)} and {format_expr(b)} must be the same size (or one of them 1, "
            f"to broadcast): check {shapes}")


def _reused_finding(reused: Reused) -> Finding:
    """A name the source uses for different things: its own finding, whatever the sizes."""
    names = ", ".join(reused.names)
    return Finding(
        kind="name-reused", message=f"the source uses the name {reused.name} for different "
        f"things: {reused.text}", file=reused.file, line=reused.line,
        hint=f"give each its own name (this spec names them {names})" if len(reused.names) > 1
        else f"give each its own name (this spec keeps the one name {names}, so that the "
             "checker judges how its uses clash)")


class _Run:
    """Checks one spec under one combination of choices (and optional dim values)."""

    def __init__(self, spec: Spec, choices: dict, values: dict[str, int], provers: dict,
                 block_cache: dict, rows: bool = True, record_cache: dict | None = None):
        spec = under(spec, choices)      # the blocks and tensors renamed under these choices
        self.spec = spec
        self.choices = choices
        self.values = values
        self.fresh = _Fresh()
        self.block_cache = block_cache
        self.record_cache = {} if record_cache is None else record_cache
        # each declared tensor's uses, over every run: id(decl) -> [decl, the records whose
        # claims about it hold, record -> the keys of the findings of those that fail]
        self.uses = self.record_cache.setdefault(("uses",), {})
        # what later equations say of a refuted claim, over every run: the key of its finding
        # -> {"claim": lines of uses that fit the declared shape alone, "equation": lines of
        # uses that fit what the equation gives alone}
        self.evidence = self.record_cache.setdefault(("evidence",), {})
        self.broken_lets: dict = {}   # derived dim -> the key of its finding, in this run
        self.want_rows = rows
        self.findings: list[Finding] = []
        self.unknowns: dict = {}      # fresh unknown widths -> what they were pinned to
        self.pending: list = []       # unstated shapes, reported once the run is done
        # for the decoding pass (``_decoding_findings``): each state of a block, and each
        # tensor a state starts from, as (qualified name, decl or dtype, shape, selection)
        self.states: list = []
        self.starts: list = []
        self.state_choices: dict = {}   # id(a state's decl) -> the choices its block reads
        self.start_names = _start_names(spec)
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
        _check_let_cycles(self.lets, self.let_map, symbols)
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
        entry = self.uses.setdefault(id(decl), [decl, {}, {}])
        if failed is None:
            entry[1][id(record)] = record.line
        else:
            entry[2].setdefault(id(record), []).append(failed)

    def constraint_hint(self, relation, claim: tuple, otherwise: str) -> tuple[str, object]:
        """The hint for a claim a constraint could settle, and the constraint it suggests:
        ``add the constraint `require ...``` when ``relation`` is a fix (see ``offers``),
        else ``otherwise`` and None. The relation is suggested in its simplest form."""
        relation = _simplest(relation)
        if self.offers(relation, claim):
            return f"add the constraint `require {dim_text(relation)}`", relation
        return otherwise, None

    def offers(self, relation, claim: tuple) -> bool:
        """Whether adding ``relation`` as a constraint fixes ``claim`` (a Prover method's name
        and arguments): it must not merely bound or tie the sizes of the model's inputs
        (``require T <= T_dec`` or ``require 3 <= T`` would hide a mistake, not fix it; that an
        input's width be divisible, ``require d % 2 == 0``, is a fix), some sizes the spec allows
        must meet it together with every other constraint (a witness from the prover's
        search), and under it the claim must be proved."""
        if not isinstance(relation, sympy.core.relational.Relational) or (
                relation.free_symbols <= _input_dims(self.spec) and
                not _divisibility(relation)):
            return False
        key = ("offers", self.prover_key, relation, claim)
        answer = self.record_cache.get(key)
        if answer is None:
            prover = Prover(self.prover.dims, self.prover.constraints + [relation],
                            self.prover.lets, self.prover.values)
            method, *args = claim
            # cheapest first: the claim under it, linear infeasibility (T + T_past <= T
            # would otherwise exhaust the search), then the search for a witness
            try:
                answer = getattr(prover, method)(*args).proved and \
                    not prover._linear_infeasible() and prover.satisfiable() == "yes"
            except TypeError:
                # the prover's slack method compares 0/0 for a fact with no linear term in
                # the claim's first dim (H*H + d >= 3): no proof, so nothing offered
                answer = False
            self.record_cache[key] = answer
        return answer

    def dim_values(self, symbols: set) -> dict:
        """The values of the dims involved, where the run has them (a variant)."""
        if not self.value_map:
            return {}
        out = {}
        for symbol in sorted(symbols, key=str):
            if symbol in self.prover.substitution or symbol in self.value_map:
                value = self.prover.norm(symbol)
                if value.is_number:
                    out[str(symbol)] = int(value) if value.is_Integer else str(value)
        return out

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
        scope = _Scope(self, "", {}, None)
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

    def constraints_satisfiable(self) -> bool:
        """Whether some sizes meet every constraint; where none do, or none are found, that
        is reported (every claim would hold vacuously) and the answer is False."""
        answer = self.prover.satisfiable()
        if answer == "yes":
            return True
        first = self.constraints[0]
        listed = "; ".join(f"`require {c.text}` (line {c.line})" for c in self.constraints)
        # the derived dims over the constraints' dims, each of which must be a whole number
        # >= 1 too (as the prover requires): one of them may be what no size satisfies
        dims = set().union(*(f.free_symbols for f in self.prover.facts))
        derived = [let for let in self.lets
                   if 0 < len(over := self.prover.norm(let.expr).free_symbols) and over <= dims]
        listed += "".join(f"; `let {let.dim} = {let.text}` (line {let.line})"
                          for let in derived)
        what = "constraint and derived dim (each a whole number >= 1)" if derived else \
            "constraint"
        redefine = ", or redefine a derived dim" if derived else ""
        if answer == "no":
            message = f"no sizes satisfy every {what}: {listed}"
        else:
            message = f"no sizes found that satisfy every {what} ({listed}), and none proved " \
                "to exist"
        self.add(Finding(kind="unsatisfiable" if answer == "no" else "unproved",
                         message=message, file=first.file, line=first.line,
                         equation=f"require {first.text}",
                         hint=f"remove or relax a constraint{redefine}: a spec no size "
                              "satisfies proves nothing"))
        return False

    def check_constraints(self) -> int:
        """With dim values given, report each constraint they break, then each derived dim
        they leave undefined or fractional; returns how many problems."""
        if not self.value_map:
            return 0
        broken = 0
        symbols = self.spec.symbols()
        given = {symbols[n]: v for n, v in self.values.items()}
        full = dict(given)
        undefined = []
        known = set(given)
        order = {name: index for index, name in enumerate(symbols)}
        for let in self.lets:
            symbol = symbols[let.dim]
            expr = self.let_map[symbol]
            if expr.free_symbols - known:
                continue
            try:
                value = evaluate(expr, given)
            except ZeroDivisionError:
                undefined.append((let, "undefined (a division by zero)"))
                continue
            full[symbol] = value
            if not is_whole(value):
                undefined.append((let, f"{format_value(value)}, not a positive whole number"))
        known = set(full)
        for constraint in self.constraints:
            relation = constraint.relation
            if not relation.free_symbols <= known:
                continue
            try:
                holds = evaluate(relation, full)
            except ZeroDivisionError:
                holds = False
            if holds:
                continue
            broken += 1
            involved = sorted(relation.free_symbols, key=lambda s: order.get(str(s), 0))
            self.add(Finding(
                kind="constraint-violated",
                message=_violation_message(relation, full),
                file=constraint.file, line=constraint.line,
                equation=f"require {constraint.text}",
                dims={str(s): _plain(full[s]) for s in involved}, scope="variant",
                hint=self.nearest_hint(involved, given)))
        if broken:
            return broken
        for let, problem in undefined:
            involved = sorted(self.let_map[symbols[let.dim]].free_symbols, key=str)
            self.add(Finding(
                kind="not-integral",
                message=f"derived dim {let.dim} = {let.text} is {problem} for "
                        + ", ".join(f"{s}={given[s]}" for s in involved),
                file=let.file, line=let.line, equation=f"let {let.dim} = {let.text}",
                dims={str(s): given[s] for s in involved}, scope="variant",
                hint=self.nearest_hint(involved, given)))
        return len(undefined)

    def nearest_hint(self, involved: list, given: dict) -> str:
        """Valid values near the given ones, one dim at a time, others held fixed.

        A candidate is judged by the constraints and derived dims that hold at the given
        values, and by those the dim takes part in: one that fails whatever this dim is (a
        second broken constraint) is no reason to refuse a candidate."""
        parts = []
        order = sorted((s for s in involved if s in given),
                       key=lambda s: (0 if s in self.divisors() else 1, str(s)))
        for symbol in order:
            value = given[symbol]
            below = next((v for v in range(value - 1, max(0, value - NEAREST_WINDOW), -1)
                          if self.valid(given, symbol, v)), None)
            above = next((v for v in range(value + 1, value + NEAREST_WINDOW)
                          if self.valid(given, symbol, v)), None)
            near = [str(v) for v in (below, above) if v is not None]
            if near:
                parts.append(f"valid {symbol} near {value}: {', '.join(near)}")
            else:
                parts.append(f"no valid {symbol} within {NEAREST_WINDOW - 1} of {value} with "
                             "the other dims held")
        return "; ".join(parts)

    def divisors(self) -> set:
        """The dims some constraint divides by (``require d_model % H == 0``: H), once a run."""
        if getattr(self, "_divisors", None) is None:
            self._divisors = {c.relation.lhs.args[1] for c in self.constraints
                              if isinstance(c.relation, sympy.Eq) and
                              isinstance(c.relation.lhs, sympy.Mod)}
        return self._divisors

    def valid(self, given: dict, symbol, value: int) -> bool:
        """Whether ``symbol = value``, the other dims as given, leaves every derived dim and
        constraint ``symbol`` takes part in whole and holding (one it takes no part in fails
        or holds whatever its value: no reason to refuse a value). Only those are evaluated:
        a candidate costs what its dim takes part in, not the whole spec."""
        direct, baseline, dependents = self.dependents(given)
        known = self._valid.get((symbol, value))       # a dim in many constraints: once
        if known is not None:
            return known
        self._valid[symbol, value] = answer = self._judged(direct, baseline, dependents,
                                                           symbol, value)
        return answer

    @staticmethod
    def _judged(direct: dict, baseline: dict, dependents: dict, symbol, value: int) -> bool:
        lets, constraints = dependents.get(symbol, ((), ()))
        at = {symbol: value}
        values = collections.ChainMap(at, baseline)
        for let in lets:
            try:
                at[let] = evaluate(direct[let], values)
            except ZeroDivisionError:
                return False
            if not is_whole(at[let]):
                return False
        for constraint in constraints:
            relation = constraint.relation
            if not all(s in values for s in relation.free_symbols):
                continue        # through a derived dim left undefined: not judged
            try:
                if not evaluate(relation, values):
                    return False
            except ZeroDivisionError:
                return False
        return True

    def dependents(self, given: dict) -> tuple[dict, dict, dict]:
        """For the given values (worked out once): the derived dims defined from given dims
        alone, every value at hand (given and those derived dims that are defined), and for
        each given dim the derived dims and the constraints it takes part in (directly or
        through such a derived dim; a constraint over other derived dims is never judged)."""
        if getattr(self, "_dependents", (None,))[0] is not given:
            known = set(given)
            direct = {s: e for s, e in self.let_map.items() if e.free_symbols <= known}
            baseline = dict(given)
            found: dict = {}
            for let, expr in direct.items():
                try:
                    baseline[let] = evaluate(expr, given)
                except ZeroDivisionError:
                    pass
                for base in expr.free_symbols:
                    found.setdefault(base, ([], []))[0].append(let)
            known |= set(direct)
            for constraint in self.constraints:
                free = constraint.relation.free_symbols
                if free <= known:
                    bases = set().union(*(direct[s].free_symbols if s in direct else {s}
                                          for s in free))
                    for base in bases:
                        found.setdefault(base, ([], []))[1].append(constraint)
            self._dependents = (given, (direct, baseline, found))
            self._valid: dict = {}         # (dim, value) -> whether valid, as judged
        return self._dependents[1]

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

    def check_body(self, scope: _Scope, statements: list, inputs: list[TensorDecl],
                   outputs: list[str], where: str) -> None:
        # the declarations and data-flow order of a body depend only on its statements:
        # computed once per selection, not once per choice combination
        structure_key = ("structure", tuple(map(id, statements)), tuple(map(id, inputs)),
                         tuple(outputs))
        structure = self.record_cache.get(structure_key)
        if structure is None:
            structure = self.record_cache[structure_key] = self.structure(
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
                blocks = _choices_used(self.spec, record.block) \
                    if isinstance(record, BlockCall) else ()
                key = (id(record), tuple(scope.values[n] for n in record.inputs),
                       id(declared), self.prover_key, scope.prefix, binding_key,
                       tuple((c, self.choices.get(c)) for c in blocks), self.want_rows,
                       tuple(scope.suspect[n] for n in suspects))
                hit = self.record_cache.get(key)
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
                self.record_cache[key] = (scope.values[record.output], self.findings[start:],
                                          scope.rows[rows_start:], self.states[states_start:],
                                          self.starts[starts_start:],
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
                    _choices_used(self.spec, scope.block.name)
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

    def check_record(self, scope: _Scope, record, declared: TensorDecl | None) -> None:
        if isinstance(record, Equation):
            self.check_equation(scope, record, declared)
        elif isinstance(record, Flaw):
            self.check_flaw(scope, record, declared)
        else:
            self.check_call(scope, record, declared)

    def check_flaw(self, scope: _Scope, flaw: Flaw, declared: TensorDecl | None) -> None:
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

    def follows(self, scope: _Scope, record, declared: TensorDecl | None, suspects: list,
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
                self.evidence.setdefault(doubt.cause, {}).setdefault(
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
    def aside(self, scope: _Scope):
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

    def check_update(self, scope: _Scope, update: Update, state: TensorDecl) -> None:
        """A state's next value is what the next step finds in it: the state's shape with
        the positions decoded before grown by this step's (T_past + T_new for T_past, along
        whichever axis names T_past: a key cache kept transposed, ``B d T_past``, grows along
        its last), of its dtype; a state of a fixed size (no T_past in its shape) keeps its
        shape. A spec without the dim T_new: at least one position more, along T_past's axis
        (the second-to-last where no axis names it alone); a state without T_past in its shape
        keeps its shape, whatever the spec's dims."""
        scope.equation = update
        value = scope.values[update.value]
        current = state.shape.subs(scope.binding)
        grown = scope.resolve_shape(value.shape)
        symbols = self.spec.symbols()
        past, new = symbols.get(PAST), symbols.get(NEW)
        axes = [i for i, d in enumerate(current.dims)
                if past is not None and past in sympy.sympify(d).free_symbols]
        axis = axes[0] if len(axes) == 1 else current.rank - 2
        # the next step's shape: T_past grown by T_new; a state nothing in whose shape grows
        # (no T_past, or a spec without T_past) keeps its own
        after = current.subs({past: past + new}) if past is not None and new is not None \
            else None if axes else current
        if axes:
            hint = (f"update {state.name} with the state and this step's positions, "
                    f"{'shaped ' + after.text() if after is not None else 'one more at least'}"
                    f" (concat {state.name} and the new positions' values, "
                    f"axis={axis - current.rank})")
        else:
            hint = f"update {state.name} with a tensor of its own shape, {current.text()}"
        if grown.rank != current.rank or grown.rank < 1 or \
                (grown.family is None) != (current.family is None):
            scope.finding("shape-mismatch", f"update {state.name} = {update.value}: "
                          f"{update.value} is {grown.text()}, which cannot replace "
                          f"{state.name} {current.text()}", None,
                          list(current.dims) + list(grown.dims), hint, current.text(),
                          grown.text())
            return
        if after is not None:
            pairs = list(zip(after.dims, grown.dims))
            if current.family is not None:
                pairs.append((after.family, grown.family))
            verdict = self.prover.equal_all(pairs)
            if not verdict.proved:
                differing = [str(i) for i, (a, b) in enumerate(pairs[:current.rank])
                             if self.prover.norm(a) != self.prover.norm(b)]
                why = (f"the next step's {state.name} is {after.text()} ({current.text()} "
                       f"with {PAST} + {NEW} for {PAST}: the positions it has and this "
                       "step's new ones)" if axes else
                       f"{state.name} keeps its shape, {current.text()} (nothing in it "
                       f"grows with {PAST})")
                scope.finding("unproved" if verdict.unknown else "shape-mismatch",
                              f"update {state.name} = {update.value}: {update.value} is "
                              f"{grown.text()} (axis {', '.join(differing) or '?'}), where "
                              f"{why}", verdict, [e for pair in pairs for e in pair], hint,
                              after.text(), grown.text())
        else:
            pairs = [(a, b) for i, (a, b) in enumerate(zip(current.dims, grown.dims))
                     if i != axis]
            if current.family is not None:
                pairs.append((current.family, grown.family))
            verdict = self.prover.equal_all(pairs)
            if not verdict.proved:
                scope.finding("unproved" if verdict.unknown else "shape-mismatch",
                              f"update {state.name} = {update.value}: {update.value} is "
                              f"{grown.text()}, which differs from {state.name} "
                              f"{current.text()} beyond the positions axis", verdict,
                              [e for pair in pairs for e in pair], hint, current.text(),
                              grown.text())
            old, more = current.dims[axis], grown.dims[axis]
            verdict = self.prover.at_most(old + 1, more)
            if not verdict.proved:
                scope.finding("unproved" if verdict.unknown else "shape-mismatch",
                              f"update {state.name} = {update.value}: {update.value} has "
                              f"{format_expr(more)} positions where {state.name} has "
                              f"{format_expr(old)}; a cache keeps its positions and adds the "
                              "new ones", verdict, [old, more], hint, current.text(),
                              grown.text())
        if value.dtype != state.dtype:
            scope.finding("dtype-mismatch", f"update {state.name} = {update.value}: "
                          f"{update.value} is {value.dtype}, the state {state.dtype}", None, [],
                          hint=f"update {state.name} with a {state.dtype} tensor")

    def report_unstated(self, qualified: str, decl: TensorDecl, shape: Shape | None,
                        like: Shape | None, selection: dict) -> TensorRow:
        role = "parameter" if decl.role == "param" else "input"
        if shape is None:
            self.add(Finding(
                kind="unstated-shape", message=f"{role} {decl.name} has no stated shape, and "
                "nothing uses it to tell one", file=decl.file, line=decl.line,
                tensor=qualified, hint=f"declare it: {decl.role} {decl.name} \"shape\", or "
                "remove it", selection=selection))
            return TensorRow(qualified, decl.role, None, decl.dtype, decl.meaning, False, "",
                             decl.file, decl.line)
        resolve = _Scope(self, "", {}, None).resolve_shape
        resolved = resolve(shape)
        like = None if like is None else resolve(like)
        involved = resolved.free_symbols() | (like.free_symbols() if like else set())
        unknown = sorted((s for s in involved if s in self.fresh.symbols),
                         key=lambda s: int(str(s)[2:]))
        rename = {s: sympy.Symbol(f"k{i + 1}") for i, s in enumerate(unknown)}
        shown = resolved.subs(rename)
        dims = f"({', '.join(format_expr(d) for d in shown.dims)})"
        if shown.family is not None:
            dims = f"{format_expr(shown.family)} members of shape {dims}"
        note = (f"; {', '.join(str(s) for s in rename.values())} "
                f"{'is a width' if len(rename) == 1 else 'are widths'} the spec never names"
                ) if rename else ""
        if like is not None:
            note += (f"; any shape that broadcasts to "
                     f"({', '.join(format_expr(d) for d in like.subs(rename).dims)}) fits, "
                     "and this is the smallest")
        implied = decl.implied
        if implied is not None and not self.implied_fits(qualified, decl, resolved, like,
                                                         rename, selection):
            implied = None
        reported = shown if implied is None else implied
        family = f"[{format_expr(shown.family)}]" if shown.family is not None else ""
        shape_text = " ".join(format_expr(d) for d in reported.dims)
        source = "" if implied is None else \
            f"its source implies ({', '.join(format_expr(d) for d in implied.dims)}); "
        self.add(Finding(
            kind="unstated-shape",
            message=f"{role} {decl.name} has no stated shape; {source}its uses require "
                    f"{dims}{note}",
            file=decl.file, line=decl.line, tensor=qualified, inferred=reported.text(),
            hint=f"declare it: {decl.role} {decl.name}{family} \"{shape_text}\""
                 + (f", after declaring {' and '.join(f'dim {s}' for s in rename.values())}"
                    if rename and implied is None else ""), selection=selection))
        return TensorRow(qualified, decl.role, reported, decl.dtype, decl.meaning, False, "",
                         decl.file, decl.line)

    def implied_fits(self, qualified: str, decl: TensorDecl, inferred: Shape,
                     like: Shape | None, rename: dict, selection: dict) -> bool:
        """Whether the shape an unstated tensor's source implies is one its uses accept: the
        shape they require, led (where it is a broadcast operand) by axes of the shape it
        broadcasts against, or 1s. One that does not fit is a finding."""
        implied = decl.implied
        extra = implied.rank - inferred.rank
        fits = 0 <= extra and implied.rank <= (inferred if like is None else like).rank
        pairs = []
        if fits:
            lead = like.dims[like.rank - implied.rank:like.rank - inferred.rank] if extra else ()
            pairs = [(a, b) for i, (a, b) in enumerate(zip(implied.dims, (*lead, *inferred.dims)))
                     if not (b.free_symbols & self.fresh.symbols) and not (i < extra and a == 1)]
        verdict = self.prover.equal_all(pairs) if pairs else None
        if fits and (verdict is None or verdict.proved):
            return True
        shown = inferred.subs(rename).text()
        broadcast = "" if like is None else \
            f", or a shape that broadcasts to {like.subs(rename).text()}"
        self.add(Finding(
            kind="unproved" if verdict is not None and verdict.unknown else "shape-mismatch",
            message=f"{decl.name}: the shape its source implies, {implied.text()}, does not "
                    f"fit its uses: they require {shown}{broadcast}",
            file=decl.file, line=decl.line, tensor=qualified, expected=implied.text(),
            inferred=shown,
            counterexample=dict(verdict.counterexample) if verdict and verdict.counterexample
            else None, hint="state the shape the equations need, or fix them",
            selection=selection))
        return False

    def check_sizes(self, scope: _Scope, decl: TensorDecl, shape: Shape) -> None:
        """Every size in a declared shape is a positive whole number for all allowed sizes."""
        key = ("sizes", id(decl), shape, self.prover_key, scope.prefix)
        known = self.record_cache.get(key)
        if known is not None:
            self.findings.extend(known)
            return
        start = len(self.findings)
        self._check_sizes(scope, decl, shape)
        self.record_cache[key] = self.findings[start:]

    def _check_sizes(self, scope: _Scope, decl: TensorDecl, shape: Shape) -> None:
        sizes = shape.dims + ((shape.family,) if shape.family is not None else ())
        for size in sizes:
            if isinstance(size, sympy.Symbol) or (size.is_Integer and size >= 1):
                continue
            failure = self.size_failure(size)
            if failure is None:
                continue
            kind, verdict, what = failure
            hint, suggested = self.size_hint(
                kind, size, "fix the declared shape: a size is at least 1" if kind ==
                "out-of-range" else "fix the declared shape: a size is a whole number")
            # a product of dims with whole coefficients is whole where they are: one over a
            # derived dim that is not follows from that dim's finding
            broken = self.broken_lets
            cause = next((broken[s] for s in sorted(size.free_symbols, key=str)
                          if s in broken), None) \
                if kind == "not-integral" and _whole_polynomial(size) else None
            self.add(Finding(
                kind="unproved" if verdict.unknown else kind, cause=cause,
                message=f"size {format_expr(size)} in the declared shape of {decl.name} "
                        f"is not {what} for every allowed size",
                file=decl.file, line=decl.line, tensor=scope.qualified(decl.name),
                expected=shape.text(),
                counterexample=dict(verdict.counterexample) if verdict.counterexample
                else None, dims=self.dim_values(size.free_symbols), hint=hint,
                suggested=suggested))

    def size_hint(self, kind: str, size, otherwise: str) -> tuple[str, object]:
        """The hint for a size that is not a whole number (a divisibility constraint) or not
        at least 1 (a bound), as ``size_failure`` found it."""
        if kind == "not-integral":
            numerator, denominator = sympy.fraction(sympy.together(size))
            return self.constraint_hint(sympy.Eq(sympy.Mod(numerator, denominator), 0,
                                                 evaluate=False), ("integral", size), otherwise)
        return self.constraint_hint(sympy.GreaterThan(size, 1, evaluate=False),
                                    ("at_most", sympy.Integer(1), size), otherwise)

    def size_failure(self, size, derived_whole: bool = True) -> tuple[str, Verdict, str] | None:
        """The first way a size can fail to be a positive whole number for some allowed sizes:
        (finding kind, verdict, what it is not), or None when it is proved.

        ``derived_whole`` lets counterexamples assume derived dims whole; a derived dim's own
        positivity may not assume it."""
        whole = self.prover.integral(size)
        if not whole.proved:
            return "not-integral", whole, "a whole number"
        positive = self.prover.at_most(1, size, derived_whole=derived_whole)
        if not positive.proved:
            return "out-of-range", positive, "at least 1"
        return None

    def check_equation(self, scope: _Scope, record: Equation, declared: TensorDecl | None):
        scope.equation = record
        before = len(self.findings)
        value = self.infer(scope, record.expr)
        # when the operands fit but the claim differs, the claim is what is wrong: later
        # equations go on from the inferred shape, so one mistake is reported once
        self.compare(scope, record, declared, value, trust_inferred=len(self.findings) == before)

    def compare(self, scope: _Scope, record, declared: TensorDecl | None, value: Value,
                trust_inferred: bool = False) -> None:
        """Prove the inferred value equal to the declared shape and dtype.

        Later equations see the declared shape (the claim), unless the claim is refuted and
        ``trust_inferred`` says the equation itself was sound.
        """
        name = record.output
        inferred = scope.resolve_shape(value.shape) if value.shape is not None else None
        result = value
        if declared is not None and declared.shape is not None:
            claim = declared.shape.subs(scope.binding)
            before = len(self.findings)
            self.compare_shapes(scope, record, claim, inferred, declared)
            refuted = len(self.findings) > before
            if declared.dtype != value.dtype:
                scope.equation = record
                scope.finding("dtype-mismatch", f"{name} is declared {declared.dtype} but its "
                              f"equation gives {value.dtype}", None, [],
                              hint=f"declare {name} as {value.dtype}, or change the equation")
            result = Value(inferred if refuted and trust_inferred else claim, declared.dtype,
                           tensor=name)
            if isinstance(record, Equation) and inferred is not None:
                self.claim_uses(scope, record, claim, inferred,
                                self.findings[before].key() if refuted else None)
            if refuted and inferred is not None:
                # later equations go on from one of the claim and what the equation gives:
                # where they trip over it but not over the other, they follow from this
                # finding (see follows)
                other = claim if trust_inferred else inferred
                scope.suspect[name] = _Doubt(Value(other, declared.dtype, tensor=name),
                                             self.findings[before].key(), trust_inferred, name)
            shape = claim
        else:
            shape = inferred
        scope.values[name] = Value(result.shape, result.dtype, tensor=name)
        meaning = declared.meaning if declared is not None else ""
        role = declared.role if declared is not None else "intermediate"
        scope.rows.append(TensorRow(scope.qualified(name), role, shape, result.dtype, meaning,
                                    declared is not None and declared.shape is not None,
                                    f"{name} = {record.text}", record.file, record.line))

    def claim_uses(self, scope: _Scope, record: Equation, claim: Shape, inferred: Shape,
                   failed: tuple | None) -> None:
        """An equation's claim about its output is a use of each declared tensor it reads:
        one that fits where the claim holds; where it is refuted, one that does not fit for
        each tensor whose declared shape gave a size the claim does not have (E[t] gives
        E's width; the claim says another)."""
        if failed is None:
            for decl in scope.declared_read((record.expr,)):
                self.used(decl, record, None)
            return
        given = set(inferred.dims) if claim.rank != inferred.rank else \
            {b for a, b in zip(claim.dims, inferred.dims) if a != b}
        if claim.family != inferred.family and inferred.family is not None:
            given.add(inferred.family)
        for decl in scope.declared_read((record.expr,)):
            shape = scope.resolve_shape(scope.values[decl.name].shape)
            if given & set(shape.dims + (shape.family,)):
                self.used(decl, record, failed)

    def compare_shapes(self, scope: _Scope, record, claim: Shape, inferred: Shape,
                       declared: TensorDecl | None = None) -> None:
        scope.equation = record
        name = record.output
        stated = claim                                     # the claim as written, for reports

        def report(message, verdict, exprs):
            # in the block's own terms: its local dims where the call bound them
            shape = _unbound(inferred, scope.binding)
            family = "" if shape.family is None else f"[{format_expr(shape.family)}]"
            hint = f"declare {name}{family} as \"{_declaration(shape)}\", or fix the equation"
            scope.finding("unproved" if verdict is not None and verdict.unknown
                          else "shape-mismatch", message, verdict, exprs, hint, stated.text(),
                          inferred.text())
            if declared is not None:
                self.findings[-1].redeclare = (declared, shape)
            if isinstance(record, Equation):
                self.findings[-1].operands = self.giving(scope, record, stated, shape)

        while claim.rank > inferred.rank and claim.dims[0] == 1:
            claim = Shape(claim.dims[1:], claim.family)    # leading unit axes broadcast away
        units = stated.rank - claim.rank
        if claim.rank != inferred.rank:
            report(f"{name} is declared with rank {stated.rank} but its equation gives rank "
                   f"{inferred.rank}", None, list(claim.dims) + list(inferred.dims))
            return
        if claim.family is None and inferred.family is not None:
            report(f"{name} is declared as one tensor but its equation gives a family of "
                   f"{format_expr(inferred.family)}", None, list(inferred.dims))
            return
        # a family declared where one tensor is computed: shared by every member (broadcast)
        pairs = list(zip(claim.dims, inferred.dims))
        if claim.family is not None and inferred.family is not None:
            pairs.append((claim.family, inferred.family))
        fresh = self.fresh.symbols
        if fresh:
            # a claim pins down the unstated widths it meets (E[t] declared "B T d_model")
            unified = []
            for a, b in pairs:
                a, b = scope.resolve(a), scope.resolve(b)
                if b in fresh and a != b:
                    scope.unknowns[b] = a
                    b = a
                elif a in fresh and a != b:
                    scope.unknowns[a] = b
                    a = b
                unified.append((a, b))
            pairs = unified
            inferred = scope.resolve_shape(inferred)
        verdict = self.prover.equal_all(pairs)
        if not verdict.proved:
            differing = [i for i, (a, b) in enumerate(pairs)
                         if self.prover.norm(a) != self.prover.norm(b) and i < claim.rank]
            message = f"{name} is declared {stated.text()} but its equation gives " \
                      f"{inferred.text()}"
            if differing:    # counted in the claim as written, its unit axes included
                message += f" (axis {', '.join(str(i + units) for i in differing)})"
            if verdict.unknown:
                message += (f" (not proved, and no counterexample with every dim up to "
                            f"{SEARCH_MAX})")
            report(message, verdict, [e for pair in pairs for e in pair])

    def giving(self, scope: _Scope, record: Equation, claim: Shape,
               inferred: Shape) -> list[tuple[TensorDecl, Shape]]:
        """The declared tensors (inputs, parameters, states) an equation reads whose shape
        has a size the equation gives where it claims another (``W_K "d_model H*d_k"`` for
        ``K_proj "B T H_kv*d_k" = X @ W_K``), each with that size put to the claim's: the
        declaration, not the equation, may be what is wrong, however far from it."""
        claim = _unbound(claim, scope.binding)
        if claim.rank != inferred.rank:
            return []
        differing = [(claim.rank - i, a, b) for i, (a, b) in
                     enumerate(zip(claim.dims, inferred.dims))
                     if self.prover.norm(a.xreplace(scope.binding)) !=
                     self.prover.norm(b.xreplace(scope.binding))]
        wrong = {b: a for _, a, b in differing}
        aligned, elsewhere = [], []
        for decl in scope.declared_read((record.expr,)):
            if decl.shape is None or not any(d in wrong for d in decl.shape.dims):
                continue
            shape = Shape(tuple(wrong.get(d, d) for d in decl.shape.dims), decl.shape.family)
            # first those with the size where the result has it, counted from the last axis
            # (a product's last axis is its right operand's, as broadcasting aligns them)
            at = any(k <= decl.shape.rank and decl.shape.dims[-k] == b for k, _, b in differing)
            (aligned if at else elsewhere).append((decl.written or decl, shape, wrong))
        return aligned + elsewhere

    def infer(self, scope: _Scope, term) -> Value:
        if isinstance(term, TensorRef):
            return scope.values[term.name]
        if isinstance(term, ScalarExpr):
            return Value(Shape(()), "float", scalar=term.expr.xreplace(scope.binding))
        assert isinstance(term, OpNode)
        args = [self.infer(scope, a) for a in term.args]
        scope.node = term
        value = OPS[term.op].infer(scope, args, term.attr)
        # an operand that is an expression is named by its text in later messages
        return replace(value, text=term.text) if term.text else value

    # -- block calls
    def check_call(self, scope: _Scope, call: BlockCall, declared: TensorDecl | None) -> None:
        scope.equation = call
        block = self.spec.blocks[call.block]
        if len(call.args) != len(block.inputs):
            raise SpecError(f"block {block.name} takes {len(block.inputs)} input"
                            f"{'s' if len(block.inputs) != 1 else ''} "
                            f"({', '.join(d.name for d in block.inputs)}), got "
                            f"{len(call.args)}", file=call.file, line=call.line)
        locals_ = {d.symbol for d in block.local_dims.values()}
        binding: dict = {}
        actuals = []
        for arg in call.args:
            value = scope.values[arg]
            if value.shape is None:
                raise SpecError(f"{arg} has no stated shape and cannot be passed to block "
                                f"{block.name}", file=call.file, line=call.line)
            actuals.append(scope.shape(value, 1, "argument"))
        # a block that takes single tensors, called with families, applies to each member
        mapped = None
        if all(d.shape.family is None for d in block.inputs) and \
                any(a.family is not None for a in actuals):
            if call.repeat is not None or _keeps_states(self.spec, block.name):
                arg = next(a for a, s in zip(call.args, actuals) if s.family is not None)
                raise SpecError(f"{arg} is a family passed to {block.name}, which takes one "
                                "tensor: code generation applies a block to each member only "
                                "where it is called once and keeps no states",
                                file=call.file, line=call.line)
            mapped = join_family(scope, *(a.family for a in actuals))
            actuals = [Shape(a.dims) for a in actuals]
        bound_by: dict = {}       # local dim -> the argument and input that bound it
        doubts: dict = {}         # block input -> its doubt, where the argument does not fit
        conflicts: list = []      # local dims two arguments disagree on (see bind)
        for decl, arg, actual in zip(block.inputs, call.args, actuals):
            self.bind(scope, call, block, decl, arg, actual, scope.values[arg].dtype, binding,
                      locals_, bound_by, doubts, conflicts)
        unbound = [d.name for d in block.local_dims.values() if d.symbol not in binding]
        if unbound:
            raise SpecError(f"block {block.name}: local dim{'s' if len(unbound) > 1 else ''} "
                            f"{', '.join(unbound)} {'are' if len(unbound) > 1 else 'is'} not "
                            "fixed by its inputs' shapes", file=block.file, line=block.line)
        path = f"{scope.prefix}{call.instance}{'[i]' if call.repeat is not None else ''}."
        relevant = _choices_used(self.spec, block.name)
        ways_key = ("selections", block.name, id(block),
                    tuple((c, self.choices.get(c)) for c in relevant))
        ways = self.record_cache.get(ways_key)
        if ways is None:
            ways = self.record_cache[ways_key] = selections(self.spec, block.name, self.choices)
        if ways == [{}]:
            self.call_block(scope, call, block, binding, mapped, path, declared, doubts,
                            conflicts)
            return
        # the block consults choices the caller left open: it is checked under each way of
        # setting them, its findings marked with the way; the caller goes on from the declared
        # shape, the same under all of them (a call with no declared shape leaves none open)
        outer, want_rows = self.choices, self.want_rows
        # what each way adds for the decoding pass and the unstated shapes, as it adds it
        added: list[tuple[list, int, list]] = [(self.pending, 4, []), (self.states, 3, []),
                                               (self.starts, 3, [])]
        firsts = [len(kept) for kept, _, _ in added]
        for index, way in enumerate(ways):
            self.choices, self.want_rows = outer | way, want_rows and index == 0
            start, rows_start = len(self.findings), len(scope.rows)
            self.call_block(scope, call, block, binding, mapped, path, declared, doubts,
                            conflicts)
            self.findings[start:] = [replace(f, selection=way | f.selection)
                                     for f in self.findings[start:]]
            for (kept, _, by_way), first in zip(added, firsts):
                by_way.append(kept[first:])
                del kept[first:]
            if index:
                del scope.rows[rows_start:]
        self.choices, self.want_rows = outer, want_rows
        for kept, at, by_way in added:
            # a state is told apart by the choices its block reads (which set whether the
            # block writes it: see ``_unwritten_states``), even where it is kept alike
            apart = (lambda entry, way: tuple((c, way[c]) for c in self.state_choices.get(
                id(entry[1]), ()) if c in way)) if kept is self.states else None
            kept.extend(_marked_with_ways(by_way, ways, at, apart))

    def call_block(self, scope: _Scope, call: BlockCall, block: Block, binding: dict,
                   mapped, path: str, declared: TensorDecl | None, doubts: dict,
                   conflicts: list) -> None:
        """Check a call of a block whose choices are all set: its body, then its output
        against the declared shape (which later equations go on from: the same under every
        way of setting the choices the block consults).

        Where two arguments disagree on a local dim (``conflicts``), the body is checked
        again with the later one's value: the states and starts that differ so are doubtful,
        for the argument-mismatch (see ``alternatives``)."""
        kept = len(self.states), len(self.starts)
        output, rows, suspect = self.check_block(block, binding, path, doubts)
        scope.rows.extend(rows)
        if conflicts:
            with self.aside(scope):
                again = len(self.states), len(self.starts)
                try:
                    self.check_block(block, binding | {local: given for local, given, _ in
                                                       conflicts}, path, {})
                    otherwise = self.states[again[0]:], self.starts[again[1]:]
                except SpecError:
                    otherwise = None
            if otherwise is not None:
                self.alternatives(*kept, *otherwise, conflicts[0][2])
        body = len(self.findings)
        self.finish_call(scope, call, block, binding, mapped, declared, output)
        if suspect is None:
            return
        # the block's output is doubtful (an equation inside gave what its claim did not):
        # what the call finds about it follows from that finding when the declared output
        # would have given none
        found = self.findings[body:]
        if found:
            with self.aside(scope):
                alternative = len(self.findings)
                self.finish_call(scope, call, block, binding, mapped, declared, suspect.other)
                clean = len(self.findings) == alternative
            if clean:
                for finding in found:
                    if finding.cause is None:
                        finding.cause = suspect.cause
        if declared is None or declared.shape is None:
            scope.suspect.setdefault(call.output, suspect._replace(
                other=replace(suspect.other, tensor=call.output)))

    def finish_call(self, scope: _Scope, call: BlockCall, block: Block, binding: dict,
                    mapped, declared: TensorDecl | None, output: Value) -> None:
        """A call's output: mapped over families, fed back by a repeat, compared with the
        claim."""
        if mapped is not None and output.shape is not None:
            output = Value(Shape(output.shape.dims, mapped), output.dtype, tensor=output.tensor)
        if call.repeat is not None:
            first = block.inputs[0].shape.subs(binding)
            if output.shape is not None and output.shape.rank == first.rank:
                verdict = self.prover.equal_all(list(zip(output.shape.dims, first.dims)))
                before = len(self.findings)
                if not verdict.proved:
                    scope.finding("repeat-mismatch",
                                  f"repeat({format_expr(call.repeat)}, {block.name}) feeds each "
                                  f"copy's output {block.output} ({output.shape.text()}) to the "
                                  f"next copy's input {block.inputs[0].name} ({first.text()})",
                                  verdict, list(output.shape.dims) + list(first.dims),
                                  hint="a repeated block must return the shape of its first "
                                       "input")
                # the next copy's input is a use of the block's first input
                self.used(block.inputs[0], call,
                          self.findings[-1].key() if len(self.findings) > before else None)
            elif output.shape is not None:
                scope.finding("repeat-mismatch", f"repeat({format_expr(call.repeat)}, "
                              f"{block.name}) returns rank {output.shape.rank} but takes rank "
                              f"{first.rank}", None, [],
                              hint="a repeated block must return the shape of its first input")
        self.compare(scope, call, declared, output)

    def bind(self, scope, call, block, decl, arg, actual: Shape, dtype, binding, locals_,
             bound_by, doubts, conflicts):
        # a call is a use of the block's input, and of the argument where it is declared
        given = scope.decls.get(arg)
        given = given if given is not None and given.role in DECLARED and \
            given.shape is not None and \
            (scope.block is None or given not in scope.block.inputs) else None

        def used(failed):
            self.used(decl, call, failed)
            if given is not None:
                self.used(given, call, failed)

        declared = decl.shape
        expected = declared.subs(binding)
        problem = None
        if declared.rank != actual.rank:
            problem = f"rank {actual.rank} where the block takes rank {declared.rank}"
        elif declared.family is None and actual.family is not None:
            problem = "a family where the block takes one tensor"
        if problem is None:
            pairs, written = [], []
            for d, a in zip(declared.dims, actual.dims):
                bound = d.xreplace(binding)
                if bound in locals_:
                    binding[bound] = a
                    bound_by[bound] = (arg, decl.name, actual)
                else:
                    pairs.append((bound, a))
                    written.append(d)
            if declared.family is not None and actual.family is not None:
                pairs.append((declared.family.xreplace(binding), actual.family))
            if any(e.free_symbols & locals_ for pair in pairs for e in pair):
                raise SpecError(f"block {block.name}: input {decl.name}'s shape uses a local "
                                "dim in an expression before it is bound; bind it alone first",
                                file=block.file, line=decl.line)
            verdict = self.prover.equal_all(pairs) if pairs else None
            if verdict is not None and not verdict.proved:
                expected = declared.subs(binding)
                # a local dim an earlier argument bound, which this one gives otherwise: the
                # two arguments disagree, and either may be the one not meant
                disagreeing = [(local, b, a) for local, (b, a) in zip(written, pairs)
                               if local in bound_by and not self.prover.equal(b, a).proved]
                conflict = disagreeing[0] if disagreeing else None
                if conflict is None:
                    message = (f"{arg} ({actual.text()}) passed as {block.name}'s input "
                               f"{decl.name} ({expected.text()})")
                    hint = (f"pass a tensor of shape {expected.text()}, or check "
                            f"{block.name}'s declaration of {decl.name} (line {decl.line})")
                else:
                    # neither argument is known to be the one not meant: both are named,
                    # and neither shape is "expected"
                    local, earlier, later = conflict
                    other, other_input, other_shape = bound_by[local]
                    message = (f"{block.name}'s inputs {other_input} and {decl.name} disagree "
                               f"on {local}: {other} ({other_shape.text()}), passed as "
                               f"{other_input}, gives {local} = {format_expr(earlier)}, but "
                               f"{arg} ({actual.text()}), passed as {decl.name}, gives "
                               f"{local} = {format_expr(later)}")
                    hint = (f"{block.name}'s inputs {other_input} and {decl.name} share "
                            f"{local}: pass {other} and {arg} with one {local}, or check "
                            "which of them is not the tensor meant")
                scope.finding("argument-mismatch", message, verdict,
                              [e for pair in pairs for e in pair], hint=hint,
                              expected=None if conflict else expected.text(),
                              inferred=None if conflict else actual.text())
                if conflict is not None:
                    # the body is checked again with every local dim this argument gives
                    # otherwise (see call_block): T_q and T_kv both, where a call swaps its
                    # query and key-value arguments
                    conflicts += [(dim, given, self.findings[-1].key())
                                  for dim, _, given in disagreeing]
                    self.record_cache.setdefault(("conflicts",), {})[
                        self.findings[-1].key()] = (bound_by[local][0], arg, local, later)
                used(self.findings[-1].key())
                # in the body, the input is doubtful: what trips over it there but not over
                # the argument passed follows from this finding
                doubts[decl.name] = _Doubt(Value(actual, dtype, tensor=decl.name),
                                           self.findings[-1].key(), False, decl.name)
            else:
                used(None)
        else:
            for d, a in zip(declared.dims, actual.dims):
                if d in locals_ and d not in binding:
                    binding[d] = a
            scope.finding("argument-mismatch", f"{arg} ({actual.text()}) passed as "
                          f"{block.name}'s input {decl.name} ({declared.text()}): {problem}",
                          None, [], hint=f"pass a tensor of shape {declared.text()}",
                          expected=declared.text(), inferred=actual.text())
            used(self.findings[-1].key())
        if dtype != decl.dtype:
            scope.finding("argument-mismatch", f"{arg} is {dtype} but {block.name}'s input "
                          f"{decl.name} is {decl.dtype}", None, [],
                          hint=f"pass a {decl.dtype} tensor")

    def check_block(self, block: Block, binding: dict, path: str,
                    doubts: dict) -> tuple[Value, list, tuple]:
        relevant = _choices_used(self.spec, block.name)
        key = (block.name, id(block), tuple(sorted(((k.name, v) for k, v in binding.items()),
                                        key=lambda kv: kv[0])),
               self.prover_key, tuple((c, self.choices.get(c)) for c in relevant),
               tuple(sorted(doubts.items())))
        cached = self.block_cache.get(key)
        if cached is None:
            if block.name in self.active:
                cycle = self.active[self.active.index(block.name):] + [block.name]
                raise SpecError(f"block {block.name} calls itself: {' -> '.join(cycle)}",
                                file=block.file, line=block.line)
            self.active.append(block.name)
            inner = _Scope(self, "", binding, block)
            inner.suspect.update(doubts)
            start, pending_start = len(self.findings), len(self.pending)
            states_start, starts_start = len(self.states), len(self.starts)
            known = set(self.unknowns)
            self.check_body(inner, select(block.body, self.choices), block.inputs,
                            [block.output], f"block {block.name}")
            value = inner.values[block.output]
            pinned = {k: v for k, v in self.unknowns.items() if k not in known}
            cached = (value, self.findings[start:], inner.rows, self.pending[pending_start:],
                      pinned, self.states[states_start:], self.starts[starts_start:],
                      inner.suspect.get(block.output))
            del self.findings[start:]
            del self.pending[pending_start:]
            del self.states[states_start:]
            del self.starts[starts_start:]
            self.block_cache[key] = cached
            self.active.pop()
        value, findings, rows, pending, pinned, states, starts, suspect = cached
        self.unknowns.update(pinned)
        self.pending.extend((path + name, decl, shape, like, selection)
                            for name, decl, shape, like, selection in pending)
        self.states.extend((path + entry[0],) + entry[1:] for entry in states)
        self.starts.extend((path + entry[0],) + entry[1:] for entry in starts)
        for finding in findings:
            copy = Finding(**finding.__dict__)
            copy.tensor = path + finding.tensor if finding.tensor else finding.tensor
            self.findings.append(copy)
        if not self.want_rows:
            return value, [], suspect
        return value, [TensorRow(**{**row.__dict__, "name": path + row.name}) for row in rows], \
            suspect


def _check_let_cycles(lets: list[Let], let_map: dict, symbols: dict) -> None:
    """Derived dims defined through each other (let m = n + 1; let n = m + 1) are an error."""
    by_symbol = {symbols[let.dim]: let for let in lets}

    def cycle_error(cycle):
        let = by_symbol[cycle[0]]
        return SpecError("derived dims defined through each other: "
                         + " -> ".join(str(s) for s in cycle) + " (lines "
                         + ", ".join(str(by_symbol[s].line) for s in cycle[:-1]) + ")",
                         file=let.file, line=let.line)

    depth_first(let_map, lambda symbol: sorted(let_map[symbol].free_symbols & set(let_map),
                                               key=str), cycle_error)


def _choices_used(spec: Spec, block_name: str) -> tuple[str, ...]:
    """The choices a block's body depends on, through the blocks it calls too (memoised)."""
    memo = spec.__dict__.setdefault("_choices_used", {})
    if block_name in memo:
        return memo[block_name]
    memo[block_name] = ()      # guards against recursion; recursive blocks are an error later
    found: set[str] = set()

    def walk(statements):
        for s in statements:
            if isinstance(s, When):
                found.add(s.choice)
                walk(s.body)
                walk(s.otherwise)
            elif isinstance(s, BlockCall) and s.block in spec.blocks:
                found.update(_choices_used(spec, s.block))
    walk(spec.blocks[block_name].body)
    memo[block_name] = tuple(sorted(found))
    return memo[block_name]


def _marked_with_ways(by_way: list[list[tuple]], ways: list[dict], at: int,
                      apart=None) -> list[tuple]:
    """The entries each way of setting a block's open choices added (states, starts, unstated
    shapes: tuples whose item ``at`` is the choices they hold under), each marked with its way;
    an entry every way adds alike holds whatever the way, and comes once, unmarked. (So what
    a block keeps does not multiply with the ways of the blocks it calls, up the calls.)
    ``apart(entry, way)``, where given, is more that tells an entry's ways apart."""
    def identity(entry: tuple, way: dict):
        parts = tuple(p if isinstance(p, (str, Shape, tuple, type(None))) else id(p)
                      for i, p in enumerate(entry) if i != at)
        key = parts + (tuple(entry[at].items()),) + \
            (apart(entry, way) if apart is not None else ())
        try:
            hash(key)
        except TypeError:
            return None
        return key
    keyed = [[(identity(entry, way), entry) for entry in entries]
             for way, entries in zip(ways, by_way)]
    everywhere = set.intersection(*({key for key, _ in entries} for entries in keyed)) \
        if keyed else set()
    everywhere.discard(None)
    out = []
    for index, (way, entries) in enumerate(zip(ways, keyed)):
        for key, entry in entries:
            if key in everywhere:
                if index == 0:
                    out.append(entry)
            else:
                out.append(entry[:at] + (way | entry[at],) + entry[at + 1:])
    return out


def _divisibility(relation) -> bool:
    """Whether ``relation`` is ``n % m == 0``."""
    return isinstance(relation, sympy.Eq) and isinstance(relation.lhs, sympy.Mod) and \
        relation.rhs == 0


def _input_dims(spec: Spec) -> set:
    """The dims that size the model's inputs (B, T, T_dec...), under any choice (memoised):
    the lengths of the data, which a fix may not tie together."""
    memo = spec.__dict__.get("_input_dims")
    if memo is None:
        memo = spec.__dict__["_input_dims"] = set()

        def walk(statements):
            for s in statements:
                if isinstance(s, When):
                    walk(s.body)
                    walk(s.otherwise)
                elif isinstance(s, TensorDecl) and s.role == "input" and s.shape is not None:
                    memo.update(s.shape.free_symbols())
        walk(spec.body)
    return memo


def _plain(value):
    return int(value) if getattr(value, "denominator", 1) == 1 else format_value(value)


def _violation_message(relation, values: dict) -> str:
    if _divisibility(relation):
        n, d = relation.lhs.args
        return f"{_valued(n, values)} is not divisible by {_valued(d, values)}"
    shown = ", ".join(f"{s}={format_value(_plain(values[s]))}"
                      for s in sorted(relation.free_symbols, key=str))
    return f"{dim_text(relation)} does not hold for {shown}"


def _valued(expr, values: dict) -> str:
    """`H=10` for a dim or expression, `2` for a number."""
    if expr.is_number:
        return format_expr(expr)
    return f"{format_expr(expr)}={format_value(_plain(evaluate(expr, values)))}"


def _declaration(shape: Shape) -> str:
    return " ".join(format_expr(d) for d in shape.dims)


def _describe(choices: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in choices.items()) or "the spec as written"


def depth_first(nodes, uses, cycle_error) -> list:
    """Nodes in dependency order, each after the nodes it uses; a cycle raises
    ``cycle_error(cycle)``, the cycle as a list from a node back to itself."""
    order, state = [], {}

    def visit(node, trail):
        if state.get(node) == "done":
            return
        if state.get(node) == "active":
            raise cycle_error(trail[trail.index(node):] + [node])
        state[node] = "active"
        for used in uses(node):
            visit(used, trail + [node])
        state[node] = "done"
        order.append(node)

    for node in nodes:
        visit(node, [])
    return order


def topological(producers: dict, where: str) -> list:
    """Equations in data-flow order; a cycle is an error naming it."""
    def cycle_error(cycle):
        lines = ", ".join(str(producers[n].line) for n in cycle[:-1])
        record = producers[cycle[0]]
        return SpecError(f"cyclic equations in {where}: {' -> '.join(cycle)} (lines {lines})",
                         file=record.file, line=record.line)

    names = depth_first(producers, lambda name: [u for u in producers[name].inputs
                                                 if u in producers], cycle_error)
    return [producers[name] for name in names]


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
    record_cache: dict = {}
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
            run = _Run(spec, base | way, given, provers, block_cache, rows=first,
                       record_cache=record_cache)
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
    uses = record_cache.setdefault(("uses",), {})
    for finding, found, compared in _decoding_findings(spec, checked, runs):
        if finding is None:             # a state that fits its start: a use that fits
            for decl in compared:
                uses.setdefault(id(decl), [decl, {}, {}])[1][("start", id(decl))] = decl.line
            continue
        key = finding.key()
        merged.setdefault(key, finding)
        seen_in[key] = seen_in.get(key, nothing) | found
        if finding.cause is None:
            causes.add(key)
        for decl in compared:
            # the step's input against the full model's: a use of each that does not fit
            uses.setdefault(id(decl), [decl, {}, {}])[2].setdefault(key, []).append(key)
    for key, (earlier, later, local, given) in record_cache.get(("conflicts",), {}).items():
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
    for decl, failed, fits in _misfits(uses.values(), merged, causes, block_inputs):
        # a finding at the declaration itself (a step's input the full model takes otherwise)
        # is the cause; else the declaration, as a finding of its own
        own = next((merged[k] for k in failed
                    if (merged[k].file, merged[k].line) == (decl.file, decl.line)), None)
        inside = sorted({f.line for f in merged.values() if f.cause in failed}) \
            if id(decl) in block_inputs else []
        declared = own or _misfit_declaration(decl, [merged[k] for k in failed], fits, inside)
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
    for key in sorted(causes, key=lambda k: _place(merged[k])):
        if merged[key].suggested is not None:
            fixed_by.setdefault(merged[key].suggested, []).append(key)
    # and those such a constraint proves, whatever their own hints say (`require T <=
    # max_len` settles a relative bias's 2*T - 1 <= 2*max_len - 1 too)
    for relation, keys in fixed_by.items():
        for key in sorted(causes, key=lambda k: _place(merged[k])):
            claim = merged[key].claim
            if key not in keys and claim is not None and merged[key].caused_by is None and \
                    _settles(claim, relation):
                keys.append(key)
    for first, *rest in fixed_by.values():
        for key in rest:
            if key in causes:
                merged[key].cause = first
                causes.discard(key)
    for key, said in record_cache.get(("evidence",), {}).items():
        if key in merged and len(said) == 1:
            merged[key].hint = _weighed_hint(merged[key], *said.items())
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
    ordered = _grouped(findings, merged, causes)
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
    run = _Run(spec, combos[0], given, provers, {}, rows=False)
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
        written = f'"{_declaration(shape)}"'
        where = f" (line {decl.line})" if decl.line is not None else ""
        if not _moved(spec, finding, decl, wrong, combo, known, provers, block_cache):
            rest = finding.hint.removeprefix("fix the equation")
            return f"declare {decl.name}{where} as {written}, or fix the equation{rest}"
    decl, _, wrong = finding.operands[0]
    declared = f'"{_declaration(decl.shape)}"'
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
                   if name not in changed and _calls(block.body) & changed}
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
                    f not in still), key=_place)
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
    written = f'"{_declaration(shape)}"'
    # (where it goes elsewhere too, that line: a finding the new declaration makes at its
    # own line, a state that now grows without an update, says less of where it went)
    moved = [f for f in moved if f.line != finding.line] or moved
    effect = f"would move the mismatch to line {moved[0].line}" if moved else \
        "would not fix it"
    if decl.role == "state":
        return f"start {decl.name} from a tensor of its shape (declared {written}, it " \
               f"{effect})"
    return f"fix the equation (declaring {decl.name} as {written} {effect})"


def _settles(claim: tuple, relation) -> bool:
    """Whether adding ``relation`` as a constraint proves a failed claim, ``(prover,
    (method, *arguments))``."""
    prover, (method, *arguments) = claim
    added = Prover(prover.dims, prover.constraints + [relation], prover.lets, prover.values)
    try:
        return getattr(added, method)(*arguments).proved
    except TypeError:       # as offers(): no proof this way
        return False


def _declares(statements: list, decl: TensorDecl) -> bool:
    """Whether a body holds the declaration, in any branch."""
    return any(s is decl or isinstance(s, When) and
               (_declares(s.body, decl) or _declares(s.otherwise, decl)) for s in statements)


def _calls(statements: list) -> set[str]:
    """The blocks a body calls, in any branch."""
    found: set[str] = set()
    for s in statements:
        if isinstance(s, BlockCall):
            found.add(s.block)
        elif isinstance(s, When):
            found |= _calls(s.body) | _calls(s.otherwise)
    return found


def _place(finding: Finding) -> tuple:
    """Where a finding is, for ordering: file, line, kind, tensor."""
    return (finding.file or "", finding.line or 0, finding.kind, finding.tensor)


def _partner(spec: Spec, fixed: dict) -> dict | None:
    """The other half of a model that decodes, where ``fixed`` sets decoding: ``{decoding:
    step}`` for a full model (its decoding step), ``{decoding: full}`` for a step (the prefill
    that starts its states); None where decoding is left open or the spec does not decode."""
    if not decodes(spec) or fixed.get(DECODING) not in (FULL, STEP):
        return None
    return {DECODING: STEP if fixed[DECODING] == FULL else FULL}


def _weighed_hint(finding: Finding, said: tuple[str, set]) -> str:
    """A refuted claim's hint (declare it as the equation gives, or fix the equation), with
    what later equations say: they fit the claim alone, or what the equation gives alone.
    (Evidence, not a verdict: a seed can be wrong the same way twice.)"""
    hint = finding.hint
    if finding.kind != "shape-mismatch" or not hint.endswith(", or fix the equation"):
        return hint
    name = finding.equation.split(" = ", 1)[0]
    fits, lines = said
    where = f"line {next(iter(lines))} uses" if len(lines) == 1 else \
        f"lines {', '.join(map(str, sorted(lines)))} use"
    if fits == "claim":
        return f"{hint}; {where} {name} as declared"
    return f"{hint}; {where} what its equation gives"


def _misfits(uses, merged: dict, causes: set,
             inputs: set) -> list[tuple[TensorDecl, list[tuple], list]]:
    """The declared tensors whose declaration is the likelier mistake than each use that does
    not fit it, each with the keys of those uses' findings and the lines of the uses that fit:

    - one that none of its uses fits, at two or more lines (with one, the use may as well
      be the mistake: that finding stands alone);
    - a block's input that none of its calls fits, at one line, where its body trips over
      it (``inputs``, the ids of blocks' inputs);
    - one that uses at two or more lines do not fit, though others do (a table too short for
      two of its slices, E.T where E's rows are not the vocabulary's: a gather or a slice
      that fits need not compare all of it).

    Only findings that follow from no other count: a use that trips over a tensor an earlier
    finding made doubtful says nothing of the declaration. And only those that blame no
    other such declaration (in X @ W where neither fits any use, either may be the mistake),
    for one that some use fits, no other declaration at all."""
    uses = [(decl, sorted({line for record, line in passed.items() if record not in failed
                           and line is not None}),
             list(dict.fromkeys(k for ks in failed.values() for k in ks)))
            for decl, passed, failed in uses]
    owners: dict = {}         # finding key -> the declarations it blames: (all, fitting none)
    for _, fits, keys in uses:
        for key in keys:
            every, unfit = owners.get(key, (0, 0))
            owners[key] = (every + 1, unfit + (not fits))
    found = []
    for decl, fits, keys in uses:
        keys = [k for k in keys if k in merged and k in causes and
                owners[k][1 if not fits else 0] == 1]
        lines = {merged[k].line for k in keys}
        if id(decl) in inputs and not fits:
            # a block's input its calls do not fit, whose body trips over it where the
            # argument would not (the findings that follow from the calls'): the body's uses
            # are uses too
            lines |= {f.line for f in merged.values() if f.cause in keys}
        if len(lines) >= 2:
            found.append((decl, keys, fits))
    return found


def _misfit_declaration(decl: TensorDecl, failed: list[Finding], fits: list,
                        inside: list) -> Finding:
    """A declared tensor that uses at two or more lines do not fit (see ``_misfits``; a
    block's input, the lines ``inside`` its body that trip over it too): its declaration is
    the likelier mistake than each use, and their findings follow from it. (With one use,
    the use may as well be the mistake: that finding stands alone.)"""
    at = sorted({f.line for f in failed if f.line is not None})
    lines = f"line{'s' if len(at) > 1 else ''} {', '.join(map(str, at))}"
    if inside:
        lines += f"; in its block, line{'s' if len(inside) > 1 else ''} " + \
            ", ".join(map(str, inside))
    family = "" if decl.shape.family is None else f"[{format_expr(decl.shape.family)}]"
    first = min(failed, key=lambda f: (f.line or 0, f.kind, f.tensor))
    which = f"which none of its uses fits ({lines})" if not fits else \
        f"which its uses at {lines} do not fit (it fits those at " \
        f"line{'s' if len(fits) > 1 else ''} {', '.join(map(str, fits))})"
    return Finding(
        kind="declaration-mismatch",
        message=f"{decl.name} is declared {decl.shape.text()}, {which}",
        file=decl.file, line=decl.line,
        equation=f'{decl.role} {decl.name}{family} "{_declaration(decl.shape)}"',
        hint=f"declare {decl.name} with the shape its uses need, or fix them; the first, at "
             f"line {first.line}: {first.message}")


def _grouped(findings: list[Finding], merged: dict, causes: set) -> list[Finding]:
    """Each finding linked to the earlier finding it follows from (``caused_by``), then in
    order: every cause, each followed by what follows from it.

    A finding follows from another when its only reason is that one's tensor (``cause``, see
    ``_Run.follows``), or when it is about the same statement (the same line: a block checked
    at other sizes, a claim refuted after its operands were)."""
    for finding in findings:
        cause = merged.get(finding.cause) if finding.key() not in causes else None
        finding.caused_by = cause if cause is not finding else None
        finding.cause = None
    for finding in findings:
        # a chain that comes back to this finding (choices that disagree) is no cause
        seen, step = {id(finding)}, finding.caused_by
        while step is not None and id(step) not in seen:
            seen.add(id(step))
            step = step.caused_by
        if step is not None:
            finding.caused_by = None
    # the same statement's other findings follow from what one of them follows from, else
    # from the first of them
    first: dict = {}
    for finding in findings:
        where = (finding.file, finding.line)
        if finding.caused_by is not None and not isinstance(first.get(where), tuple):
            first[where] = (finding.caused_by,)
        first.setdefault(where, finding)
    for finding in findings:
        anchor = first[(finding.file, finding.line)]
        anchor = anchor[0] if isinstance(anchor, tuple) else anchor
        if finding.caused_by is None and anchor is not finding:
            finding.caused_by = anchor
    return [f for cause, rest in grouped(findings) for f in (cause, *rest)]


def _keeps_states(spec: Spec, block_name: str) -> bool:
    """Whether a block declares states, in any branch, itself or in the blocks it calls."""
    def keeps(statements, seen) -> bool:
        for s in statements:
            if isinstance(s, When):
                found = keeps(s.body, seen) or keeps(s.otherwise, seen)
            elif isinstance(s, BlockCall):
                found = s.block in spec.blocks and s.block not in seen and \
                    keeps(spec.blocks[s.block].body, seen | {s.block})
            else:
                found = isinstance(s, TensorDecl) and s.role == "state"
            if found:
                return True
        return False
    return keeps(spec.blocks[block_name].body, {block_name})


def _start_names(spec: Spec) -> frozenset[str]:
    """The tensors the spec's states start from (their `from`), in any branch (memoised)."""
    memo = spec.__dict__.get("_start_names")
    if memo is None:
        found: set[str] = set()

        def walk(statements):
            for s in statements:
                if isinstance(s, When):
                    walk(s.body)
                    walk(s.otherwise)
                elif isinstance(s, TensorDecl) and s.role == "state":
                    found.add(s.start)
        for block in spec.blocks.values():
            walk(block.body)
        memo = spec.__dict__["_start_names"] = frozenset(found)
    return memo


def _decoding_findings(spec: Spec, members: ChoiceSpace, runs: list) -> list[tuple]:
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

    A state or start that an earlier finding made doubtful (``_Run.alternatives``) follows
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
                                   if _declares(block.body, original)), None)
    block = memo[id(original)]
    if block is None:
        return False
    # the same block under the same options of the choices it consults: the same answer
    relevant = tuple((c, choices[c]) for c in _choices_used(spec, block.name))
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
    """The decoding step's inputs against the full model's (see ``_decoding_findings``), the
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


def _block_notes(spec: Spec, combo: dict) -> list[Note]:
    notes = []
    for block in spec.blocks.values():
        notes.extend(s for s in select(block.body, combo) if isinstance(s, Note))
    return notes
