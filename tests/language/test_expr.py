"""The tokenizer, the Pratt parser, to_text and the to_sympy whitelist (spec.expr)."""

import itertools
import re
import string

import pytest
import sympy
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tspec.checking.prove import evaluate
from tspec.errors import SpecError, SpecSyntaxError, TspecError
from tspec.symbolic import expr as ex
from tspec.symbolic.shape import dim_symbol

DIMS = {name: dim_symbol(name) for name in ("d_model", "H", "T", "max_len", "d_k")}


def parse(text):
    return ex.parse_expression(text, file="e.tspec")


def sym(text, relational=False):
    return ex.to_sympy(parse(text), DIMS, file="e.tspec", what="dim expression",
                       relational=relational)


# ---------------------------------------------------------------------------------------------
# Tokens

def test_tokenize_kinds_and_positions():
    tokens = ex.tokenize('Y "B T" = X ** 2  # comment\n  Z', "e.tspec")
    assert [(t.kind, t.text, t.line, t.column) for t in tokens] == [
        ("name", "Y", 1, 1), ("string", '"B T"', 1, 3), ("op", "=", 1, 9),
        ("name", "X", 1, 11), ("op", "**", 1, 13), ("number", "2", 1, 16),
        ("newline", "\n", 1, 28), ("name", "Z", 2, 3), ("newline", "\n", 2, 4),
        ("end", "", 3, 1)]


def test_newline_inside_brackets_does_not_end_the_line():
    tokens = ex.tokenize("f(a,\n  b)\n")
    kinds = [t.kind for t in tokens]
    assert kinds.count("newline") == 2          # the one after ')' and the final one
    assert ex.to_text(parse("(a\n+ b)")) == "a + b"


# ---------------------------------------------------------------------------------------------
# Precedence and the to_text round trip

@pytest.mark.parametrize("text, expected", [
    ("a + b * c", "a + b * c"),
    ("(a + b) * c", "(a + b) * c"),
    ("a - (b - c)", "a - (b - c)"),
    ("a - b - c", "a - b - c"),
    ("a / (b * c)", "a / (b * c)"),
    ("a ** b ** c", "a ** b ** c"),
    ("(a ** b) ** c", "(a ** b) ** c"),
    ("-x ** 2", "-x ** 2"),
    ("-(x ** 2)", "-x ** 2"),
    ("(-x) ** 2", "(-x) ** 2"),
    ("2 ** -1", "2 ** (-1)"),
    ("Q_h @ K_h.T / sqrt(d_k)", "Q_h @ K_h.T / sqrt(d_k)"),
    ("(Q_h @ K_h).T", "(Q_h @ K_h).T"),
    ("softmax(S_h,axis=-1)", "softmax(S_h, axis=-1)"),
    ("E[t]+P[:T]", "E[t] + P[:T]"),
    ("P_table[ T_past : T_past+T ]", "P_table[T_past:T_past + T]"),
    ("P[a:b]", "P[a:b]"),
    ("P[(a+1):-b]", "P[a + 1:-b]"),
    ("P[2:n]+P[:n]", "P[2:n] + P[:n]"),
    ("d_model % H == 0", "d_model % H == 0"),
    ("(a < b) + c", "(a < b) + c"),
    ('einsum("ij,jk->ik",A,B)', 'einsum("ij,jk->ik", A, B)'),
])
def test_to_text_normalises_and_round_trips(text, expected):
    node = parse(text)
    assert ex.to_text(node) == expected
    # the printed form parses back to the same tree (positions aside)
    assert _shape_of(parse(expected)) == _shape_of(node)


