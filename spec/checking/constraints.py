"""The constraints of one run: satisfiable or not, each given dim value against them, the
values near a violating one, and the constraints a failed claim could be settled by.
"""

import collections
import functools
import math

import sympy

from tspec.checking.findings import Finding, format_value
from tspec.checking.prove import Prover, evaluate, is_whole
from tspec.language.model import (
    Spec,
    TensorDecl,
    When,
)
from tspec.symbolic.expr import dim_text
from tspec.symbolic.shape import format_expr

NEAREST_WINDOW = 4096     # how far to look for valid values near a violating one


class Constraints:
    """The run's constraints and dim values: whether some sizes meet every constraint,
    each given value against them, and the constraints a failed claim could be settled by."""

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
        key = (self.prover_key, relation, claim)
        answer = self.memo.offers.get(key)
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
            self.memo.offers[key] = answer
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
