"""Tokens and expressions of the spec language, parsed by hand: nothing here ever evaluates text.

One tokenizer serves the whole language; one Pratt parser turns a run of tokens into a small
expression tree (``Name``, ``Number``, ``Binary``, ``Call``...). Dim expressions are turned into
sympy by ``to_sympy``, which walks that tree and accepts only integers, known dims and
``+ - * / ** %``: user text never reaches ``sympify``, ``eval`` or ``exec``.
"""

import re
from dataclasses import dataclass, replace

import sympy
from sympy.printing.precedence import precedence

from tspec.errors import SpecError, SpecSyntaxError
from tspec.numbers import IntegerPrinter

# ---------------------------------------------------------------------------------------------
# Tokens

_TOKEN = re.compile(r"""
    (?P<space>[ \t]+)
  | (?P<comment>\#[^\n]*)
  | (?P<newline>\r?\n)
  | (?P<number>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<string>"[^"\n]*")
  | (?P<op>\*\*|==|!=|<=|>=|->|[-+*/@%()\[\],.:=<>|?])
""", re.VERBOSE)

_OPEN = {"(": ")", "[": "]"}
MAX_NUMBER_DIGITS = 40       # longer literals are refused, never handed to int()
MAX_DEPTH = 100              # nesting of brackets and operators in one expression
MAX_RESULT_DIGITS = 1000     # a constant dim expression may not grow past this
MAX_DEGREE = 256             # of a dim expression in the dims, derived dims put in: so no
#                              dim's value has more than MAX_DEGREE times as many digits as
#                              the values it is computed from (sympy's work on a polynomial of
#                              degree 16,777,216 takes minutes and gigabytes, as does its value)


@dataclass(frozen=True)
class Token:
    kind: str      # 'number', 'name', 'string', 'op', 'newline', 'end'
    text: str
    line: int
    column: int    # 1-based


def tokenize(text: str, file: str | None = None) -> list[Token]:
    """Split spec text into tokens; a newline inside brackets does not end a line."""
    tokens: list[Token] = []
    line, line_start, pos, depth = 1, 0, 0, []
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        column = pos - line_start + 1
        if match is None:
            char = text[pos]
            unclosed = _unclosed(text, line_start, tokens, line)
            if unclosed is not None:
                raise SpecSyntaxError(unclosed[0], file=file, line=line, column=unclosed[1])
            if char == '"':
                raise SpecSyntaxError("a string opened here is not closed on its line (a "
                                      "string opens and closes on one line)", file=file,
                                      line=line, column=column)
            hint = " (strings use double quotes)" if char == "'" else ""
            raise SpecSyntaxError(f"unexpected character {char!r}{hint}", file=file, line=line,
                                  column=column)
        kind, value = match.lastgroup, match.group()
        if kind == "number" and len(value) > MAX_NUMBER_DIGITS:
            raise SpecSyntaxError(f"number with {len(value)} characters; the limit is "
                                  f"{MAX_NUMBER_DIGITS}", file=file, line=line, column=column)
        if kind == "space" and "\t" in value and pos == line_start:
            raise SpecSyntaxError("tab in indentation; indent with spaces", file=file,
                                  line=line, column=column)
        if kind == "string" and "\t" in value:
            raise SpecSyntaxError("tab inside a string", file=file, line=line, column=column)
        if kind == "newline":
            if not depth:
                tokens.append(Token("newline", "\n", line, column))
            line, line_start = line + 1, match.end()
        elif kind not in ("space", "comment"):
            if kind == "op" and value in _OPEN:
                depth.append((_OPEN[value], line, column))
            elif kind == "op" and value in (")", "]"):
                if not depth or depth[-1][0] != value:
                    raise SpecSyntaxError(f"unmatched {value!r}", file=file, line=line,
                                          column=column)
                depth.pop()
            tokens.append(Token(kind, value, line, column))
        pos = match.end()
    if depth:
        closer, open_line, open_column = depth[-1]
        raise SpecSyntaxError(f"bracket opened here is never closed (expected {closer!r})",
                              file=file, line=open_line, column=open_column)
    tokens.append(Token("newline", "\n", line, pos - line_start + 1))
    tokens.append(Token("end", "", line + 1, 1))
    return tokens