def _shape_of(node):
    """A node tree without line/column, for comparing structure."""
    if isinstance(node, ex.Name):
        return ("name", node.id)
    if isinstance(node, ex.Number):
        return ("number", node.value)
    if isinstance(node, ex.String):
        return ("string", node.value)
    if isinstance(node, ex.Unary):
        return ("unary", node.op, _shape_of(node.operand))
    if isinstance(node, (ex.Binary, ex.Compare)):
        return (type(node).__name__, node.op, _shape_of(node.left), _shape_of(node.right))
    if isinstance(node, ex.Call):
        return ("call", node.func, tuple(map(_shape_of, node.args)),
                tuple((k, _shape_of(v)) for k, v in node.kwargs))
    if isinstance(node, ex.Attribute):
        return ("attr", _shape_of(node.value), node.attr)
    if isinstance(node, ex.Subscript):
        index = ("slice", None if node.index.start is None else _shape_of(node.index.start),
                 _shape_of(node.index.stop)) if isinstance(node.index, ex.Slice) \
            else _shape_of(node.index)
        return ("sub", _shape_of(node.value), index)
    raise TypeError(node)


def test_row_slices_with_and_without_a_start():
    # P[:n] has no start (None), as before starts existed; P[a:b] holds both bounds
    whole = parse("P[:n]")
    assert whole == ex.Subscript(1, 2, ex.Name(1, 1, "P"),
                                 ex.Slice(1, 2, ex.Name(1, 4, "n")))
    assert whole.index.start is None and ex.to_text(whole) == "P[:n]"
    ranged = parse("P[a:b]")
    assert ranged == ex.Subscript(1, 2, ex.Name(1, 1, "P"),
                                  ex.Slice(1, 2, ex.Name(1, 5, "b"), ex.Name(1, 3, "a")))
    assert ex.to_text(ranged) == "P[a:b]"
    for text in ("P[:n]", "P[a:b]", "P_table[T_past:T_past + T]"):
        assert ex.to_text(parse(ex.to_text(parse(text)))) == text


def test_multiplication_binds_tighter_than_addition():
    node = parse("a + b * c")
    assert isinstance(node, ex.Binary) and node.op == "+"
    assert isinstance(node.right, ex.Binary) and node.right.op == "*"


def test_unary_minus_binds_looser_than_power():
    node = parse("-x ** 2")
    assert isinstance(node, ex.Unary)
    assert isinstance(node.operand, ex.Binary) and node.operand.op == "**"


def test_power_is_right_associative_and_division_left_associative():
    power = parse("a ** b ** c")
    assert power.op == "**" and isinstance(power.right, ex.Binary)
    division = parse("a / b / c")
    assert division.op == "/" and isinstance(division.left, ex.Binary)


def test_attention_scores_tree():
    node = parse("Q_h @ K_h.T / sqrt(d_k)")
    # '@' and '/' share a precedence and group left: (Q_h @ K_h.T) / sqrt(d_k)
    assert node.op == "/"
    assert isinstance(node.left, ex.Binary) and node.left.op == "@"
    assert node.left.right == ex.Attribute(1, 10, ex.Name(1, 7, "K_h"), "T")
    assert node.right == ex.Call(1, 15, "sqrt", (ex.Name(1, 20, "d_k"),), ())


# ---------------------------------------------------------------------------------------------
# Syntax errors

