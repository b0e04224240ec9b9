"""Terms: an equation's expression tree, lowered into the model's terms.

Owns ``Lowering``, which turns one scope's expression trees into op trees (``OpNode``,
``TensorRef``, ``ScalarExpr``) and each equation into its records: an ``Equation`` or a
``BlockCall``, or, where it calls a choice or reads a tensor absent under some options, the one
each way of setting them gives, as `when`s (a way that gives none is a ``Flaw``). It owns
``chain`` too, which joins bodies that differ by a choice's option into `when`s; ``building``
uses it for a `from` block's body as well. It hands the records to ``building``, which asks for
them an equation at a time.
"""

from dataclasses import dataclass, replace
from fractions import Fraction

import sympy

from tspec.errors import SpecError
from tspec.language.model import BlockCall, Equation, Flaw, OpNode, ScalarExpr, TensorRef, When
from tspec.language.names import did_you_mean
from tspec.language.reading import RawEquation
from tspec.ops.catalogue import ACTIVATIONS, FUNCTIONS, OPERATORS, OPS, SCALAR_FUNCTIONS
from tspec.symbolic import expr as ex

MAX_WAYS = 4096           # bodies one equation or one `from` expands to, over the choices


def chain(choice: str, subtrees: list, file: str | None, line: int) -> tuple[list, object]:
    """Bodies that differ by one choice's option as one body: ``subtrees`` holds (option,
    (statements, signature)); options whose statements are the same (by signature) share a
    `when`, the last group is the `else:` of the one before. Returns the statements and their
    signature."""
    groups: dict = {}
    for option, (statements, signature) in subtrees:
        groups.setdefault(signature, (statements, []))[1].append(option)
    items = list(groups.items())
    if len(items) == 1:
        return items[0][1][0], items[0][0]
    statements = items[-1][1][0]
    for _, (body, options) in reversed(items[:-1]):
        statements = [When(choice, frozenset(options), body, statements, file, line)]
    return statements, (choice, tuple((frozenset(options), signature)
                                      for signature, (_, options) in items))


def _children(node: ex.Node) -> list[tuple[str, object]]:
    """The fields of an expression node that hold expressions (a call's arguments as a tuple,
    its keyword arguments as a tuple of pairs)."""
    if isinstance(node, ex.Unary):
        return [("operand", node.operand)]
    if isinstance(node, (ex.Binary, ex.Compare)):
        return [("left", node.left), ("right", node.right)]
    if isinstance(node, ex.Call):
        return [("args", node.args), ("kwargs", node.kwargs)]
    if isinstance(node, ex.Attribute):
        return [("value", node.value)]
    if isinstance(node, ex.Subscript):
        return [("value", node.value), ("index", node.index)]
    if isinstance(node, ex.Slice):
        return [("stop", node.stop), ("start", node.start)]
    return []


def _nodes(node: ex.Node | None):
    """Every node of an expression, the node first."""
    if node is None:
        return
    yield node
    for _, value in _children(node):
        for item in value if isinstance(value, tuple) else (value,):
            yield from _nodes(item[1] if isinstance(item, tuple) else item)


class _Flawed(Exception):
    """An equation that cannot stand under some options (see ``model.Flaw``)."""

    def __init__(self, kind: str, message: str, hint: str = ""):
        super().__init__(message)
        self.kind, self.message, self.hint = kind, message, hint


@dataclass(frozen=True)
class _Absent:
    """What an expression is when every term of it is absent: the absent names."""
    names: tuple[str, ...]