def _unclosed(text: str, line_start: int, tokens: list[Token], line: int):
    """Where a line with an odd number of double quotes (a string's closing quote left out:
    ``"d_model d_ff "first weight``) went wrong: the first string of the line that runs
    into a word with no space between, and what to say of it; None for a line whose quotes
    pair up. (Without it, the error falls far to the right, on whatever the unquoted text
    holds that no token takes, an apostrophe, and blames that.)"""
    end = text.find("\n", line_start)
    quotes, inside = 0, False
    for char in text[line_start:end if end >= 0 else len(text)]:
        if char == '"':
            quotes, inside = quotes + 1, not inside
        elif char == "#" and not inside:
            break
    if quotes % 2 == 0:
        return None
    for token in (t for t in tokens if t.line == line and t.kind == "string"):
        after = line_start + token.column - 1 + len(token.text)
        word = re.match(r"[A-Za-z0-9_]+", text[after:])
        if word:
            return ((f"the string {token.text} runs straight into the word {word.group()}, "
                    f"on a line of {quotes} double quotes: is its closing quote missing? (a "
                    "string opens and closes on one line)"), token.column)
    return None


# ---------------------------------------------------------------------------------------------
# Expression trees

@dataclass(frozen=True)
class Node:
    line: int
    column: int


@dataclass(frozen=True)
class Name(Node):
    id: str


@dataclass(frozen=True)
class Number(Node):
    value: int | float
    text: str


@dataclass(frozen=True)
class String(Node):
    value: str


@dataclass(frozen=True)
class Unary(Node):
    op: str
    operand: Node


@dataclass(frozen=True)
class Binary(Node):
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Compare(Node):
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Call(Node):
    func: str
    args: tuple[Node, ...]
    kwargs: tuple[tuple[str, Node], ...]


@dataclass(frozen=True)
class Attribute(Node):
    value: Node
    attr: str


@dataclass(frozen=True)
class Slice(Node):
    """Rows ``start:stop`` of a table (``P[:n]``, ``P[a:b]``); ``start`` None when absent."""
    stop: Node
    start: Node | None = None


@dataclass(frozen=True)
class Subscript(Node):
    value: Node
    index: Node


_BINARY_POWER = {"+": 20, "-": 20, "*": 30, "/": 30, "@": 30, "%": 30, "**": 50}
_COMPARE = {"==", "!=", "<", "<=", ">", ">="}
_UNARY_POWER = 40
_POSTFIX_POWER = 60