@pytest.mark.parametrize("text, message, line, column", [
    ("(a", "bracket opened here is never closed (expected ')')", 1, 1),
    ("x[1", "bracket opened here is never closed (expected ']')", 1, 2),
    ("a)", "unmatched ')'", 1, 2),
    ("x]", "unmatched ']'", 1, 2),
    ("(a]", "unmatched ']'", 1, 3),
    ("f('x')", "unexpected character \"'\" (strings use double quotes)", 1, 3),
    ("a $ b", "unexpected character '$'", 1, 3),
    ("é", "unexpected character 'é'", 1, 1),
    ("a < b < c", "comparisons cannot be chained; write two 'require' lines", 1, 7),
    ("a == b <= c", "comparisons cannot be chained; write two 'require' lines", 1, 8),
    ("", "expected an expression, found end of line", 1, 1),
    ("a **", "expected an expression, found end of line", 1, 5),
    ("a b", "unexpected 'b' after the expression", 1, 3),
    ("a = b", "unexpected '=' after the expression", 1, 3),
    ("a..b", "expected an attribute name after '.', found '.'", 1, 3),
    ("a.T(b)", "only a function name can be called", 1, 4),
    ("f(a=1, a=2)", "keyword argument 'a' given twice", 1, 10),
    ("f(a=1, b)", "positional argument after a keyword argument", 1, 8),
    ("x[1:2:3]", "expected ']', found ':'", 1, 6),
    ("x[1:]", "expected an expression, found ']'", 1, 5),
    ("x[::2]", "expected an expression, found ':'", 1, 4),
    ("f(,)", "expected an expression, found ','", 1, 3),
])
def test_syntax_errors(text, message, line, column):
    with pytest.raises(SpecSyntaxError, match=re.escape(message)) as info:
        parse(text)
    assert info.value.message == message
    assert (info.value.file, info.value.line, info.value.column) == ("e.tspec", line, column)
    assert str(info.value) == f"e.tspec:{line}:{column}: {message}"


def test_unclosed_bracket_is_reported_where_it_opens_on_a_later_line():
    with pytest.raises(SpecSyntaxError) as info:
        ex.tokenize("a\nb + f(c,\n d", "e.tspec")
    assert (info.value.line, info.value.column) == (2, 6)


def test_tab_in_indentation_is_refused():
    with pytest.raises(SpecSyntaxError, match=re.escape("tab in indentation; indent with "
                                                        "spaces")):
        ex.tokenize("a\n\tb\n")


def test_import_tricks_are_not_expressions():
    # single quotes never tokenize, so __import__('os') fails before anything is built
    with pytest.raises(SpecSyntaxError, match=re.escape(
            "1:12: unexpected character \"'\" (strings use double quotes)")):
        parse("__import__('os')")
    # with double quotes it parses, but as a call the whitelist refuses
    node = parse('__import__("os")')
    with pytest.raises(SpecError, match=re.escape(
            "dim expression: '__import__(\"os\")' is not a dim expression "
            "(use integers, dim names, + - * / % **)")):
        ex.to_sympy(node, DIMS)
    with pytest.raises(SpecError, match=re.escape(
            "dim expression: 'H.__class__' is not a dim expression")):
        sym("H.__class__")
    with pytest.raises(SpecError, match=re.escape("unknown dim '__builtins__' in dim "
                                                  "expression")):
        sym("__builtins__")


@pytest.mark.parametrize("text", ["a\n+ b", "a\nb"])
def test_text_after_a_line_break_is_not_dropped(text):
    # parse_expression promises one *whole* expression: text after a line break must not
    # vanish silently
    with pytest.raises(SpecSyntaxError):
        parse(text)


# ---------------------------------------------------------------------------------------------
# The to_sympy whitelist

def test_to_sympy_builds_exact_expressions():
    assert sym("d_model / H") == DIMS["d_model"] / DIMS["H"]
    assert sym("2 * T - 1") == 2 * DIMS["T"] - 1
    assert sym("d_model % H") == sympy.Mod(DIMS["d_model"], DIMS["H"])
    assert sym("H ** (1 + 1)") == DIMS["H"] ** 2
    assert sym("-H") == -DIMS["H"]
    relation = sym("T <= max_len", relational=True)
    assert isinstance(relation, sympy.LessThan)
    assert (relation.lhs, relation.rhs) == (DIMS["T"], DIMS["max_len"])
    equation = sym("d_model % H == 0", relational=True)
    assert isinstance(equation, sympy.Eq) and equation.rhs == 0


def test_unknown_dim():
    with pytest.raises(SpecError, match=re.escape("e.tspec:1:5: unknown dim 'd_mdl' in dim "
                                                  "expression")):
        sym("H * d_mdl")


