"""The claims of one run: each equation's inferred shape against its declaration, the
sizes a shape must have, unstated and implied shapes, and each update against its state.
"""

from dataclasses import replace

import sympy

from tspec.checking.findings import Finding
from tspec.checking.prove import SEARCH_MAX, Verdict
from tspec.checking.scope import Doubt, Scope, TensorRow
from tspec.language.model import (
    NEW,
    PAST,
    Equation,
    OpNode,
    ScalarExpr,
    TensorDecl,
    TensorRef,
    Update,
)
from tspec.ops.base import Value
from tspec.ops.catalogue import OPS
from tspec.symbolic.shape import Shape, format_expr


class Claims:
    """The run's claims: each equation's inferred shape against its declaration, the sizes
    a shape must have, unstated and implied shapes, and each update against its state."""

    def check_update(self, scope: Scope, update: Update, state: TensorDecl) -> None:
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
        resolve = Scope(self, "", {}, None).resolve_shape
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

    def check_sizes(self, scope: Scope, decl: TensorDecl, shape: Shape) -> None:
        """Every size in a declared shape is a positive whole number for all allowed sizes."""
        key = (id(decl), shape, self.prover_key, scope.prefix)
        known = self.memo.sizes.get(key)
        if known is not None:
            self.findings.extend(known)
            return
        start = len(self.findings)
        self._check_sizes(scope, decl, shape)
        self.memo.sizes[key] = self.findings[start:]

    def _check_sizes(self, scope: Scope, decl: TensorDecl, shape: Shape) -> None:
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

    def check_equation(self, scope: Scope, record: Equation, declared: TensorDecl | None):
        scope.equation = record
        before = len(self.findings)
        value = self.infer(scope, record.expr)
        # when the operands fit but the claim differs, the claim is what is wrong: later
        # equations go on from the inferred shape, so one mistake is reported once
        self.compare(scope, record, declared, value, trust_inferred=len(self.findings) == before)

    def compare(self, scope: Scope, record, declared: TensorDecl | None, value: Value,
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
                scope.suspect[name] = Doubt(Value(other, declared.dtype, tensor=name),
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

    def claim_uses(self, scope: Scope, record: Equation, claim: Shape, inferred: Shape,
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

    def compare_shapes(self, scope: Scope, record, claim: Shape, inferred: Shape,
                       declared: TensorDecl | None = None) -> None:
        scope.equation = record
        name = record.output
        stated = claim                                     # the claim as written, for reports

        def report(message, verdict, exprs):
            # in the block's own terms: its local dims where the call bound them
            shape = _unbound(inferred, scope.binding)
            family = "" if shape.family is None else f"[{format_expr(shape.family)}]"
            hint = f"declare {name}{family} as \"{declaration(shape)}\", or fix the equation"
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

    def giving(self, scope: Scope, record: Equation, claim: Shape,
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

    def infer(self, scope: Scope, term) -> Value:
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


def declaration(shape: Shape) -> str:
    return " ".join(format_expr(d) for d in shape.dims)