class Parser:
    """A Pratt parser over a list of tokens, used by the statement parser for each expression."""

    def __init__(self, tokens: list[Token], file: str | None = None):
        self.tokens = tokens
        self.pos = 0
        self.file = file
        self.depth = 0

    # -- token helpers
    @property
    def peek(self) -> Token:
        return self.tokens[self.pos]

    def next(self) -> Token:
        token = self.tokens[self.pos]
        if token.kind != "end":
            self.pos += 1
        return token

    def at(self, text: str) -> bool:
        return self.peek.kind in ("op", "name") and self.peek.text == text

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.next()
            return True
        return False

    def error(self, message: str, token: Token | None = None) -> SpecSyntaxError:
        token = token or self.peek
        return SpecSyntaxError(message, file=self.file, line=token.line, column=token.column)

    def expect(self, text: str, what: str | None = None) -> Token:
        if not self.at(text):
            found = "end of line" if self.peek.kind in ("newline", "end") else repr(self.peek.text)
            raise self.error(f"expected {what or repr(text)}, found {found}")
        return self.next()

    def expect_name(self, what: str) -> Token:
        if self.peek.kind != "name":
            found = "end of line" if self.peek.kind in ("newline", "end") else repr(self.peek.text)
            raise self.error(f"expected {what}, found {found}")
        return self.next()

    def at_line_end(self) -> bool:
        return self.peek.kind in ("newline", "end")

    # -- expressions
    def expression(self, min_power: int = 0) -> Node:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise self.error(f"expression nests more than {MAX_DEPTH} levels deep")
            return self._expression(min_power)
        finally:
            self.depth -= 1

    def _expression(self, min_power: int) -> Node:
        left = self._prefix()
        while True:
            token = self.peek
            if token.kind != "op":
                break
            op = token.text
            if op in _COMPARE and min_power < 10:
                self.next()
                right = self.expression(11)
                left = Compare(token.line, token.column, op, left, right)
                if self.peek.kind == "op" and self.peek.text in _COMPARE:
                    raise self.error("comparisons cannot be chained; write two 'require' lines")
                continue
            power = _BINARY_POWER.get(op)
            if power is not None and power > min_power:
                self.next()
                # '**' is right-associative; the others are left-associative.
                right = self.expression(power - 1 if op == "**" else power)
                left = Binary(token.line, token.column, op, left, right)
                continue
            if op in ("(", ".", "[") and _POSTFIX_POWER > min_power:
                left = self._postfix(left)
                continue
            break
        return left

    def _prefix(self) -> Node:
        token = self.next()
        if token.kind == "number":
            value = float(token.text) if any(c in token.text for c in ".eE") else int(token.text)
            return Number(token.line, token.column, value, token.text)
        if token.kind == "name":
            return Name(token.line, token.column, token.text)
        if token.kind == "string":
            return String(token.line, token.column, token.text[1:-1])
        if token.kind == "op" and token.text == "-":
            operand = self.expression(_UNARY_POWER)
            return Unary(token.line, token.column, "-", operand)
        if token.kind == "op" and token.text == "(":
            inner = self.expression()
            self.expect(")")
            return inner
        found = "end of line" if token.kind in ("newline", "end") else repr(token.text)
        raise self.error(f"expected an expression, found {found}", token)

    def _postfix(self, left: Node) -> Node:
        token = self.next()
        if token.text == ".":
            attr = self.expect_name("an attribute name after '.'")
            return Attribute(token.line, token.column, left, attr.text)
        if token.text == "[":
            if self.accept(":"):
                index: Node = Slice(token.line, token.column, self.expression())
            else:
                index = self.expression()
                if self.accept(":"):
                    index = Slice(token.line, token.column, self.expression(), index)
            self.expect("]")
            return Subscript(token.line, token.column, left, index)
        # a call: only a plain name can be called
        if not isinstance(left, Name):
            raise self.error("only a function name can be called", token)
        args: list[Node] = []
        kwargs: list[tuple[str, Node]] = []
        while not self.at(")"):
            if (self.peek.kind == "name" and self.tokens[self.pos + 1].text == "="
                    and self.tokens[self.pos + 1].kind == "op"):
                key = self.next().text
                self.next()
                if any(k == key for k, _ in kwargs):
                    raise self.error(f"keyword argument {key!r} given twice")
                kwargs.append((key, self.expression()))
            else:
                if kwargs:
                    raise self.error("positional argument after a keyword argument")
                args.append(self.expression())
            if not self.accept(","):
                break
        self.expect(")", "')' or ','")
        return Call(left.line, left.column, left.id, tuple(args), tuple(kwargs))


def parse_expression(text: str, file: str | None = None) -> Node:
    """Parse one whole expression from text (used for shape tokens and command-line values)."""
    parser = Parser(tokenize(text, file), file)
    node = parser.expression()
    # one logical line: a newline token, then the end (a line break inside brackets is fine)
    if parser.peek.kind != "newline" or parser.tokens[parser.pos + 1].kind != "end":
        following = parser.peek if parser.peek.kind != "newline" else \
            parser.tokens[parser.pos + 1]
        raise parser.error(f"unexpected {following.text!r} after the expression", following)
    return node


def to_text(node: Node) -> str:
    """The plain form of an expression, normalised (spacing, parentheses only where needed)."""
    return _text(node, 0)