def test_unknown_dim_names_what_was_being_read():
    node = parse("zz + 1")
    with pytest.raises(SpecError) as info:
        ex.to_sympy(node, DIMS, file="f.tspec", what="let d_k")
    assert info.value.message == "unknown dim 'zz' in let d_k"
    assert (info.value.file, info.value.line, info.value.column) == ("f.tspec", 1, 1)


@pytest.mark.parametrize("text, number", [("2.5 * H", "2.5"), ("1e3", "1e3"),
                                          ("H ** 2.0", "2.0"), ("1.", "1.")])
def test_float_in_a_dim_expression(text, number):
    with pytest.raises(SpecError, match=re.escape(
            f"dim expression: {number} is not an integer (dims are whole numbers)")):
        sym(text)


@pytest.mark.parametrize("text", ["H ** 65", "H ** -1", "H ** H", "2 ** (64 + 1)"])
def test_exponent_limits(text):
    with pytest.raises(SpecError, match=re.escape(
            "dim expression: exponents must be integers from 0 to 64")):
        sym(text)


def test_exponent_limit_is_inclusive():
    assert sym("H ** 64") == DIMS["H"] ** 64
    assert sym("H ** 0") == 1
    assert sym("2 ** 64") == 2 ** 64


@pytest.mark.parametrize("text", ["d_model / 0", "d_model / (H - H)"])
def test_division_by_zero(text):
    with pytest.raises(SpecError, match=re.escape("dim expression: division by zero")):
        sym(text)


@pytest.mark.parametrize("text", ["d_model % 0", "d_model % (H - H)"])
def test_modulo_by_zero(text):
    with pytest.raises(SpecError, match=re.escape("dim expression: modulo by zero")):
        sym(text, relational=True)


@pytest.mark.parametrize("text", ["sqrt(H)", "H.T", "H[T]", '"H"', "T[:H]", "f(H, x=T)"])
def test_non_dim_expressions_are_refused(text):
    with pytest.raises(SpecError) as info:
        sym(text)
    assert info.value.message == (f"dim expression: {text!r} is not a dim expression "
                                  "(use integers, dim names, + - * / % **)")


def test_matmul_operator_is_refused_in_dim_expressions():
    with pytest.raises(SpecError, match=re.escape("dim expression: operator '@' is not "
                                                  "allowed here")):
        sym("H @ T")


def test_comparison_only_at_top_level_and_only_when_relational():
    with pytest.raises(SpecError, match=re.escape(
            "dim expression: 'T <= max_len' is not a dim expression")):
        sym("T <= max_len")
    with pytest.raises(SpecError, match=re.escape(
            "dim expression: 'H < T' is not a dim expression")):
        sym("(H < T) + 1 == 2", relational=True)


# ---------------------------------------------------------------------------------------------
# Robustness: nothing but TspecError escapes the parser

@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=string.printable, max_size=40))
def test_random_printable_text_parses_or_raises_tspec_error(text):
    try:
        node = ex.parse_expression(text)
    except TspecError:
        return
    # what parses prints, and what prints parses back to the same tree
    assert _shape_of(ex.parse_expression(ex.to_text(node))) == _shape_of(node)


_EXPR_ALPHABET = "abHT_12 +-*/%()[].:,=<>@\"?"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=_EXPR_ALPHABET, max_size=30))
@example("1 .H")     # printed as "1.H" once, which reads back as the number "1." and H
def test_expression_like_text_parses_or_raises_tspec_error(text):
    try:
        node = ex.parse_expression(text)
    except TspecError:
        return
    assert _shape_of(ex.parse_expression(ex.to_text(node))) == _shape_of(node)
    if text.count("**") > 2:
        return          # towers of powers are slow to build, not wrong: not this test's point
    try:
        ex.to_sympy(node, {"a": dim_symbol("a"), "b": dim_symbol("b")}, relational=True)
    except TspecError:
        pass


def test_huge_integer_literal_is_a_tspec_error():
    with pytest.raises(TspecError):
        ex.parse_expression("9" * 5000)


