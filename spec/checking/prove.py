"""Proofs about dim expressions under a spec's constraints, and counterexamples when they fail.

A ``Prover`` knows the constraints in force (``d_model % H == 0``, ``T <= max_len``), the derived
dims (``d_k = d_model / H``) and any dims bound to values. It answers three kinds of claim for
every size the constraints allow: ``a == b``, ``d divides n`` and ``a <= b``. Each answer is a
``Verdict``: proved; disproved, with the smallest counterexample it found; or unknown, when
neither a proof nor a counterexample was found (reported, never silently passed).

Proof methods, cheapest first: sympy's canonical form (``H*(d_model/H)`` is ``d_model``), exact
cancellation, divisibility witnesses (``d_model % H == 0`` lets ``d_model = H*q``), and for
inequalities a linear program over the constraints (sympy's exact simplex, every dim >= 1). Counterexamples
come from a bounded search over small sizes that satisfy every constraint.
"""

import itertools
import random
from dataclasses import dataclass
from fractions import Fraction

import sympy
from sympy.solvers.simplex import InfeasibleLPError, UnboundedLPError, linprog

from tspec.errors import LimitError
from tspec.language.model import Spec, lets
from tspec.symbolic.expr import MAX_DEGREE, degree, dependency_order, derived_degrees, dim_text

SEARCH_MAX = 12          # largest size tried per dim in the counterexample search
SEARCH_BUDGET = 20000    # candidate assignments tried per claim
# a bound proved from products of the constraints (Prover._products_nonnegative): at most so
# many dims, so high a degree and so many products tried
PRODUCT_DIMS, PRODUCT_DEGREE, PRODUCT_TERMS = 8, 4, 400


@dataclass(frozen=True)
class Verdict:
    proved: bool
    counterexample: tuple[tuple[str, int], ...] | None = None   # (dim, value) pairs

    @property
    def disproved(self) -> bool:
        return self.counterexample is not None

    @property
    def unknown(self) -> bool:
        return not self.proved and self.counterexample is None


PROVED = Verdict(True)
UNKNOWN = Verdict(False)


class NotInteger(Exception):
    """An expression evaluated to a non-integer where a size was needed."""


