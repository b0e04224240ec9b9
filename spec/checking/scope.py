"""The names in force where a record is checked: a block's binding of its dims, the
tensors declared there, and each claim's finding with its counterexample and hint.
"""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import sympy

from tspec.checking.findings import Finding
from tspec.checking.prove import SEARCH_MAX, Verdict
from tspec.errors import SpecError
from tspec.language.model import (
    Block,
    OpNode,
    TensorDecl,
    TensorRef,
    tensor_names,
)
from tspec.ops.base import Value
from tspec.symbolic.shape import Shape, format_expr

if TYPE_CHECKING:                   # the run that a scope belongs to (run.py imports this module)
    from tspec.checking.run import Run

DECLARED = ("input", "param", "state")   # roles given, not computed by an equation


@dataclass
class Uses:
    """A declared tensor's uses, over every run: the records whose claims about it hold (a
    record's id, or a state's start, -> its line) and those whose claims fail (-> the keys of
    their findings). A record fits when none of its claims fails."""
    decl: TensorDecl
    fits: dict = field(default_factory=dict)
    fails: dict = field(default_factory=dict)


class Conflict(NamedTuple):
    """Two arguments of a call that disagree on a block's local dim: the first argument that
    bound it, the later one, the local dim, and what the later one gives it."""
    earlier: str
    later: str
    local: str
    given: object


class Checked(NamedTuple):
    """What checking one record gave, kept for the next time the same record is checked
    alike (the same inputs' values, declaration, prover, place, binding and choices read)."""
    value: object
    findings: list
    rows: list
    states: list
    starts: list
    suspect: object


@dataclass
class Memo:
    """What the runs of one check share: evidence gathered over every combination of choices
    (each declared tensor's uses, what later equations say of a refuted claim, the calls whose
    arguments disagree) and answers remembered because every combination asks them alike."""
    uses: dict = field(default_factory=dict)         # id(decl) -> Uses
    # the key of a refuted claim's finding -> {"claim": lines of uses that fit the declared
    # shape alone, "equation": lines of uses that fit what the equation gives alone}
    evidence: dict = field(default_factory=dict)
    conflicts: dict = field(default_factory=dict)    # the key of a call's finding -> Conflict
    offers: dict = field(default_factory=dict)       # whether a constraint fixes a claim
    reads: dict = field(default_factory=dict)        # the declared tensors terms read
    structures: dict = field(default_factory=dict)   # a body's order and declarations
    records: dict = field(default_factory=dict)      # -> Checked
    sizes: dict = field(default_factory=dict)        # a shape's size findings
    ways: dict = field(default_factory=dict)         # a block's ways under the choices it reads

    def use(self, decl: TensorDecl) -> Uses:
        return self.uses.setdefault(id(decl), Uses(decl))


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


class Fresh:
    """Fresh symbols for the dims of parameters whose shape a spec left unstated."""

    def __init__(self):
        self.count = 0
        self.symbols: set = set()

    def __call__(self) -> sympy.Symbol:
        self.count += 1
        symbol = sympy.Symbol(f"_k{self.count}", integer=True, positive=True)
        self.symbols.add(symbol)
        return symbol


class Doubt(NamedTuple):
    """A tensor whose value a refuted claim made doubtful: later equations go on from one of
    the claim and what the equation gives; ``other`` is the other one."""
    other: Value
    cause: tuple            # the key of the claim's finding
    declared: bool          # whether ``other`` is the claim
    tensor: str             # the tensor whose claim it is


class Scope:
    """One body being checked: the model, or one block under one binding of its local dims."""

    def __init__(self, checker: "Run", prefix: str, binding: dict, block: Block | None):
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
        # tensors whose value an earlier finding made doubtful, see Run.follows
        self.suspect: dict[str, Doubt] = {}

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
        cache = self.checker.memo.reads
        key = (tuple(map(id, terms)), id(self.decls))
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