def _text(node: Node, outer: int) -> str:
    if isinstance(node, Name):
        return node.id
    if isinstance(node, Number):
        return node.text
    if isinstance(node, String):
        return f'"{node.value}"'
    if isinstance(node, Unary):
        inner = "-" + _text(node.operand, _UNARY_POWER)
        return f"({inner})" if outer > _UNARY_POWER else inner
    if isinstance(node, Binary):
        power = _BINARY_POWER[node.op]
        left_power, right_power = (power + 1, power) if node.op == "**" else (power, power + 1)
        inner = f"{_text(node.left, left_power)} {node.op} {_text(node.right, right_power)}"
        return f"({inner})" if outer > power else inner
    if isinstance(node, Compare):
        inner = f"{_text(node.left, 11)} {node.op} {_text(node.right, 11)}"
        return f"({inner})" if outer > 10 else inner
    if isinstance(node, Call):
        parts = [_text(a, 0) for a in node.args] + [f"{k}={_text(v, 0)}" for k, v in node.kwargs]
        return f"{node.func}({', '.join(parts)})"
    if isinstance(node, Attribute):
        # a number before the dot is bracketed: "1.T" would read as the number "1." and T
        value = f"({node.value.text})" if isinstance(node.value, Number) else \
            _text(node.value, _POSTFIX_POWER)
        return f"{value}.{node.attr}"
    if isinstance(node, Subscript):
        index = node.index
        if isinstance(index, Slice):
            start = "" if index.start is None else _text(index.start, 0)
            text = f"{start}:{_text(index.stop, 0)}"
        else:
            text = _text(index, 0)
        return f"{_text(node.value, _POSTFIX_POWER)}[{text}]"
    raise TypeError(f"not an expression node: {node!r}")


def renamed(node: Node, names: dict) -> Node:
    """The expression with names replaced: ``names`` maps a name to a new name (a plain name,
    or the function a call names) or to an expression that takes its place."""
    if isinstance(node, Name):
        new = names.get(node.id)
        if new is None:
            return node
        return replace(node, id=new) if isinstance(new, str) else new
    if isinstance(node, Call):
        func = names.get(node.func)
        return replace(node, func=func if isinstance(func, str) else node.func,
                       args=tuple(renamed(a, names) for a in node.args),
                       kwargs=tuple((k, renamed(v, names)) for k, v in node.kwargs))
    if isinstance(node, (Unary, Attribute)):
        field_name = "operand" if isinstance(node, Unary) else "value"
        return replace(node, **{field_name: renamed(getattr(node, field_name), names)})
    if isinstance(node, (Binary, Compare)):
        return replace(node, left=renamed(node.left, names), right=renamed(node.right, names))
    if isinstance(node, Subscript):
        return replace(node, value=renamed(node.value, names), index=renamed(node.index, names))
    if isinstance(node, Slice):
        return replace(node, stop=renamed(node.stop, names),
                       start=None if node.start is None else renamed(node.start, names))
    return node


# ---------------------------------------------------------------------------------------------
# Dim expressions as sympy, through a whitelist

def too_many_digits(base: sympy.Basic, exponent: sympy.Basic) -> bool:
    """Whether a rational ``base`` to the power ``exponent`` (a number) would have more than
    MAX_RESULT_DIGITS digits: computed exactly, it would take as long as that takes."""
    return base.is_Rational and base != 0 and abs(exponent) * (
        len(str(abs(base.p))) + len(str(base.q))) > MAX_RESULT_DIGITS