def evaluate(expr: sympy.Basic, values: dict) -> Fraction | float | bool:
    """Evaluate a dim expression exactly, with Python numbers: no sympy subs, no eval."""
    if isinstance(expr, sympy.Symbol):
        return Fraction(values[expr])
    if isinstance(expr, sympy.Integer):
        return Fraction(int(expr))
    if isinstance(expr, sympy.Rational):
        return Fraction(int(expr.p), int(expr.q))
    if isinstance(expr, sympy.Float):
        return float(expr)
    if isinstance(expr, sympy.Add):
        return sum((evaluate(a, values) for a in expr.args), Fraction(0))
    if isinstance(expr, sympy.Mul):
        result = Fraction(1)
        for a in expr.args:
            result = result * evaluate(a, values)
        return result
    if isinstance(expr, sympy.Pow):
        base, exponent = evaluate(expr.base, values), evaluate(expr.exp, values)
        if isinstance(exponent, Fraction) and exponent.denominator == 1:
            if base == 0 and exponent < 0:
                raise ZeroDivisionError("0 to a negative power")
            return base ** int(exponent)
        return float(base) ** float(exponent)
    if isinstance(expr, sympy.Mod):
        a, b = evaluate(expr.args[0], values), evaluate(expr.args[1], values)
        return a % b
    if isinstance(expr, sympy.Eq):
        return evaluate(expr.lhs, values) == evaluate(expr.rhs, values)
    if isinstance(expr, sympy.Ne):
        return evaluate(expr.lhs, values) != evaluate(expr.rhs, values)
    if isinstance(expr, sympy.StrictLessThan):
        return evaluate(expr.lhs, values) < evaluate(expr.rhs, values)
    if isinstance(expr, sympy.LessThan):
        return evaluate(expr.lhs, values) <= evaluate(expr.rhs, values)
    if isinstance(expr, sympy.StrictGreaterThan):
        return evaluate(expr.lhs, values) > evaluate(expr.rhs, values)
    if isinstance(expr, sympy.GreaterThan):
        return evaluate(expr.lhs, values) >= evaluate(expr.rhs, values)
    if expr in (sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        raise ZeroDivisionError("a size divided by zero")
    if expr is sympy.true:
        return True
    if expr is sympy.false:
        return False
    raise TypeError(f"cannot evaluate {expr!r}")


# what sympy makes of a division by zero: never a size
UNDEFINED = (sympy.zoo, sympy.nan, sympy.oo, -sympy.oo)


def is_whole(value) -> bool:
    return isinstance(value, Fraction) and value.denominator == 1 and value > 0


class Prover:
    """Decides claims about dims under constraints, derived dims and bound values."""

    def __init__(self, dims: list[sympy.Symbol], constraints: list[sympy.Basic],
                 lets: dict[sympy.Symbol, sympy.Basic], values: dict[sympy.Symbol, int]):
        self.dims = list(dims)
        self.values = dict(values)
        self.lets = dict(lets)
        # before anything is put in: each derived dim's degree (what sympy's work on it, and
        # its value's digits, grow with), refused past MAX_DEGREE
        self.degrees = derived_degrees(self.lets)
        for symbol, found in self.degrees.items():
            if found > MAX_DEGREE:
                raise LimitError(f"derived dim {symbol} has degree {found:,} in the dims once "
                                 f"the derived dims it uses are put in; the limit is "
                                 f"{MAX_DEGREE}")
        # derived dims in terms of base dims, then bound values put in
        self.substitution = self._compose({**self.lets, **{s: sympy.Integer(v)
                                                           for s, v in self.values.items()}})
        self.constraints = list(constraints)
        self.facts = self._facts()
        # an equality constraint (d_v == d_k) is used as a substitution
        for fact in list(self.facts):
            if isinstance(fact, sympy.Eq) and not fact.has(sympy.Mod):
                for side, other in ((fact.lhs, fact.rhs), (fact.rhs, fact.lhs)):
                    if isinstance(side, sympy.Symbol) and side not in other.free_symbols \
                            and side not in self.substitution:
                        self.substitution = self._compose({**self.substitution, side: other})
                        self.facts = self._facts()
                        break
        self.witnesses = [(f.lhs.args[0], f.lhs.args[1]) for f in self.facts
                          if isinstance(f, sympy.Eq) and isinstance(f.lhs, sympy.Mod)
                          and f.rhs == 0]
        self._cache: dict = {}
        self._norms: dict = {}

    def _facts(self) -> list:
        facts = []
        for constraint in self.constraints:
            try:
                fact = constraint.xreplace(self.substitution)
            except (ZeroDivisionError, TypeError):
                # values that make a modulus zero break the fact, as does a division by zero
                # in a comparison (sympy refuses to compare zoo: a TypeError)
                fact = sympy.false
            facts.append(sympy.false if fact.has(sympy.zoo, sympy.nan) else fact)
        return facts

    @staticmethod
    def _compose(mapping: dict) -> dict:
        """Each entry with the others put in, to any depth: each once, after those it uses
        (putting all in at once until nothing changed took a pass a link of a chain). An
        entry in a cycle (the checker names it) is left in."""
        composed: dict = {}
        for symbol in dependency_order(mapping):
            expr = mapping[symbol]
            inner = {s: composed[s] for s in expr.free_symbols if s in composed}
            composed[symbol] = expr.xreplace(inner) if inner else expr
        return {symbol: composed[symbol] for symbol in mapping}

    def norm(self, expr) -> sympy.Basic:
        cached = self._norms.get(expr)
        if cached is None:
            expr = sympy.sympify(expr)
            if self.lets and degree(expr, self.degrees) > MAX_DEGREE:
                raise LimitError(f"{dim_text(expr)} has degree "
                                 f"{degree(expr, self.degrees):,} in the dims once the derived "
                                 f"dims it uses are put in; the limit is {MAX_DEGREE}")
            cached = self._norms[expr] = expr.xreplace(self.substitution)
        return cached

    # -- the three claims
    def equal(self, a, b, *, broadcast: bool = False) -> Verdict:
        """a == b for all allowed sizes. With ``broadcast``, sizes where either side is 1 are
        no counterexample (NumPy broadcasting accepts them)."""
        return self.equal_all([(a, b)], broadcast=broadcast)

    def equal_all(self, pairs: list[tuple], *, broadcast: bool = False) -> Verdict:
        """Every pair equal, for all allowed sizes."""
        key = ("eq", tuple(pairs), broadcast)
        verdict = self._cache.get(key)
        if verdict is None:
            normed = [(self.norm(a), self.norm(b)) for a, b in pairs]
            verdict = self._cache[key] = self._equal_all(normed, broadcast)
        return verdict

    def divides(self, divisor, n, *, derived_whole: bool = True) -> Verdict:
        divisor, n = self.norm(divisor), self.norm(n)
        key = ("div", divisor, n, derived_whole)
        if key not in self._cache:
            self._cache[key] = self._divides(divisor, n, derived_whole)
        return self._cache[key]

    def at_most(self, a, b, *, derived_whole: bool = True) -> Verdict:
        a, b = self.norm(a), self.norm(b)
        key = ("le", a, b, derived_whole)
        if key not in self._cache:
            self._cache[key] = self._at_most(a, b, derived_whole)
        return self._cache[key]

    def integral(self, expr) -> Verdict:
        """The expression is a whole number for every allowed size (a derived dim)."""
        numerator, denominator = sympy.fraction(sympy.together(self.norm(expr)))
        if denominator == 1:
            return PROVED
        # the search may not assume derived dims whole: that is the claim itself
        return self.divides(denominator, numerator, derived_whole=False)

    # -- methods
    def _equal_all(self, pairs, broadcast: bool) -> Verdict:
        pending = [(a, b) for a, b in pairs if a != b and sympy.cancel(a - b) != 0]
        if not pending:
            return PROVED
        pending = [(a, b) for a, b in pending
                   if not self._with_witnesses(lambda e: e == 0, a - b)
                   and not self._stated_equal(a - b)]
        if not pending:
            return PROVED

        def fails(values):
            for a, b in pending:
                x, y = evaluate(a, values), evaluate(b, values)
                if x != y and not (broadcast and 1 in (x, y)):
                    return True
            return False
        return self._search(set().union(*(a.free_symbols | b.free_symbols for a, b in pending)),
                            fails)

    def _stated_equal(self, difference) -> bool:
        """a - b is a multiple of l - r for an equality constraint l == r that is not a
        substitution (T + 1 == 2*H, T*H == d*d)."""
        for fact in self.facts:
            if isinstance(fact, sympy.Eq) and not fact.has(sympy.Mod):
                stated = sympy.cancel(fact.lhs - fact.rhs)
                if stated != 0 and sympy.cancel(difference / stated).is_number:
                    return True
        return False

    def _divides(self, divisor, n, derived_whole: bool) -> Verdict:
        if self._with_witnesses(_integer_polynomial, n / divisor):
            return PROVED
        # a constraint d | m with n / divisor a whole multiple of the whole number m / d: said
        # outright where a witness cannot be put in (m a number, as in 8 % H_kv == 0 once
        # H = 8 is given), or written otherwise (d_k % 2 == 0 is 2*H | d_model, d_k = d_model/H)
        if any(_integer_polynomial(sympy.cancel(n * d / (divisor * m)))
               for m, d in self.witnesses):
            return PROVED

        def fails(values):
            quotient = evaluate(n, values) / evaluate(divisor, values)
            return not (isinstance(quotient, Fraction) and quotient.denominator == 1)
        return self._search(n.free_symbols | divisor.free_symbols, fails, derived_whole)

    def _at_most(self, a, b, derived_whole: bool) -> Verdict:
        gap = sympy.expand(b - a)
        if gap.is_number:
            return PROVED if gap >= 0 else self._search(set(), lambda values: True)
        if gap.is_nonnegative or self._scaled_slack(gap) or \
                self._with_witnesses(_monotone_nonnegative, gap):
            return PROVED
        if self._linear_minimum_nonnegative(gap):
            return PROVED
        verdict = self._search(gap.free_symbols, lambda values: evaluate(gap, values) < 0,
                               derived_whole)
        if verdict.unknown and self._products_nonnegative(gap):
            return PROVED           # no counterexample, and a proof from the constraints
        return verdict

    def _products_nonnegative(self, gap) -> bool:
        """gap >= 0 as a sum, with non-negative coefficients, of products of the constraints'
        slacks (b - a for a <= b) and of the dims' own (x - 1, every dim being >= 1), of
        gap's degree at most: Handelman's form of a certificate, found by a linear program
        over the coefficients and checked exactly. So ``n_h <= 16``, ``n_w <= 16`` and
        ``256 <= max_len`` prove ``n_h*n_w <= max_len`` (``max_len - n_h*n_w = (max_len -
        256) + 16*(16 - n_w) + (n_w - 1)*(16 - n_h) + (16 - n_h)``), and ``H*W <= L*p*p``
        proves ``(H/p)*(W/p) <= L``: a quotient is multiplied out by its denominator, a
        product of dims (positive), as is a constraint, and a factor that is a product of
        dims is divided out. Tried as written, then with every divisibility witness put in
        (``H % p == 0``: H = p*q) on both sides."""
        slacks = [slack for slack in map(_slack, self.facts)
                  if slack is not None and slack.free_symbols]
        if not slacks:
            return False
        if "combined" not in self._cache:
            self._cache["combined"] = self._combined_witnesses()
        tries = [{}] + ([self._cache["combined"]] if self._cache["combined"] else [])
        for put_in in tries:
            target = _cleared(gap.xreplace(put_in))
            if target is None or not target.free_symbols:
                continue
            facts = [_cleared(slack.xreplace(put_in)) for slack in slacks]
            if _handelman(_monomial_free(target),
                          [_monomial_free(f) for f in facts if f is not None and
                           f.free_symbols]):
                return True
        return False

    def _scaled_slack(self, gap) -> bool:
        """gap = k * (b - a) + c with k > 0 and c >= 0 for a constraint a <= b: the common
        case (T <= max_len proves max_len - T >= 0 and 2*max_len - 2*T >= 0) without an LP."""
        for fact in self.facts:
            if isinstance(fact, sympy.LessThan):
                slack = sympy.expand(fact.rhs - fact.lhs)
            elif isinstance(fact, sympy.GreaterThan):
                slack = sympy.expand(fact.lhs - fact.rhs)
            elif isinstance(fact, sympy.StrictLessThan):
                slack = sympy.expand(fact.rhs - fact.lhs - 1)
            elif isinstance(fact, sympy.StrictGreaterThan):
                slack = sympy.expand(fact.lhs - fact.rhs - 1)
            else:
                continue
            symbols = slack.free_symbols
            if not symbols or symbols != gap.free_symbols:
                continue
            # k from one term of the slack (T, or T**2 where the constraint is T*T <= d)
            coefficient, monomial = min((t.as_coeff_Mul() for t in sympy.Add.make_args(slack)
                                         if t.free_symbols), key=str)
            k = gap.coeff(monomial) / coefficient
            if not (k.is_number and k.is_positive):
                continue
            rest = sympy.expand(gap - k * slack)
            if rest.is_number and rest >= 0:
                return True
        return False

    def _with_witnesses(self, test, expr) -> bool:
        """Test the expression as is, then with each divisibility witness substituted, then
        with all of them at once (``combined``)."""
        expr = sympy.cancel(expr)
        if test(expr):
            return True
        for index, (n, d) in enumerate(self.witnesses):
            if isinstance(n, sympy.Symbol):
                quotient = sympy.Symbol(f"_q{index}", integer=True, positive=True)
                if test(sympy.cancel(expr.xreplace({n: d * quotient}))):
                    return True
        if "combined" not in self._cache:
            self._cache["combined"] = self._combined_witnesses()
        combined = self._cache["combined"]
        return bool(combined) and test(sympy.cancel(expr.xreplace(combined)))

    def _combined_witnesses(self) -> dict:
        """One substitution that puts every divisibility witness in at once, each through the
        ones before it: ``d_model % H == 0`` makes d_model = H*q0, then ``d_k % 2 == 0`` (d_k
        = d_model/H = q0) makes q0 = 2*q1, so d_model = 2*H*q1 and 2*H divides d_model.

        A witness ``d | n`` with n = s*k (a dim s to the first power, k free of s) puts in
        s = q*d/k for a fresh whole q >= 1 (q = n/d, a positive whole number where d and k are
        positive). Every allowed size has such a q, so a claim true for every q is true for
        every allowed size (the substitution may add sizes, never lose one). A witness whose
        n has no such dim is left out."""
        combined: dict = {}
        pending = list(self.witnesses)
        while pending:
            remaining = []
            for n, d in pending:
                n, d = sympy.cancel(n.xreplace(combined)), sympy.cancel(d.xreplace(combined))
                if _integer_polynomial(sympy.cancel(n / d)):
                    continue            # holds already, through the witnesses before it
                solved = _solve_for_dim(n, d)
                if solved is None:
                    remaining.append((n, d))
                    continue
                symbol, value = solved
                value *= sympy.Symbol(f"_w{len(combined)}", integer=True, positive=True)
                combined = {s: e.xreplace({symbol: value}) for s, e in combined.items()}
                combined[symbol] = value
            if len(remaining) == len(pending):
                break                   # none of the rest can be put in
            pending = remaining
        return combined

    def _linear_minimum_nonnegative(self, gap, feasibility: bool = False) -> bool:
        """min(gap) >= 0 over the reals, subject to the linear constraints and every dim >= 1.

        With ``feasibility``, an infeasible program raises InfeasibleLPError instead of
        answering False."""
        if not _linear(gap):
            return False
        facts = []
        # a dim given by others (a derived dim, or one an equality fixes) is >= 1 too; not
        # assumed when proving a claim, which may be that very bound
        sized = [sympy.GreaterThan(e, 1, evaluate=False) for s, e in self.substitution.items()
                 if s not in self.values and not e.has(*UNDEFINED)] if feasibility else []
        for fact in self.facts + sized:
            if isinstance(fact, (sympy.StrictLessThan, sympy.StrictGreaterThan)):
                # sizes are integers: a < b is a <= b - 1
                small, large = (fact.lhs, fact.rhs) if isinstance(fact, sympy.StrictLessThan) \
                    else (fact.rhs, fact.lhs)
                fact = sympy.LessThan(small, large - 1, evaluate=False)
            if isinstance(fact, (sympy.LessThan, sympy.GreaterThan, sympy.Eq)) and \
                    not fact.has(sympy.Mod) and _linear(fact.lhs - fact.rhs):
                facts.append(fact)
        order = sorted(set(gap.free_symbols).union(*(f.free_symbols for f in facts)), key=str)

        def row(expr):
            # in y = x - 1 >= 0, linprog's own domain: every dim >= 1 without its bounds
            # argument (which sympy does not honour together with equalities)
            zero = dict.fromkeys(order, 0)
            coefficients = [expr.coeff(s) for s in order]
            return coefficients, expr.xreplace(zero) + sum(coefficients)

        upper, upper_bounds, equal, equal_bounds = [], [], [], []
        for fact in facts:
            if isinstance(fact, sympy.Eq):
                coefficients, constant = row(sympy.expand(fact.lhs - fact.rhs))
                equal.append(coefficients)
                equal_bounds.append(-constant)
            else:       # a <= b, or b >= a: a - b <= 0
                small, large = (fact.lhs, fact.rhs) if isinstance(fact, sympy.LessThan) \
                    else (fact.rhs, fact.lhs)
                coefficients, constant = row(sympy.expand(small - large))
                upper.append(coefficients)
                upper_bounds.append(-constant)
        objective, offset = row(gap)
        if not order:       # no dims: every fact is a number, true or not
            if any(bound < 0 for bound in upper_bounds) or any(equal_bounds):
                if feasibility:
                    raise InfeasibleLPError("constant constraints that do not hold")
                return False
            return offset >= 0
        if not upper:       # linprog wants inequalities when it has equalities: 0 <= 0
            upper, upper_bounds = [[0] * len(order)], [0]
        try:
            minimum, _ = linprog(
                sympy.Matrix([objective]), sympy.Matrix(upper), sympy.Matrix(upper_bounds),
                sympy.Matrix(equal) if equal else None,
                sympy.Matrix(equal_bounds) if equal else None)
        except UnboundedLPError:     # no proof this way
            return False
        except InfeasibleLPError:
            if feasibility:
                raise
            return False
        return minimum + offset >= 0

    def _search(self, symbols: set, fails, derived_whole: bool = True) -> Verdict:
        """The smallest sizes that satisfy every constraint and make the claim fail."""
        symbols = set(symbols)
        # bring in every dim that shares a constraint with the claim's dims, and the base dims
        # behind derived ones, so that the counterexample is a valid size
        changed = True
        while changed:
            changed = False
            for fact in self.facts:
                free = fact.free_symbols
                if free & symbols and not free <= symbols:
                    symbols |= free
                    changed = True
        order = [s for s in self.dims if s in symbols] + sorted(
            (s for s in symbols if s not in self.dims), key=str)
        derived = [(s, e) for s, e in self.substitution.items() if s not in self.values
                   and e.free_symbols <= set(order)]
        facts = [f for f in self.facts if f.free_symbols <= set(order)]
        must_be_whole = [e for _, e in derived] if derived_whole else []
        tried = 0
        for total in range(len(order), len(order) * SEARCH_MAX + 1):
            for combo in _compositions(total, len(order), SEARCH_MAX):
                tried += 1
                if tried > SEARCH_BUDGET:
                    return UNKNOWN
                values = dict(zip(order, combo))
                if not _admissible(values, must_be_whole, facts):
                    continue
                try:
                    if fails(values):
                        shown = {**values, **{s: evaluate(e, values) for s, e in derived}}
                        return Verdict(False, tuple((str(s), _number(v)) for s, v in
                                                    shown.items() if not str(s).startswith("_")))
                except ZeroDivisionError:
                    continue
            if not order:
                break
        return UNKNOWN

    def satisfiable(self) -> str:
        """Whether some sizes meet every constraint: 'yes', 'no' (proved) or 'unknown'.

        Unsatisfiable constraints would make every claim hold vacuously. Tries small sizes,
        then seeded log-uniform samples up to 2**16, then a point of the linear constraints'
        region (any size: ``require 65536 <= L``) rounded up to whole sizes, each witness
        checked exactly against every constraint; 'no' needs the linear constraints to be
        infeasible over the reals (sympy's exact simplex).
        """
        if "satisfiable" in self._cache:
            return self._cache["satisfiable"]
        answer = "yes"
        if any(f is sympy.false for f in self.facts):
            answer = "no"
        elif self.facts and not self._search(set().union(*(f.free_symbols for f in self.facts)),
                                             lambda values: True).disproved \
                and not self._sampled_witness() and not self._region_witness():
            answer = "no" if self._linear_infeasible() else "unknown"
        self._cache["satisfiable"] = answer
        return answer

    def _region_witness(self) -> bool:
        """Whether a point of the region the linear constraints bound (every dim >= 1, the
        fewest in sum: a floating-point simplex, SciPy's HiGHS), rounded up to whole sizes or
        to multiples of a power of two (for the divisibility constraints), meets every
        constraint, derived dims whole: found beyond the samples' 2**16."""
        import numpy as np
        from scipy.optimize import linprog as float_linprog
        symbols = sorted(set().union(*(f.free_symbols for f in self.facts)), key=str)
        derived = [e for s, e in self.substitution.items() if s not in self.values
                   and e.free_symbols <= set(symbols)]
        rows, bounds, equal, equal_bounds = [], [], [], []
        for fact in self.facts:
            if fact.has(sympy.Mod) or not isinstance(fact, (sympy.LessThan, sympy.GreaterThan,
                                                             sympy.StrictLessThan,
                                                             sympy.StrictGreaterThan,
                                                             sympy.Eq)):
                continue
            difference = sympy.expand(fact.lhs - fact.rhs)
            if not _linear(difference):
                continue
            sign = -1 if isinstance(fact, (sympy.GreaterThan, sympy.StrictGreaterThan)) else 1
            strict = isinstance(fact, (sympy.StrictLessThan, sympy.StrictGreaterThan))
            coefficients = [float(sign * difference.coeff(s)) for s in symbols]
            constant = float(sign * difference.xreplace(dict.fromkeys(symbols, 0)))
            if isinstance(fact, sympy.Eq):
                equal.append(coefficients)
                equal_bounds.append(-constant)
            else:           # sign * (lhs - rhs) <= 0, or <= -1 where strict
                rows.append(coefficients)
                bounds.append(-constant - (1 if strict else 0))
        if not symbols or not (rows or equal):
            return False
        found = float_linprog(np.ones(len(symbols)), A_ub=np.array(rows) if rows else None,
                              b_ub=np.array(bounds) if rows else None,
                              A_eq=np.array(equal) if equal else None,
                              b_eq=np.array(equal_bounds) if equal else None,
                              bounds=(1, None), method="highs")
        if found.status != 0:
            return False
        point = [max(1, int(np.ceil(v - 1e-9))) for v in found.x]
        for multiple in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
            values = {s: -(-v // multiple) * multiple if v > 1 else v
                      for s, v in zip(symbols, point)}
            if _admissible(values, derived, self.facts):
                return True
        return False

    def _sampled_witness(self) -> bool:
        symbols = sorted(set().union(*(f.free_symbols for f in self.facts)), key=str)
        derived = [e for s, e in self.substitution.items() if s not in self.values
                   and e.free_symbols <= set(symbols)]
        rng = random.Random(0)
        for _ in range(SEARCH_BUDGET):
            values = {s: int(2 ** rng.uniform(0, 16)) for s in symbols}
            if _admissible(values, derived, self.facts):
                return True
        return False

    def _linear_infeasible(self) -> bool:
        """The linear constraints have no real solution with every dim >= 1, derived dims
        and dims an equality constraint fixes (T == 0) included."""
        try:
            return not self._linear_minimum_nonnegative(sympy.Integer(0), feasibility=True)
        except InfeasibleLPError:
            return True

    def satisfied(self, values: dict) -> list[sympy.Basic]:
        """The constraints (as written) that these values break."""
        full = {**values}
        return [c for c, f in zip(self.constraints, self.facts)
                if f.free_symbols <= set(full) and not evaluate(f, full)]


def _monomial_free(expr):
    """A polynomial over dims with a factor that is a product of dims and a positive number
    divided out (its sign for every size is the same): ``p**2*(L - q)`` is ``L - q``."""
    symbols = sorted(expr.free_symbols, key=str)
    if not symbols:
        return expr
    _, rest = sympy.Poly(expr, *symbols).terms_gcd()
    content, primitive = rest.primitive()
    return primitive.as_expr() if content > 0 else rest.as_expr()


def _handelman(target, slacks: list) -> bool:
    """Whether ``target`` is a sum, with non-negative coefficients, of products (of the
    highest degree of target and those slacks at most) of the ``slacks`` that share a dim with
    it (through one another) and of x - 1 for each such dim (``L - n = (L - n*n) + (n - 1)**2
    + (n - 1)``: a bound of lower degree than the constraint that gives it)."""
    symbols = set(target.free_symbols)
    chosen: list = []
    grown = True
    while grown:
        grown = False
        for slack in slacks:
            if slack not in chosen and slack.free_symbols & symbols:
                chosen.append(slack)
                symbols |= slack.free_symbols
                grown = True
    order = sorted(symbols, key=str)
    if not chosen or len(order) > PRODUCT_DIMS:
        return False
    top = max(sympy.Poly(expr, *order).total_degree() for expr in [target, *chosen])
    if top > PRODUCT_DEGREE:
        return False
    atoms = [sympy.Poly(a, *order) for a in chosen + [s - 1 for s in order]]
    products = []
    for size in range(top + 1):
        for group in itertools.combinations_with_replacement(range(len(atoms)), size):
            if sum(atoms[i].total_degree() for i in group) > top:
                continue
            product = sympy.Poly(1, *order)
            for i in group:
                product *= atoms[i]
            products.append(product.as_dict())
            if len(products) > PRODUCT_TERMS:
                return False
    wanted = sympy.Poly(target, *order).as_dict()
    monomials = sorted(set(wanted).union(*products))
    rows = [[int(t.get(m, 0)) for t in products] for m in monomials]
    return _nonnegative_solution(rows, [int(wanted.get(m, 0)) for m in monomials])


def _nonnegative_solution(rows: list[list[int]], right: list[int]) -> bool:
    """Whether ``rows @ c == right`` has a solution c >= 0: the first phase of the simplex
    method, in exact rational arithmetic, with Bland's rule (it cannot cycle). Written here:
    sympy's exact simplex, given equalities, has returned points that break them and optima
    of programs that have no point at all, and a floating-point one (SciPy's) finds points
    whose columns hold no exact solution once the numbers grow (products of bounds in the
    thousands)."""
    width = len(rows[0]) if rows else 0
    table = []
    for index, (row, value) in enumerate(zip(rows, right)):
        sign = -1 if value < 0 else 1
        # the row, an artificial column of its own, and its right-hand side (made >= 0)
        table.append([Fraction(sign * v) for v in row] +
                     [Fraction(int(i == index)) for i in range(len(rows))] +
                     [Fraction(sign * value)])
    basis = [width + i for i in range(len(rows))]
    columns = width + len(rows)
    # reduced costs of the sum of the artificials, which the first phase brings to 0
    cost = [-sum(row[j] for row in table) if j < width else Fraction(0)
            for j in range(columns)]
    objective = sum(row[columns] for row in table)
    while objective:
        enter = next((j for j in range(columns) if cost[j] < 0), None)
        if enter is None:
            return False        # the least sum of the artificials is above 0: no solution
        leave = None
        for i, row in enumerate(table):
            if row[enter] > 0:
                ratio = row[columns] / row[enter]
                if leave is None or ratio < leave[0] or \
                        ratio == leave[0] and basis[i] < basis[leave[1]]:
                    leave = (ratio, i)
        pivot_row = leave[1]
        pivot = table[pivot_row][enter]
        table[pivot_row] = [v / pivot for v in table[pivot_row]]
        chosen = table[pivot_row]
        for i, row in enumerate(table):
            factor = row[enter]
            if i != pivot_row and factor:
                table[i] = [a - factor * b for a, b in zip(row, chosen)]
        factor = cost[enter]
        cost = [a - factor * b for a, b in zip(cost, chosen)]
        objective += factor * chosen[columns]      # (factor < 0: it falls)
        basis[pivot_row] = enter
    return True


def _cleared(expr):
    """A dim expression times its denominator where that is a product of dims and positive
    numbers (a size >= 1 for every size: the sign is kept), as a polynomial; None where it
    is no polynomial so."""
    numerator, denominator = sympy.fraction(sympy.together(sympy.expand(expr)))
    symbols = sorted(numerator.free_symbols | denominator.free_symbols, key=str)
    if not symbols:
        return sympy.expand(numerator / denominator)
    if not (denominator.is_polynomial(*symbols) and numerator.is_polynomial(*symbols)):
        return None
    if any(c <= 0 for c in sympy.Poly(denominator, *symbols).coeffs()):
        return None             # not positive for every size: the sign may flip
    return sympy.expand(numerator)


def _slack(fact):
    """What a constraint says is >= 0 (b - a for a <= b; b - a - 1 for a < b, sizes being
    whole), multiplied out of its denominators; None for another kind of fact."""
    if isinstance(fact, sympy.LessThan):
        slack = fact.rhs - fact.lhs
    elif isinstance(fact, sympy.GreaterThan):
        slack = fact.lhs - fact.rhs
    elif isinstance(fact, sympy.StrictLessThan):
        slack = fact.rhs - fact.lhs - 1
    elif isinstance(fact, sympy.StrictGreaterThan):
        slack = fact.lhs - fact.rhs - 1
    else:
        return None
    if slack.has(sympy.Mod, *UNDEFINED):
        return None
    return _cleared(slack)


def _admissible(values: dict, derived: list, facts: list) -> bool:
    """Sizes the spec allows: every derived dim in ``derived`` a positive whole number and
    every fact true (sizes that divide by zero are not allowed)."""
    try:
        return all(is_whole(evaluate(e, values)) for e in derived) and \
            all(evaluate(f, values) for f in facts)
    except ZeroDivisionError:
        return False


def _solve_for_dim(n, d):
    """For a witness ``d | n``: a dim s and the value d/k with n = s*k, k free of s, where d
    and k are positive (so s = q*d/k for the whole number q = n/d >= 1); None when n has no
    such dim."""
    if not d.is_positive:
        return None
    for symbol in sorted(n.free_symbols, key=str):
        k = sympy.cancel(n / symbol)
        if symbol not in k.free_symbols and k.is_positive:
            if k.is_Integer and d.is_Integer:       # 3 | 2*s: s = 3*q, exactly
                return symbol, d / sympy.gcd(k, d)
            return symbol, d / k
    return None


def _number(value):
    value = Fraction(value)
    return int(value) if value.denominator == 1 else value


def _integer_polynomial(expr) -> bool:
    if expr.is_Integer:
        return True
    symbols = sorted(expr.free_symbols, key=str)
    if not symbols or not expr.is_polynomial(*symbols):
        return False
    poly = sympy.Poly(expr, *symbols)
    return all(c.is_Integer for c in poly.coeffs())


def _monotone_nonnegative(expr) -> bool:
    """A polynomial whose non-constant terms all have non-negative coefficients grows with
    every dim, so over dims >= 1 its least value is at all ones; or one that has only
    non-negative coefficients once every dim x is written 1 + y, y >= 0 (H*q - H is
    H*(q - 1): (1 + h)*r)."""
    return _growing_nonnegative(expr) or _shifted_nonnegative(expr)


def _shifted_nonnegative(expr) -> bool:
    symbols = sorted(expr.free_symbols, key=str)
    if not symbols or not expr.is_polynomial(*symbols):
        return False
    shifted = sympy.Poly(expr.xreplace({s: s + 1 for s in symbols}), *symbols)
    return all(c >= 0 for c in shifted.coeffs())


def _growing_nonnegative(expr) -> bool:
    symbols = sorted(expr.free_symbols, key=str)
    if not symbols:
        return bool(expr.is_number and expr >= 0)
    if not expr.is_polynomial(*symbols):
        return False
    poly = sympy.Poly(expr, *symbols)
    for monomial, coefficient in poly.terms():
        if any(monomial) and not coefficient >= 0:
            return False
    return poly.eval(dict.fromkeys(symbols, 1)) >= 0 if len(symbols) > 1 else \
        poly.eval(1) >= 0


def _linear(expr) -> bool:
    symbols = list(expr.free_symbols)
    if not symbols:
        return True
    try:
        return sympy.Poly(expr, *symbols).total_degree() <= 1
    except sympy.PolynomialError:
        return False


def _compositions(total: int, parts: int, largest: int):
    """Tuples of `parts` sizes in 1..largest summing to `total`, larger leading values first."""
    if parts == 0:
        if total == 0:
            yield ()
        return
    for first in range(min(largest, total - (parts - 1)), 0, -1):
        rest = total - first
        if rest > (parts - 1) * largest:
            break
        for tail in _compositions(rest, parts - 1, largest):
            yield (first,) + tail


def concrete_values(spec: Spec, choices: dict[str, str], dims: dict[str, int]) -> dict:
    """Dim symbol -> value for every dim that has one: given, bound by the spec, or derived
    from those (through the prover's own composition of derived dims)."""
    symbols = spec.symbols()
    derived = {symbols[let.dim]: let.expr for let in lets(spec, spec.choice_values(choices))}
    given = {name: dim.value for name, dim in spec.dims.items() if dim.value is not None}
    given |= dims
    prover = Prover(list(symbols.values()), [], derived,
                    {symbols[n]: v for n, v in given.items()})
    return {symbol: evaluate(expr, {}) for symbol, expr in prover.substitution.items()
            if not expr.free_symbols}