class Lowering:
    """Expression trees to op trees, in one scope: names are tensors, dims, or errors."""

    def __init__(self, file, symbols: dict, tensors: set, blocks: set,
                 choices: dict | None = None, optional: dict | None = None,
                 expand_by=lambda count: None):
        self.file = file
        self.symbols = symbols
        self.tensors = tensors
        self.blocks = blocks
        self.choices = choices or {}
        self.optional = optional or {}     # tensor -> ((choice, options it is present under), ...)
        self.expand_by = expand_by         # counts the equations variants make (a bound)

    def error(self, message, node) -> SpecError:
        return SpecError(message, file=self.file, line=node.line, column=node.column)

    def variants(self, raw: RawEquation) -> list:
        """An equation's records: the equation, or where it calls a choice (``activation(X)``)
        or reads a tensor absent under some options (``if ...``), the equation each way of
        setting those choices gives, as `when`s (ways that give the same equation share one;
        a way that gives none is a Flaw)."""
        called, read = set(), set()
        for node in _nodes(raw.rhs):
            if isinstance(node, ex.Call) and self.chooses(node):
                if len(node.args) != 1 or node.kwargs:
                    raise self.error(f"{node.func}(...) applies the op its option names to one "
                                     "tensor: give it one argument", node)
                called.add(node.func)
            elif isinstance(node, ex.Name) and node.id in self.optional:
                read.add(node.id)
        if not called and not read:
            return [self.equation(raw)]
        involved = called | {choice for name in read for choice, _ in self.optional[name]}
        order = [name for name in self.choices if name in involved]
        ways = 1
        for name in order:
            ways *= len(self.choices[name].options)
        if ways > MAX_WAYS:
            raise self.error(f"{raw.name}: its choices and absent operands make {ways:,} "
                             f"equations; the limit is {MAX_WAYS:,}", raw.rhs)
        self.expand_by(ways)
        made: dict = {}

        def leaf(chosen: dict) -> tuple[list, object]:
            try:
                rhs = self.varied(raw, chosen, called)
                key = ex.to_text(rhs)
                if key not in made:
                    made[key] = self.equation(replace(raw, rhs=rhs))
            except _Flawed as flaw:
                key = (flaw.kind, flaw.message)
                if key not in made:
                    made[key] = Flaw(flaw.kind, flaw.message, raw.name, ex.to_text(raw.rhs),
                                     flaw.hint, self.file, raw.line)
            return [made[key]], key

        def tree(chosen: dict, rest: list) -> tuple[list, object]:
            if not rest:
                return leaf(chosen)
            return chain(rest[0], [(o, tree(chosen | {rest[0]: o}, rest[1:]))
                                   for o in self.choices[rest[0]].options], self.file, raw.line)

        return tree({}, order)[0]

    def chooses(self, node: ex.Call) -> bool:
        """Whether a call names a choice (the op its option names), not an op or a block."""
        return node.func in self.choices and node.func not in FUNCTIONS and \
            node.func not in SCALAR_FUNCTIONS and node.func not in self.blocks

    def varied(self, raw: RawEquation, chosen: dict, called: set) -> ex.Node:
        """The right-hand side under these options: each choice called as the op its option
        names, each absent tensor dropped as a term of + or - (raises _Flawed where it is
        something else, or where no term is left)."""
        absent = {name for name, condition in self.optional.items()
                  if any(chosen.get(choice, next(iter(options))) not in options
                         for choice, options in condition)}

        def under(name: str) -> str:
            return ", ".join(f"{choice}={chosen[choice]}" for choice, _ in self.optional[name])

        def vary(node: ex.Node):
            if isinstance(node, ex.Name):
                return _Absent((node.id,)) if node.id in absent else node
            if isinstance(node, ex.Binary) and node.op in ("+", "-"):
                left, right = vary(node.left), vary(node.right)
                if isinstance(left, _Absent) and isinstance(right, _Absent):
                    return _Absent(left.names + right.names)
                if isinstance(right, _Absent):
                    return left
                if isinstance(left, _Absent):
                    return right if node.op == "+" else ex.Unary(node.line, node.column, "-",
                                                                  right)
                return replace(node, left=left, right=right)
            if isinstance(node, ex.Unary) and node.op == "-":
                operand = vary(node.operand)
                return operand if isinstance(operand, _Absent) else \
                    replace(node, operand=operand)
            if isinstance(node, ex.Call) and node.func in called:
                option = chosen[node.func]
                if FUNCTIONS.get(option) not in ACTIVATIONS:
                    raise _Flawed("not-an-op", f"{node.func}={option} names no activation op; "
                                  f"put this equation under `when {node.func} != {option}`")
                node = replace(node, func=option)
            parts = {}
            for key, value in _children(node):
                if isinstance(value, tuple):      # a call's arguments or keyword arguments
                    parts[key] = tuple((v[0], term(v[1])) if isinstance(v, tuple) else term(v)
                                       for v in value)
                else:
                    parts[key] = term(value)
            return replace(node, **parts) if parts else node

        def term(node: ex.Node | None):
            """An operand that is not a term of + or -: an absent one is a flaw."""
            if node is None:
                return None
            varied = vary(node)
            if isinstance(varied, _Absent):
                name = varied.names[0]
                raise _Flawed("absent-operand", f"{name} is absent under {under(name)}; only a "
                              "term of + or - may be absent",
                              f"declare {name} without 'if', or add it as a term")
            return varied

        result = vary(raw.rhs)
        if isinstance(result, _Absent):
            names = " and ".join(dict.fromkeys(result.names))
            raise _Flawed("absent-operand", f"{raw.name} has no term left under "
                          f"{under(result.names[0])}: {names} "
                          f"{'is' if len(set(result.names)) == 1 else 'are'} absent",
                          "keep a term that is always present")
        return result

    def equation(self, raw: RawEquation):
        rhs = raw.rhs
        text = ex.to_text(rhs)
        if isinstance(rhs, ex.Call) and (rhs.func in self.blocks or rhs.func == "repeat"):
            return self.block_call(raw, rhs, text)
        if raw.instance is not None:
            raise self.error("'as' names a block call; this is not one", rhs)
        term = self.lower(rhs)
        if isinstance(term, ScalarExpr):
            raise self.error(f"{raw.name} = {text} is a dim expression, not a tensor", rhs)
        return Equation(raw.name, term, text, raw.source, self.file, raw.line)

    def block_call(self, raw: RawEquation, call: ex.Call, text: str) -> BlockCall:
        args = list(call.args)
        count = None
        if call.kwargs:
            raise self.error("block calls take positional arguments only", call)
        if call.func == "repeat":
            if len(args) < 3:
                raise self.error("repeat(N, block, input, ...) needs a count, a block and "
                                 "at least one input", call)
            count = ex.to_sympy(args[0], self.symbols, file=self.file, what="repeat count")
            target = args[1]
            if not isinstance(target, ex.Name) or target.id not in self.blocks:
                raise self.error(f"repeat: {ex.to_text(target)!r} is not a block", target)
            block = target.id
            args = args[2:]
        else:
            block = call.func
        names = []
        for arg in args:
            if not isinstance(arg, ex.Name) or arg.id not in self.tensors:
                raise self.error(f"arguments of a block call are tensor names; "
                                 f"{ex.to_text(arg)!r} is not one (name it in an equation "
                                 "first)", arg)
            names.append(arg.id)
        return BlockCall(raw.name, block, tuple(names), raw.instance or block, count, text,
                         raw.source, self.file, raw.line)

    def lower(self, node: ex.Node):
        term = self._lower(node)
        if isinstance(term, OpNode) and not term.text:
            term = replace(term, text=ex.to_text(node))      # for the checker's messages
        return term

    def _lower(self, node: ex.Node):
        if isinstance(node, ex.Name):
            if node.id in self.tensors:
                return TensorRef(node.id, node.line, node.column)
            if node.id in self.symbols:
                return ScalarExpr(self.symbols[node.id], node.line, node.column)
            known = list(self.tensors) + list(self.symbols)
            raise self.error(f"unknown name {node.id!r}: not a tensor or dim here"
                             f"{did_you_mean(node.id, known)}", node)
        if isinstance(node, ex.Number):
            if isinstance(node.value, int):
                return ScalarExpr(sympy.Integer(node.value), node.line, node.column)
            exact = Fraction(node.text)
            return ScalarExpr(sympy.Rational(exact.numerator, exact.denominator), node.line,
                              node.column)
        if isinstance(node, ex.String):
            raise self.error("a string stands only as einsum's pattern", node)
        if isinstance(node, ex.Unary):
            operand = self.lower(node.operand)
            if isinstance(operand, ScalarExpr):
                return ScalarExpr(-operand.expr, node.line, node.column)
            return OpNode("neg", (operand,), (), node.line, node.column)
        if isinstance(node, ex.Binary):
            return self.binary(node)
        if isinstance(node, ex.Compare):
            raise self.error("comparisons belong in 'require' lines", node)
        if isinstance(node, ex.Call):
            return self.call(node)
        if isinstance(node, ex.Attribute):
            if node.attr != "T":
                raise self.error(f"unknown attribute .{node.attr} (only .T, the transpose of "
                                 "the last two axes)", node)
            value = self.tensor_arg(node.value, ".T")
            return OpNode("transpose", (value,), (), node.line, node.column)
        if isinstance(node, ex.Subscript):
            value = self.tensor_arg(node.value, "indexing")
            if isinstance(node.index, ex.Slice):
                # slice_rows(P, stop) for P[:n], slice_rows(P, stop, start) for P[a:b]
                bounds = [node.index.stop] + ([] if node.index.start is None
                                              else [node.index.start])
                lowered = tuple(self.lower(bound) for bound in bounds)
                if not all(isinstance(bound, ScalarExpr) for bound in lowered):
                    raise self.error("a slice [:n] or [a:b] takes dim expressions", node.index)
                return OpNode("slice_rows", (value,) + lowered, (), node.line, node.column)
            index = self.tensor_arg(node.index, "an index")
            return OpNode("gather", (value, index), (), node.line, node.column)
        raise self.error(f"unsupported expression {ex.to_text(node)!r}", node)

    def tensor_arg(self, node: ex.Node, what: str):
        term = self.lower(node)
        if isinstance(term, ScalarExpr):
            raise self.error(f"{what} needs a tensor, got the dim expression "
                             f"{ex.to_text(node)!r}", node)
        return term

    def require_small_power(self, base, exponent, node: ex.Binary) -> None:
        """A power's exponent is a number from -64 to 64 (dim expressions: 0 to 64), and a
        number raised to it stays within the digits a constant may have: ``1.5 ** 1e9``
        would otherwise be computed, exactly, for as long as it takes."""
        if not (exponent.is_number and abs(exponent) <= 64):
            raise self.error(f"{ex.to_text(node)}: exponents are numbers from -64 to 64", node)
        if base is not None and ex.too_many_digits(base, exponent):
            raise self.error(f"{ex.to_text(node)} has more than {ex.MAX_RESULT_DIGITS} digits",
                             node)

    def binary(self, node: ex.Binary):
        left, right = self.lower(node.left), self.lower(node.right)
        scalar_left, scalar_right = isinstance(left, ScalarExpr), isinstance(right, ScalarExpr)
        if scalar_left and scalar_right:
            a, b = left.expr, right.expr
            if node.op == "%":
                raise self.error("'%' belongs in constraints", node)
            if node.op == "@":
                raise self.error("'@' needs tensors", node)
            if node.op == "/" and b == 0:
                raise self.error("division by zero", node)
            if node.op == "**":
                self.require_small_power(a, b, node)
            value = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
                     "/": lambda: a / b, "**": lambda: a ** b}[node.op]()
            return ScalarExpr(value, node.line, node.column)
        if node.op == "%":
            raise self.error("'%' is not defined on tensors", node)
        if node.op == "/" and scalar_right and right.expr == 0:
            raise self.error("division by zero", node)
        if node.op in ("*", "/") and (scalar_left or scalar_right) and not \
                (node.op == "/" and scalar_left):
            tensor, scalar = (right, left) if scalar_left else (left, right)
            return OpNode("scale", (tensor, scalar), (("divide", node.op == "/"),),
                          node.line, node.column)
        if node.op == "**" and not scalar_right:
            raise self.error("'**' raises a tensor to a scalar power", node)
        if node.op == "**":
            self.require_small_power(None, right.expr, node)
        return OpNode(OPERATORS[node.op], (left, right), (), node.line, node.column)

    def call(self, node: ex.Call):
        if node.func in SCALAR_FUNCTIONS:
            if len(node.args) != 1 or node.kwargs:
                raise self.error(f"{node.func}() takes one argument", node)
            arg = self.lower(node.args[0])
            if not isinstance(arg, ScalarExpr):
                raise self.error(f"{node.func}() here applies to dim expressions "
                                 "(sqrt(d_k)), not tensors", node)
            return ScalarExpr(SCALAR_FUNCTIONS[node.func](arg.expr), node.line, node.column)
        if node.func in self.blocks or node.func == "repeat":
            raise self.error(f"block {node.func} can only be called as a whole equation: "
                             f"Y = {node.func}(...)", node)
        if node.func not in FUNCTIONS:
            raise self.error(f"unknown function {node.func!r}"
                             f"{did_you_mean(node.func, list(FUNCTIONS) + list(SCALAR_FUNCTIONS))}",
                             node)
        op = OPS[FUNCTIONS[node.func]]
        args = list(node.args)
        attrs = dict(op.attrs)
        if op.name == "einsum":
            if not args or not isinstance(args[0], ex.String):
                raise self.error('einsum takes its pattern first: einsum("ij,jk->ik", A, B)',
                                 node)
            attrs["spec"] = args[0].value
            lowered = tuple(self.tensor_arg(a, "einsum") for a in args[1:])
            if not lowered:
                raise self.error("einsum needs at least one operand", node)
            return OpNode("einsum", lowered, tuple(sorted(attrs.items())), node.line,
                          node.column)
        if not len(op.params) - op.optional <= len(args) <= len(op.params):
            raise self.error(f"{node.func}() takes {op.arity()}, got {len(args)}", node)
        lowered = []
        for kind, arg in zip(op.params, args):
            term = self.lower(arg)
            if kind == "tensor" and isinstance(term, ScalarExpr):
                raise self.error(f"{node.func}(): {ex.to_text(arg)!r} must be a tensor", arg)
            if kind == "dim" and not isinstance(term, ScalarExpr):
                raise self.error(f"{node.func}(): {ex.to_text(arg)!r} must be a dim "
                                 "expression", arg)
            lowered.append(term)
        for key, value in node.kwargs:
            if key not in op.attrs:
                raise self.error(f"{node.func}() has no option {key!r}"
                                 f"{'; options: ' + ', '.join(op.attrs) if op.attrs else ''}",
                                 value)
            attrs[key] = self.static_int(value, f"{node.func}({key}=...)")
        return OpNode(op.name, tuple(lowered), tuple(sorted(attrs.items())), node.line,
                      node.column)

    def static_int(self, node: ex.Node, what: str) -> int:
        sign = 1
        if isinstance(node, ex.Unary):
            sign, node = -1, node.operand
        if isinstance(node, ex.Number) and isinstance(node.value, int):
            return sign * node.value
        raise self.error(f"{what} takes an integer literal", node)