def degree(expr, degrees: dict | None = None) -> int:
    """The total degree of a dim expression in the dims, its denominators counted too
    (``d_model / H``: 2; ``(d + 1)**3``: 3): a bound on how many times the digits of the dims'
    values its value can have. ``degrees``: derived dims, each as the degree of what it
    stands for (1 for every other dim)."""
    memo: dict = {}

    def walk(e) -> int:
        if isinstance(e, sympy.Symbol):
            return degrees.get(e, 1) if degrees else 1
        if not e.args:                                # a number
            return 0
        found = memo.get(e)
        if found is None:
            if isinstance(e, sympy.Pow) and e.exp.is_Rational:
                found = walk(e.base) * abs(int(sympy.ceiling(abs(e.exp))))
            elif isinstance(e, (sympy.Mul, sympy.Pow)):
                found = sum(walk(a) for a in e.args)
            else:                                     # a sum, Mod, a comparison, floor
                found = max(walk(a) for a in e.args)
            memo[e] = found
        return found
    return walk(sympy.sympify(expr))


def dependency_order(definitions: dict) -> list:
    """The keys of ``definitions`` (dim symbol -> the expression it stands for) in an order
    where each comes after every key its expression uses: depth first, without recursion (a
    chain of thousands of derived dims), a cycle (the checker names it) broken anywhere."""
    order: list = []
    seen: set = set()
    for root, expr in definitions.items():
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(expr.free_symbols))]
        while stack:
            symbol, uses = stack[-1]
            for used in uses:
                if used in definitions and used not in seen:
                    seen.add(used)
                    stack.append((used, iter(definitions[used].free_symbols)))
                    break
            else:
                stack.pop()
                order.append(symbol)
    return order


def derived_degrees(lets: dict) -> dict:
    """Each derived dim's degree (dim symbol -> its definition's degree, the derived dims it
    uses put in: ``let b = a**4`` with ``let a = d**64`` is 256)."""
    degrees: dict = {}
    for symbol in dependency_order(lets):
        degrees[symbol] = degree(lets[symbol], {s: degrees[s] for s in
                                                lets[symbol].free_symbols if s in degrees})
    return degrees


def to_sympy(node: Node, symbols: dict[str, sympy.Symbol], *, file: str | None = None,
             what: str = "dim expression", relational: bool = False) -> sympy.Basic:
    """Build the sympy expression for a dim expression tree, accepting only known dims.

    Integers, dims from ``symbols``, ``+ - * /``, ``%`` and ``**`` with a non-negative integer
    exponent; with ``relational`` one top-level comparison is allowed too.
    """
    def fail(n: Node, message: str) -> SpecError:
        return SpecError(message, file=file, line=n.line, column=n.column)

    def walk(n: Node) -> sympy.Basic:
        if isinstance(n, Number):
            if isinstance(n.value, float):
                raise fail(n, f"{what}: {n.text} is not an integer (dims are whole numbers)")
            return sympy.Integer(n.value)
        if isinstance(n, Name):
            if n.id not in symbols:
                raise fail(n, f"unknown dim {n.id!r} in {what}")
            return symbols[n.id]
        if isinstance(n, Unary):
            return -walk(n.operand)
        if isinstance(n, Binary):
            left, right = walk(n.left), walk(n.right)
            if n.op == "+":
                return left + right
            if n.op == "-":
                return left - right
            if n.op == "*":
                return left * right
            if n.op == "/":
                if right == 0:
                    raise fail(n, f"{what}: division by zero")
                return left / right
            if n.op == "%":
                if right == 0:
                    raise fail(n, f"{what}: modulo by zero")
                try:
                    return sympy.Mod(left, right)
                except RecursionError:       # sympy's Mod on some fractional operands
                    raise fail(n, f"{what}: the remainder {to_text(n)} cannot be simplified; "
                                  "write it with whole-number operands") from None
            if n.op == "**":
                if not (isinstance(right, sympy.Integer) and 0 <= right <= 64):
                    raise fail(n, f"{what}: exponents must be integers from 0 to 64")
                if too_many_digits(left, right):
                    raise fail(n, f"{what}: {to_text(n)} has more than {MAX_RESULT_DIGITS} "
                                  "digits")
                if degree(left) * int(right) > MAX_DEGREE:
                    raise fail(n, f"{what}: {to_text(n)} has degree "
                                  f"{degree(left) * int(right):,} in the dims; the limit is "
                                  f"{MAX_DEGREE}")
                return left ** right
            raise fail(n, f"{what}: operator {n.op!r} is not allowed here")
        if isinstance(n, Compare) and relational and n is node:
            left, right = walk(n.left), walk(n.right)
            return _RELATIONS[n.op](left, right)
        raise fail(n, f"{what}: {to_text(n)!r} is not a dim expression "
                      "(use integers, dim names, + - * / % **)")

    expr = walk(node)
    if degree(expr) > MAX_DEGREE:
        raise fail(node, f"{what}: {to_text(node)} has degree {degree(expr):,} in the dims; "
                         f"the limit is {MAX_DEGREE}")
    if any(abs(number.p) >= _TOO_LONG or number.q >= _TOO_LONG
           for number in expr.atoms(sympy.Rational)):
        # each constant and power is within bounds, but their product or sum is not
        raise fail(node, f"{what}: {to_text(node)} makes a number of more than "
                         f"{MAX_RESULT_DIGITS} digits")
    return expr