def test_deep_nesting_is_a_tspec_error():
    with pytest.raises(TspecError):
        ex.parse_expression("(" * 1000 + "a" + ")" * 1000)


# ---------------------------------------------------------------------------------------------
# Dim expressions and constraints printed back in the language (messages and hints)

_DIMS = {name: dim_symbol(name) for name in ("d_model", "H", "T", "T_past")}


def _reads_back(expr) -> sympy.Basic:
    return ex.to_sympy(ex.parse_expression(ex.dim_text(expr)), _DIMS, relational=True)


_POINTS = list(itertools.product((1, 2, 3, 7), repeat=len(_DIMS)))[::3]


def _same(a, b) -> bool:
    """The same relation between the same values at sizes 1..7 (sympy may build one
    expression as two trees: -(H + T) or -H - T)."""
    if isinstance(a, sympy.core.relational.Relational):
        return type(a) is type(b) and _same(a.lhs - a.rhs, b.lhs - b.rhs)
    for values in _POINTS:
        point = dict(zip(_DIMS.values(), values))
        try:
            x = evaluate(a, point)
        except ZeroDivisionError:
            x = None
        try:
            y = evaluate(b, point)
        except ZeroDivisionError:
            y = None
        if x != y:
            return False
    return True


@pytest.mark.parametrize("expr, text", [
    # was `d_model % 2*H == 0`, which the parser reads as (d_model % 2) * H == 0
    (sympy.Eq(sympy.Mod(_DIMS["d_model"], 2 * _DIMS["H"]), 0, evaluate=False),
     "d_model % (2*H) == 0"),
    (2 * sympy.Mod(_DIMS["d_model"], _DIMS["H"]), "2*(d_model % H)"),
    (sympy.Mod(_DIMS["d_model"] + _DIMS["T"], _DIMS["H"]), "(T + d_model) % H"),
    (sympy.Mod(_DIMS["d_model"] / _DIMS["H"], 2), "d_model/H % 2"),
    (sympy.LessThan(_DIMS["T"] + _DIMS["T_past"], _DIMS["T"], evaluate=False),
     "T + T_past <= T"),
    (sympy.GreaterThan(_DIMS["d_model"] - _DIMS["T"], 1, evaluate=False), "d_model - T >= 1"),
    (_DIMS["d_model"] / (2 * _DIMS["H"]), "d_model/(2*H)"),
])
def test_dim_text_prints_with_the_languages_precedence(expr, text):
    assert ex.dim_text(expr) == text
    assert _reads_back(expr) == expr


_ATOMS = st.sampled_from([*_DIMS.values(), sympy.Integer(1), sympy.Integer(2),
                          sympy.Integer(3)])


def _combine(children):
    pair = st.tuples(children, children)
    return st.one_of(
        pair.map(lambda p: p[0] + p[1]), pair.map(lambda p: p[0] - p[1]),
        pair.map(lambda p: p[0] * p[1]),
        pair.filter(lambda p: p[1] != 0).map(lambda p: p[0] / p[1]),
        pair.filter(lambda p: p[1] != 0 and not p[1].is_number or p[1] > 0).map(
            lambda p: sympy.Mod(*p)),
        children.map(lambda c: c ** 2), children.map(lambda c: -c))


@settings(max_examples=200, deadline=None)
@given(st.recursive(_ATOMS, _combine, max_leaves=6),
       st.sampled_from(["==", "<=", None]))
def test_dim_text_reads_back_as_the_same_expression(expr, relation):
    if relation == "==":
        expr = sympy.Eq(expr, 0, evaluate=False)
    elif relation == "<=":
        expr = sympy.LessThan(expr, _DIMS["T"], evaluate=False)
    if expr.has(sympy.zoo, sympy.nan) or not expr.free_symbols and expr.is_number is False:
        return
    assert _same(_reads_back(expr), expr), ex.dim_text(expr)