_TOO_LONG = 10 ** MAX_RESULT_DIGITS

_RELATIONS = {
    "==": lambda a, b: sympy.Eq(a, b, evaluate=False),
    "!=": lambda a, b: sympy.Ne(a, b, evaluate=False),
    "<": lambda a, b: sympy.StrictLessThan(a, b, evaluate=False),
    "<=": lambda a, b: sympy.LessThan(a, b, evaluate=False),
    ">": lambda a, b: sympy.StrictGreaterThan(a, b, evaluate=False),
    ">=": lambda a, b: sympy.GreaterThan(a, b, evaluate=False),
}


# ---------------------------------------------------------------------------------------------
# Dim expressions printed back in the language

class _LanguagePrinter(IntegerPrinter):
    """sympy's own printer, its integers as ``spec.numbers`` shows them (Python's precedence, which the language shares: ``+ -`` below
    ``* / %`` below unary ``-`` below ``**``), with ``%`` for a remainder and the language's
    comparisons: what it prints parses back to the same expression."""

    def _print_Mod(self, expr):
        n, d = expr.args
        # left-associative: a product on the left needs no brackets; on the right, anything
        # but a name, a whole number or a power of one does (1/T is a division too)
        right = self._print(d)
        if not (d.is_Symbol or (d.is_Integer and d >= 0) or
                (d.is_Pow and d.base.is_Symbol and d.exp.is_Integer and d.exp > 0)):
            right = f"({right})"
        return f"{self.parenthesize(n, precedence(expr), strict=True)} % {right}"

    def _as_ordered_terms(self, expr, order=None):
        # sympy's order, with the terms it subtracts last: ``n - m``, not ``-m + n``
        terms = super()._as_ordered_terms(expr, order=order)
        return sorted(terms, key=lambda term: term.could_extract_minus_sign())

    def _print_Mul(self, expr):
        # sympy prints -(d_model % H) as -d_model % H, which is (-d_model) % H: a leading
        # minus binds tighter than %, so a remainder under one is bracketed
        if expr.has(sympy.Mod) and expr.could_extract_minus_sign():
            positive = -expr
            text = self._print(positive)
            return f"-({text})" if isinstance(positive, (sympy.Mod, sympy.Add)) else f"-{text}"
        return super()._print_Mul(expr)

    def _print_Pow(self, expr, rational=False):
        # 1/H**2, not H**(-2): the language's exponents are whole numbers from 0 to 64
        if expr.exp.is_Integer and expr.exp < -1:
            return f"1/{self._print(sympy.Pow(expr.base, -expr.exp))}"
        return super()._print_Pow(expr, rational)

    def _print_Relational(self, expr):
        return f"{self._print(expr.lhs)} {expr.rel_op} {self._print(expr.rhs)}"


def dim_text(expr: sympy.Basic) -> str:
    """A dim expression, or a constraint, as the language writes it: ``d_model % (2*H) == 0``,
    ``T_new + T_past <= max_len``; it parses back to the same expression."""
    return _LanguagePrinter().doprint(expr)  # a printer per call: it keeps state as it prints
