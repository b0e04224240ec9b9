"""Bad input: each mistake gets its own error class, a message that names it, and a place."""

import re

import pytest
import sympy
from support.refusals import raises

import tspec
from tspec import api
from tspec.checking.check import check
from tspec.errors import SpecError, SpecSyntaxError, TspecError, UsageError, VariantError
from tspec.language.model import outputs, select
from tspec.language.variant import Variant

HEADER = 'dim B "batch"\ndim T "length"\ndim d "width"\n'


def parse(text):
    return tspec.parse(text, file="t.tspec")


def check_text(text, choices=None, values=None, all_choices=False):
    return check(parse(text), choices, values, all_choices=all_choices)


# ---------------------------------------------------------------------------------------------
# Spec syntax

@pytest.mark.parametrize("text, expected", [
    (HEADER + 'input X "B T d"\nY "B T d" = relu(X\n',
     "t.tspec:5:17: bracket opened here is never closed (expected ')')"),
    (HEADER + 'input X "B T d"\nY "B T d" relu(X)\n',
     "t.tspec:5:11: expected '=' (an equation) or a keyword, found 'relu'"),
    ('dim\n', "t.tspec:1:4: expected a dim name, found end of line"),
    ("dim B 'batch'\n", "t.tspec:1:7: unexpected character \"'\" (strings use double quotes)"),
    # a shape string's closing quote left out: said where the string is, not 51 columns on
    # at the description's apostrophe (once "unexpected character ... use double quotes")
    (HEADER + 'param W_1 "d d "first feed-forward weight (the gate\'s)"\n',
     ('t.tspec:4:11: the string "d d " runs straight into the word first, on a line of 3 double '
     'quotes: is its closing quote missing? (a string opens and closes on one line)')),
    (HEADER + 'param W "d d\n', ("t.tspec:4:9: a string opened here is not closed on its line "
     "(a string opens and closes on one line)")),
    (HEADER + 'param W "d d" "a # not a comment"  # a "comment\n'
     'param V "d d "x y"\n', ('t.tspec:5:9: the string "d d " runs straight into the word x, on a '
     'line of 3 double quotes: is its closing quote missing? (a string opens and closes on one '
     'line)')),
    ('dim B "batch" = 0\n',
     "t.tspec:1:17: dim B: a bound value must be a positive integer, got '0'"),
    ('dim B "batch" = 1.5\n',
     "t.tspec:1:17: dim B: a bound value must be a positive integer, got '1.5'"),
    ('dim B "batch"\n  dim T "length"\n', "t.tspec:2:3: unexpected indentation"),
    ('block f(X "B") -> X:\n\tY = X\n', "t.tspec:2:1: tab in indentation; indent with spaces"),
    (HEADER + 'choice c = a | b\nwhen c == a:\ninput X "B"\n',
     "t.tspec:5: expected an indented body after ':'"),
    (HEADER + 'require B < T < d\n',
     "t.tspec:4:15: comparisons cannot be chained; write two 'require' lines"),
])
def test_malformed_spec_syntax(text, expected):
    with raises(SpecSyntaxError, expected):
        parse(text)


def test_declared_tensor_without_a_shape():
    with raises(SpecError, "t.tspec:4: intermediate Y needs a shape in double quotes (or '?' "
                "when the source leaves it unstated)"):
        parse(HEADER + 'tensor Y\n')


@pytest.mark.parametrize("text, error, expected", [
    (HEADER + 'input X "B T d" implied "B T d"\n', SpecSyntaxError,
     "t.tspec:4:17: X: 'implied' follows '?' (an unstated shape); a stated shape needs none"),
    (HEADER + 'input X ? implied\n', SpecSyntaxError,
     "t.tspec:4:18: expected the shape the source implies in double quotes"),
    (HEADER + 'input X ? implied "B e"\n', SpecError,
     "t.tspec:4: bad shape token 'e' in \"B e\": unknown dim 'e' in shape \"B e\""),
    (HEADER + 'reused T as T, Tx "x"\n', SpecError,
     "t.tspec:4: reused T: 'Tx' is not a dim, tensor or op of this spec; did you mean 'T'?"),
    (HEADER + 'reused T as T, T "x"\n', SpecError, "t.tspec:4: reused T: a name is listed twice"),
    (HEADER + 'reused T T "x"\n', SpecSyntaxError,
     "t.tspec:4:10: expected 'as' and the names this spec gives its meanings, found 'T'"),
    (HEADER + 'reused T as T\n', SpecSyntaxError,
     "t.tspec:4:14: expected what each is in double quotes"),
    (HEADER + 'choice c = a | b\nwhen c == a:\n    reused T as T "x"\n', SpecError,
     "t.tspec:6: 'reused' is about the source's names: it belongs at the top level"),
    (HEADER + 'input X "B"\nreused "B" = relu(X)\n', SpecSyntaxError,
     "t.tspec:5:8: expected the source's name, found '\"B\"'"),
])
def test_implied_shapes_and_reused_names_are_checked(text, error, expected):
    with raises(error, expected):
        parse(text)


def test_syntax_error_carries_line_and_column():
    with pytest.raises(SpecSyntaxError) as info:
        parse(HEADER + 'input X "B T d"\nY "B T d" = relu(X))\n')
    error = info.value
    assert (error.file, error.line, error.column) == ("t.tspec", 5, 20)
    assert error.message == "unmatched ')'"
    assert isinstance(error, TspecError)


# ---------------------------------------------------------------------------------------------
# Names

def test_unknown_dim_in_a_shape():
    with raises(SpecError, "t.tspec:4: bad shape token 'e' in \"B T e\": unknown dim 'e' "
                "in shape \"B T e\""):
        parse(HEADER + 'input X "B T e"\n')


def test_float_in_a_shape():
    with raises(SpecError, "t.tspec:4: bad shape token '1.5' in \"B 1.5\": shape \"B 1.5\": "
                "1.5 is not an integer (dims are whole numbers)"):
        parse(HEADER + 'input X "B 1.5"\n')


def test_unknown_tensor_in_an_equation_suggests_the_close_name():
    with raises(SpecError, "t.tspec:5:18: unknown name 'Xim': not a tensor or dim here; "
                "did you mean 'Xin'?"):
        parse(HEADER + 'input Xin "B T d"\nY "B T d" = relu(Xim)\n')


def test_unknown_name_far_from_any_has_no_suggestion():
    with raises(SpecError, "t.tspec:5:18: unknown name 'qqqq': not a tensor or dim here"):
        parse(HEADER + 'input Xin "B T d"\nY "B T d" = relu(qqqq)\n')


def test_dim_declared_twice():
    with raises(SpecError, "t.tspec:4: dim B is declared twice (first at line 1)"):
        parse(HEADER + 'dim B "again"\n')


def test_block_local_dim_shadowing_a_model_dim():
    with raises(SpecError, "t.tspec:5: dim T is declared twice (first at line 2)"):
        parse(HEADER + 'block f(X "B T d") -> Y:\n    dim T "again"\n    Y "B T d" = relu(X)\n')


@pytest.mark.parametrize("text, expected", [
    ('dim class "c"\n', "t.tspec:1: dim name 'class' is a Python keyword"),
    ('dim match "c"\n', "t.tspec:1: dim name 'match' is a Python keyword"),
    ('dim print "c"\n', "t.tspec:1: dim name 'print' shadows a Python builtin"),
    ('dim len "c"\n', "t.tspec:1: dim name 'len' shadows a Python builtin"),
    ('dim spec "c"\n', "t.tspec:1: dim name 'spec' is a word of the spec language"),
    (HEADER + 'param __x "d"\n',
     ("t.tspec:4: tensor name '__x' is not a plain identifier (ASCII letter first, then "
     "letters, digits, underscores)")),
    (HEADER + 'param _x "d"\n',
     ("t.tspec:4: tensor name '_x' is not a plain identifier (ASCII letter first, then "
     "letters, digits, underscores)")),
    (HEADER + 'input lambda "d"\n', "t.tspec:4: tensor name 'lambda' is a Python keyword"),
    (HEADER + 'Y = relu(B) as __init__\n',
     ("t.tspec:4: instance name '__init__' is not a plain identifier (ASCII letter first, then "
     "letters, digits, underscores)")),
    ('dim ' + 'a' * 70 + ' "c"\n',
     "t.tspec:1: dim name 'aaaaaaaaaaaaaaaaaaaa'... is 70 characters long; the limit is 64"),
    ('choice act = class | gelu\n', "t.tspec:1: option name 'class' is a Python keyword"),
    ('choice exec = a | b\n', "t.tspec:1: choice name 'exec' shadows a Python builtin"),
    ('dim B "b"\nblock exp(X "B") -> Y:\n    Y "B" = X\n',
     "t.tspec:2: block name exp is the name of an op"),
    ('spec float "title"\n', "t.tspec:1: spec name 'float' is a word of the spec language"),
])
def test_names_must_be_safe_identifiers(text, expected):
    with raises(SpecError, expected):
        parse(text)


def test_dim_and_tensor_share_a_name():
    with raises(SpecError, "t.tspec:4: d is both a dim and a tensor in the model"):
        parse(HEADER + 'input d "B T"\n')


# ---------------------------------------------------------------------------------------------
# Structure

def test_cyclic_equations_name_the_cycle():
    with raises(SpecError, "t.tspec:5: cyclic equations in the model: A -> C -> A "
                "(lines 5, 6)"):
        check_text(HEADER + 'input X "B T d"\nA "B T d" = relu(C)\nC "B T d" = A + X\n')


def test_derived_dims_defined_through_each_other_name_the_cycle():
    with raises(SpecError, "t.tspec:3: derived dims defined through each other: m -> n -> m "
                "(lines 3, 4)"):
        check_text('dim n "n"\ndim m "m"\nlet m = n + 1\nlet n = m + 1\n')


def test_self_referencing_equation_is_a_cycle():
    with raises(SpecError, "t.tspec:4: cyclic equations in the model: A -> A (lines 4)"):
        check_text(HEADER + 'A "B T d" = relu(A)\n')


def test_cycle_inside_a_block_names_the_block():
    with raises(SpecError, "t.tspec:5: cyclic equations in block f: A -> C -> A "
                "(lines 5, 6)"):
        check_text(HEADER + 'block f(X "B T d") -> C:\n    A "B T d" = relu(C)\n'
                   '    C "B T d" = A + X\ninput Z "B T d"\nO "B T d" = f(Z)\n')


def test_tensor_defined_twice():
    with raises(SpecError, "t.tspec:6: tensor Y is declared twice in the model (first at "
                "line 5)"):
        check_text(HEADER + 'input X "B T d"\nY "B T d" = relu(X)\nY "B T d" = gelu(X)\n')
    with raises(SpecError, "t.tspec:6: tensor Y is defined twice in the model (first at "
                "line 5)"):
        check_text(HEADER + 'input X "B T d"\nY = relu(X)\nY = gelu(X)\n')


def test_output_never_defined():
    with raises(SpecError, "t.tspec: output 'Yy' of the model is never defined; did "
                "you mean 'Y'?"):
        parse(HEADER + 'input X "B T d"\nY "B T d" = relu(X)\noutput Yy\n')


CHOSEN_OUTPUTS = HEADER + ('choice head = scores | pooled "which output"\n'
                          'input X "B T d"\nY "B T d" = relu(X)\n')


def test_outputs_may_differ_by_choice_under_a_top_level_when():
    text = CHOSEN_OUTPUTS + ('when head == pooled:\n    C "B d" = first(Y)\n    output Y, C\n'
                             'else:\n    output Y\n')
    spec_ = parse(text)
    assert spec_.outputs == ["Y", "C"]
    assert check(spec_, all_choices=True).findings == []
    assert outputs(spec_, {"head": "pooled"}) == ["Y", "C"]
    assert outputs(spec_, {"head": "scores"}) == ["Y"]


@pytest.mark.parametrize("tail, expected", [
    ('when head == pooled:\n    C "B d" = first(Y)\noutput Y, C\n',
     "t.tspec: output C is not defined in the model under head=scores"),
    ('when head == pooled:\n    C "B d" = first(Y)\n    output C\n',
     ("t.tspec: the model has no output under head=scores: every branch of a choice needs an "
      "`output` statement")),
    ('output Y\nwhen head == pooled:\n    output Y\n',
     "t.tspec:9: output Y is named twice under head=pooled"),
    ('output Y, Y\n', "t.tspec:7: output Y is named twice"),
    ('block f(A "B T d") -> Z:\n    Z "B T d" = relu(A)\n    output Z\nW "B T d" = f(Y)\n',
     ("t.tspec:9: 'output' belongs at the top level, or under a top-level 'when' (a block "
      "names its output after '->')")),
])
def test_outputs_in_force_are_checked_under_every_choice(tail, expected):
    with raises(SpecError, expected):
        check(parse(CHOSEN_OUTPUTS + tail), all_choices=True)


def test_block_called_with_the_wrong_number_of_inputs():
    with raises(SpecError, "t.tspec:7: block f takes 2 inputs (X, Y), got 1"):
        check_text(HEADER + 'block f(X "B T d", Y "B T d") -> Z:\n    Z "B T d" = X + Y\n'
                   'input A "B T d"\nO "B T d" = f(A)\n')


def test_else_without_when():
    with raises(SpecError, "t.tspec:4: 'else:' without a 'when' just before it"):
        parse(HEADER + 'else:\n    input X "B"\n')


@pytest.mark.parametrize("text, expected", [
    (HEADER + 'let e = d / B\n', "t.tspec:4: let: unknown dim 'e'"),
    (HEADER + 'let d = d / B\n', "t.tspec:4: let d refers to itself"),
    (HEADER + 'require d + B\n',
     "t.tspec:4:1: a constraint compares two dim expressions (==, !=, <, <=, >, >=)"),
    (HEADER + 'require d_mdl % B == 0\n',
     "t.tspec:4:9: unknown dim 'd_mdl' in constraint"),
])
def test_dim_statements(text, expected):
    with raises(SpecError, expected):
        parse(text)


def test_dim_derived_twice():
    with raises(SpecError, "t.tspec:5: dim d is derived twice (first at line 4)"):
        check_text(HEADER + 'let d = B * T\nlet d = B + T\n')


# ---------------------------------------------------------------------------------------------
# Ops: ranks, axes, arity, unknown functions

@pytest.mark.parametrize("body, expected", [
    ('input X "d"\nY "d" = X.T\n',
     "t.tspec:5: Y: transpose (.T) needs an operand of rank 2 or more, got rank 1 (d)"),
    ('input X "B T d"\nparam g "d d"\nparam b "d"\nY "B T d" = layer_norm(X, g, b)\n',
     "t.tspec:7: Y: layer_norm gain must be a vector, got d d"),
    ('input X "B T d"\nY "B T d" = softmax(X, axis=3)\n',
     "t.tspec:5: Y: softmax: axis 3 does not exist in a tensor of rank 3"),
    ('input X "B T d"\nY "B T d" = softmax(X, axis=-4)\n',
     "t.tspec:5: Y: softmax: axis -4 does not exist in a tensor of rank 3"),
    ('input X "d"\nparam W "d d"\nY "d" = X @ W\n',
     "t.tspec:6: Y: matmul needs a left operand of rank 2 or more, got rank 1 (d)"),
    ('dim V "vocab"\nparam E "V d"\ninput t "B T"\nY "B T d" = E[t]\n',
     "t.tspec:7: Y: gather needs ids of dtype int, got float"),
    ('input A "B T d"\ninput C "B d"\nY "B T d" = concat(A, C)\n',
     "t.tspec:6: Y: concat needs operands of one rank, got B T d and B d"),
    ('input A "B T d"\ninput C "B T d"\nY "B T T" = einsum("btd,bsd->btz", A, C)\n',
     "t.tspec:6: Y: einsum pattern 'btd,bsd->btz': output axes must be distinct input axes"),
    ('input X "B T d"\nY "B T d" = concat_heads(X)\n',
     "t.tspec:5: Y: concat_heads needs a family of tensors (declared with [H])"),
    ('input X "d"\nY "d" = first(X)\n',
     "t.tspec:5: Y: first needs an input of rank 2 or more, got rank 1 (d)"),
])
def test_op_applied_to_the_wrong_rank_or_axis(body, expected):
    with raises(SpecError, expected):
        check_text(HEADER + body)


@pytest.mark.parametrize("body, expected", [
    ('Y "B T d" = relu(X, X)\n', "t.tspec:5:13: relu() takes 1 argument, got 2"),
    ('Y "B T d" = layer_norm(X)\n', "t.tspec:5:13: layer_norm() takes 3 arguments, got 1"),
    ('Y "B T d" = softmax(X, dim=1)\n', ("t.tspec:5:28: softmax() has no option 'dim'; "
     "options: axis")),
    ('Y "B T d" = relu(X) / sqrt(d, d)\n', "t.tspec:5:23: sqrt() takes one argument"),
    ('Y "B T d" = split_heads(X, X)\n', ("t.tspec:5:28: split_heads(): 'X' must be a dim "
     "expression")),
    ('Y "B T d" = relu(d)\n', "t.tspec:5:18: relu(): 'd' must be a tensor"),
    ('Y "B T d" = softmax(X, axis=d)\n', ("t.tspec:5:29: softmax(axis=...) takes an integer "
     "literal")),
    # an offset is an optional last argument, and a dim expression
    ('Y "B T d" = rotary(X, T, T)\n', "t.tspec:5:13: rotary() takes 1 or 2 arguments, got 3"),
    ('Y "B T d" = rotary(X, X)\n', "t.tspec:5:23: rotary(): 'X' must be a dim expression"),
    ('Y "T d" = sinusoidal_encoding(T)\n', ("t.tspec:5:11: sinusoidal_encoding() takes 2 or 3 "
     "arguments, got 1")),
    ('Y "T d" = sinusoidal_encoding(T, d, X)\n', ("t.tspec:5:37: sinusoidal_encoding(): 'X' "
     "must be a dim expression")),
    ('Y "B T d" = X[X:T]\n', "t.tspec:5:14: a slice [:n] or [a:b] takes dim expressions"),
    ('Y "B T d" = X[:X]\n', "t.tspec:5:14: a slice [:n] or [a:b] takes dim expressions"),
])
def test_wrong_arity_or_argument_kind(body, expected):
    with raises(SpecError, expected):
        parse(HEADER + 'input X "B T d"\n' + body)


@pytest.mark.parametrize("func, expected", [
    ("rleu", "t.tspec:5:13: unknown function 'rleu'; did you mean 'relu'?"),
    ("__import__", "t.tspec:5:13: unknown function '__import__'"),
    ("eval", "t.tspec:5:13: unknown function 'eval'"),
])
def test_unknown_function(func, expected):
    with raises(SpecError, expected):
        parse(HEADER + f'input X "B T d"\nY "B T d" = {func}(X)\n')


def test_attribute_other_than_transpose():
    with raises(SpecError, "t.tspec:5:14: unknown attribute .__class__ (only .T, the "
                "transpose of the last two axes)"):
        parse(HEADER + 'input X "B T d"\nY "B T d" = X.__class__\n')


# ---------------------------------------------------------------------------------------------
# Choices

def test_unknown_choice_in_when():
    with raises(SpecError, "t.tspec:5: 'when' names unknown choice 'actv'; did you mean "
                "'act'?"):
        parse(HEADER + 'choice act = relu | gelu\nwhen actv == relu:\n    input X "B T d"\n')


def test_unknown_option_in_when():
    with raises(SpecError, "t.tspec:5: choice act has no option 'rleu'; options: relu, "
                "gelu"):
        parse(HEADER + 'choice act = relu | gelu\nwhen act == rleu:\n    input X "B T d"\n')


def test_unknown_option_in_when_not_equal():
    with raises(SpecError, "t.tspec:5: choice act has no option 'rleu'; options: relu, "
                "gelu"):
        parse(HEADER + 'choice act = relu | gelu\nwhen act != rleu:\n    input X "B T d"\n')


def test_unknown_choice_value_and_name_in_check():
    parsed = parse(HEADER + 'choice act = relu | gelu\n')
    with raises(SpecError, "t.tspec:4: choice act has no option 'x'; options: relu, gelu"):
        check(parsed, {"act": "x"})
    with raises(SpecError, "t.tspec: unknown choice 'actt'; this spec's choices: act"):
        check(parsed, {"actt": "relu"})


# ---------------------------------------------------------------------------------------------
# Dim values

def test_setting_a_derived_dim_via_values():
    transformer = api.load("transformer").spec
    lines = api.BUILTIN_SPEC.read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.strip() == "let d_k = d_model / H")
    with raises(SpecError, f"{api.BUILTIN_SPEC}:{line}: dim d_k is derived "
                "(let d_k = d_model / H) and cannot also be given a value"):
        check(transformer, {"head_dims": "split"}, {"d_model": 512, "H": 8, "d_k": 64})
    # with head_dims=free, d_k is a free dim and may be set
    assert check(transformer, {"head_dims": "free"}, {"d_k": 64}).findings == []


def test_setting_a_derived_dim_via_set_fails_at_check():
    lines = api.BUILTIN_SPEC.read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.strip() == "let d_k = d_model / H")
    with raises(SpecError, f"{api.BUILTIN_SPEC}:{line}: dim d_k is derived "
                "(let d_k = d_model / H) and cannot also be given a value"):
        api.check(api.load("base", ["d_k=64"]))


def test_value_for_a_bound_dim_and_for_an_unknown_dim():
    parsed = parse('dim B "batch" = 4\n')
    with raises(SpecError, "t.tspec:1: dim B is fixed to 4 by the spec; cannot set 5"):
        check(parsed, values={"B": 5})
    assert check(parsed, values={"B": 4}).findings == []
    with raises(SpecError, "t.tspec: unknown dim 'C'"):
        check(parsed, values={"C": 5})


# ---------------------------------------------------------------------------------------------
# Variants: TOML files

def write_variant(tmp_path, text):
    path = tmp_path / "v.toml"
    path.write_text(text)
    return path


def load_variant_text(tmp_path, text):
    return api.load(write_variant(tmp_path, text))


def test_malformed_toml(tmp_path):
    path = write_variant(tmp_path, 'spec = "transformer"\n[dims\nH = 8\n')
    with raises(VariantError, f"{path}: malformed TOML: Expected ']' at the end of a table "
                "declaration (at line 2, column 6)"):
        api.load(path)


def test_duplicate_toml_key_is_malformed(tmp_path):
    path = write_variant(tmp_path, 'spec = "transformer"\n[dims]\nH = 8\nH = 16\n')
    with raises(VariantError, f"{path}: malformed TOML: Cannot overwrite a value (at line "
                "4, column 7)"):
        api.load(path)


def test_unknown_dim_in_variant_names_file_and_line(tmp_path):
    path = write_variant(tmp_path, 'spec = "transformer"\n\n[dims]\nd_model = 512\n'
                                   'd_modle = 3\n')
    with pytest.raises(VariantError) as info:
        api.load(path)
    error = info.value
    assert (error.file, error.line) == (str(path), 5)
    assert error.message == ("[dims] unknown dim 'd_modle' in spec transformer; did you mean "
                             "'d_model'?")


@pytest.mark.parametrize("value, shown", [
    ('"8"', "'8'"), ("8.0", "8.0"), ("true", "True"), ("-8", "-8"), ("0", "0"),
    ("[8]", "[8]"),
])
def test_bad_dim_values_in_toml(tmp_path, value, shown):
    path = write_variant(tmp_path, f'spec = "transformer"\n[dims]\nH = {value}\n')
    with raises(VariantError, f"{path}:3: [dims] H = {shown}: dim values are positive "
                "integers"):
        api.load(path)


@pytest.mark.parametrize("text, line, message", [
    ('spec = "transformer"\nfoo = 1\n', 2,
     "unknown key 'foo' (allowed: choices, description, dims, published, settings, spec)"),
    ('[dims]\nH = 8\n', None, 'a variant names its spec: spec = "transformer" or a path'),
    ('spec = "transformer"\ndims = 3\n', 2, "dims must be a table: [dims]"),
    ('spec = "transformer"\ndescription = 3\n', 2, "description must be a string"),
    ('spec = "transformer"\n[choices]\nnorm = "mid"\n', 3,
     "[choices] norm: choice norm has no option 'mid'; options: post, pre"),
    ('spec = "transformer"\n[choices]\nnorm = 1\n', 3,
     "[choices] norm: choice norm has no option 1; options: post, pre"),
    ('spec = "transformer"\n[choices]\nnrom = "pre"\n', 3,
     # every choice of the built-in spec, in its order (filled in by the test)
     "[choices] unknown choice 'nrom'; the spec's choices: {choices}"),
    ('spec = "transformer"\n[dims]\nH = 8\n[choices]\nH = "x"\n', 5,
     "H is set in both [dims] and [choices]"),
])
def test_bad_variant_files(tmp_path, text, line, message):
    path = write_variant(tmp_path, text)
    with pytest.raises(VariantError) as info:
        api.load(path)
    if "{choices}" in message:
        choices = ", ".join(api.load("transformer").spec.choices)
        assert message.format(choices=choices).startswith(
            "[choices] unknown choice 'nrom'; the spec's choices: arch, norm, activation, ")
        message = message.format(choices=choices)
    assert (info.value.file, info.value.line, info.value.message) == (str(path), line, message)


def test_variant_naming_a_missing_spec(tmp_path):
    path = write_variant(tmp_path, 'spec = "nope.tspec"\n')
    with pytest.raises(UsageError, match=re.escape("no spec named 'nope.tspec': not a file, "
                                                   "and not a built-in spec (transformer")):
        api.load(path)


def test_variant_with_a_relative_spec_path(tmp_path):
    (tmp_path / "m.tspec").write_text(HEADER + 'require d % B == 0\n')
    path = write_variant(tmp_path, 'spec = "m.tspec"\n[dims]\nd = 10\nB = 4\n')
    report = api.check(api.load(path))
    assert [f.message for f in report.findings] == ["d=10 is not divisible by B=4"]


def test_unknown_target():
    with pytest.raises(UsageError, match=re.escape("no spec or variant named 'nope': not a "
                                                   "file, and not a built-in (transformer, ")):
        api.load("nope")


# ---------------------------------------------------------------------------------------------
# Variants: --set

@pytest.fixture(scope="module")
def base():
    return api.load("base")


def test_dim_set_twice(base):
    with raises(VariantError, "--set H is given twice"):
        base.with_settings(["H=8", "H=16"])


@pytest.mark.parametrize("setting, expected", [
    ("H=abc", "--set H=abc: dim values are positive integers, got 'abc'"),
    ("H=-1", "--set H=-1: dim values are positive integers, got '-1'"),
    ("H=0", "--set H=0: dim values are positive integers, got 0"),
    ("H=1.5", "--set H=1.5: dim values are positive integers, got '1.5'"),
    ("H=true", "--set H=true: dim values are positive integers, got 'true'"),
    ("H=1e3", "--set H=1e3: dim values are positive integers, got '1e3'"),
    ("H", "--set 'H': expected NAME=VALUE"),
    ("H=1=2", "--set 'H=1=2': expected NAME=VALUE"),
    ("=3", "--set '=3': '' is not a dim or choice name"),
    ("1H=3", "--set '1H=3': '1H' is not a dim or choice name"),
    ("H=", "--set 'H=': the value is empty"),
    ("Hx=3", "--set Hx: unknown dim, choice or setting 'Hx' in spec transformer; did you mean 'H'?"),
    ("norm=mid", "--set norm=mid: choice norm has no option 'mid'; options: post, pre"),
])
def test_bad_settings(base, setting, expected):
    with raises(VariantError, expected):
        base.with_settings([setting])


def test_settings_are_applied_without_changing_the_original(base):
    changed = base.with_settings(["H=16", "norm=pre", "d_ff= 4096 "])
    assert changed.dims == {"d_model": 512, "H": 16, "d_ff": 4096, "N": 6}
    assert changed.choices["norm"] == "pre"
    assert base.dims["H"] == 8 and base.choices["norm"] == "post"
    assert isinstance(changed, Variant) and not changed.is_spec


def test_huge_set_value_is_a_variant_error(base):
    with pytest.raises(VariantError):
        base.with_settings(["H=" + "9" * 5000])


def test_huge_toml_value_is_a_variant_error(tmp_path):
    path = write_variant(tmp_path, f'spec = "transformer"\n[dims]\nH = {"9" * 5000}\n')
    with pytest.raises(VariantError):
        api.load(path)


def test_huge_bound_dim_value_is_a_spec_error():
    with pytest.raises(TspecError):
        parse(f'dim B "batch" = {"9" * 5000}\n')


def test_huge_literal_in_a_constraint_is_a_spec_error():
    with pytest.raises(TspecError):
        parse(f'dim B "batch"\nrequire B <= {"9" * 5000}\n')


def test_deeply_nested_spec_is_a_tspec_error():
    with pytest.raises(TspecError):
        parse('dim B "batch"\nrequire B <= ' + "(" * 1000 + "B" + ")" * 1000 + "\n")


# ---------------------------------------------------------------------------------------------
# Files

def test_spec_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "bad.tspec"
    path.write_bytes(b'dim B "\xff"\n')
    with raises(SpecError, f"{path}: not UTF-8 text (invalid start byte at byte 7)"):
        api.load(path)


def test_directory_is_not_a_spec(tmp_path):
    with pytest.raises(UsageError, match=re.escape(f"{tmp_path} is not a file")):
        api.read_spec(tmp_path)


# ---------------------------------------------------------------------------------------------
# Inputs and parameters are never computed

@pytest.mark.parametrize("body, expected", [
    ('param W "B"\ninput Z "B"\nW = relu(Z)\n',
     "t.tspec:6: param W (line 4) cannot also be computed by an equation"),
    ('input Z "B"\nZ = relu(Z)\n', "t.tspec:5: input Z (line 4) cannot also be computed by an equation"),
])
def test_equation_for_a_param_or_input(body, expected):
    with raises(SpecError, expected):
        check_text(HEADER + body)


# ---------------------------------------------------------------------------------------------
# Scalars that are not sizes

def test_division_of_dims_by_zero():
    with raises(SpecError, "t.tspec:5:16: division by zero"):
        parse(HEADER + 'input Z "B"\nO "B" = Z * (B / 0)\n')


@pytest.mark.parametrize("rhs", ["Z / 0", "Z / (B - B)"])
def test_division_of_a_tensor_by_zero(rhs):
    with pytest.raises(SpecError, match="division by zero"):
        check_text(HEADER + f'input Z "B"\nO "B" = {rhs}\n')


def test_constraint_with_modulo_by_zero():
    with pytest.raises(SpecError, match=re.escape("t.tspec:4:11: constraint: modulo by zero")):
        parse(HEADER + 'require d % (B - B) == 0\n')


def test_a_remainder_sympy_cannot_build_is_refused_where_it_is_written(monkeypatch):
    # sympy 1.14's Mod recurses without end on (a - 2/3) % (c + 1/2); the CLI called it
    # nesting. Pinned here whatever sympy's version: its Mod made to recurse
    def recursing(*args):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(sympy, "Mod", recursing)
    with raises(SpecError, "t.tspec:4:19: constraint: the remainder (d - 2 / 3) % (B + 1 / 2) "
                           "cannot be simplified; write it with whole-number operands"):
        parse(HEADER + 'require (d - 2/3) % (B + 1/2) == 0\n')


def test_a_name_cannot_be_both_a_dim_and_a_choice():
    with pytest.raises(SpecError):
        parse('dim B "batch"\ndim act "width"\nchoice act = relu | gelu\ninput X "B act"\n')


# ---------------------------------------------------------------------------------------------
# Recursion, digits, sizes of constants

def test_a_block_that_calls_itself_names_the_cycle():
    text = HEADER + 'block f(X "B") -> Y:\n    Y "B" = f(X)\ninput x "B"\ny "B" = f(x)\noutput y\n'
    with raises(SpecError, "t.tspec:4: block f calls itself: f -> f"):
        check_text(text)


def test_a_block_cycle_through_two_blocks_is_named():
    text = HEADER + ('block f(X "B") -> Y:\n    Y "B" = g(X)\n'
                     'block g(X "B") -> Y:\n    Y "B" = f(X)\n'
                     'input x "B"\ny "B" = f(x)\noutput y\n')
    with raises(SpecError, "t.tspec:4: block f calls itself: f -> g -> f"):
        check_text(text)


def test_non_ascii_digits_are_not_numbers():
    with raises(SpecSyntaxError, "t.tspec:1:17: unexpected character '\u0663'"):
        parse('dim B "batch" = \u0663\n')


def test_a_constant_too_large_to_hold_is_refused():
    with raises(SpecError, "t.tspec:4:21: constraint: (2 ** 64) ** 64 has more than 1000 "
                           "digits"):
        parse(HEADER + "require B <= (2**64)**64\n")


def test_when_not_equal_resolves_to_the_other_options():
    text = (HEADER + 'choice act = relu | gelu | tanh\ninput X "B d"\n'
            'when act != relu:\n    Y "B d" = gelu(X)\nelse:\n    Y "B d" = relu(X)\noutput Y\n')
    parsed = parse(text)
    (when,) = [s for s in parsed.body if type(s).__name__ == "When"]
    assert when.options == frozenset({"gelu", "tanh"}) and not when.negate


def test_a_body_read_in_too_many_ways_is_refused_and_unread_choices_cost_nothing():
    choices = "".join(f"choice c{i} = a | b\n" for i in range(18))
    whens = "".join(f'when c{i} == a:\n    note "n{i}"\n' for i in range(18))
    text = HEADER + choices + 'input X "B d"\n' + whens + "output X\n"
    with raises(SpecError, "t.tspec: the model reads 18 choices (c0, c1, c2, c3, c4, c5, c6, "
                "c7, c8, c9, c10, c11, c12, c13, c14, c15, c16, c17) in more than 131,072 "
                "ways, each proved on its own; fix some of them (--set NAME=OPTION), or "
                "declare the shape of a block call whose block reads them"):
        check_text(text, all_choices=True)
    assert len(check_text(text, {"c0": "a"}, all_choices=True).combinations) == 1 << 17
    # choices no body reads are no ways to prove: 2**40 combinations, one proof
    unread = HEADER + "".join(f"choice c{i} = a | b\n" for i in range(40)) + \
        'input X "B d"\noutput X\n'
    assert len(check_text(unread, all_choices=True).combinations) == 1 << 40


@pytest.mark.parametrize("text, expected", [
    ("", "t.tspec: the spec is empty: it has no statements"),
    ("# only a comment\n\n", "t.tspec: the spec is empty: it has no statements"),
    ('spec x "title"\n', "t.tspec: the spec is empty: it has no statements"),
])
def test_an_empty_spec_is_an_error(text, expected):
    with raises(SpecError, expected):
        parse(text)


@pytest.mark.parametrize("char", ["\x1b", "\x00", "\u202e", "\u200b"])
def test_control_and_format_characters_are_refused(char):
    code = f"U+{ord(char):04X}"
    with raises(SpecSyntaxError, f"t.tspec:2:9: control character {code} in the spec; specs "
                "are plain text"):
        parse(f'dim B "b"\ndim T "l{char}"\n')


def test_a_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "bom.tspec"
    path.write_bytes(b'\xef\xbb\xbfdim B "batch"\ninput X "B"\n')
    assert list(tspec.parse_file(path).dims) == ["B"]
    variant = tmp_path / "bom.toml"
    variant.write_bytes(b'\xef\xbb\xbfspec = "transformer"\n[dims]\nH = 4\n')
    assert api.load(str(variant)).dims == {"H": 4}


def test_a_variant_whose_spec_is_a_variant(tmp_path):
    path = tmp_path / "v.toml"
    path.write_text('spec = "base.toml"\n', encoding="utf-8")
    with raises(VariantError, f"{path}:1: spec = 'base.toml' names a variant; a variant's "
                "spec is a .tspec file or a built-in spec name"):
        api.load(str(path))


def test_a_description_with_a_control_character(tmp_path):
    path = tmp_path / "v.toml"
    path.write_text('spec = "transformer"\ndescription = "a\\u001b[31m"\n', encoding="utf-8")
    with raises(VariantError, f"{path}:2: description holds the control character U+001B"):
        api.load(str(path))
    path.write_text('spec = "transformer"\ndescription = "a\\u2029b"\n', encoding="utf-8")
    with raises(VariantError, f"{path}:2: description holds the paragraph separator U+2029"):
        api.load(str(path))


@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_target_name(name):
    with raises(UsageError, "an empty name is no spec or variant"):
        api.load(name)


def test_when_with_and_nests_and_its_else_belongs_to_each_condition():
    text = (HEADER + 'choice act = relu | gelu\nchoice wide = no | yes\ninput X "B d"\n'
            'when act == gelu and wide != no:\n    Y "B d" = gelu(X)\nelse:\n'
            '    Y "B d" = relu(X)\noutput Y\n')
    parsed = parse(text)
    for act, wide, op in [("gelu", "yes", "gelu"), ("gelu", "no", "relu"),
                          ("relu", "yes", "relu"), ("relu", "no", "relu")]:
        selected = select(parsed.body, {"act": act, "wide": wide})
        (equation,) = [s for s in selected if type(s).__name__ == "Equation"]
        assert equation.expr.op == op, (act, wide)
        assert check_text(text, {"act": act, "wide": wide}).ok
    assert check_text(text, all_choices=True).ok


@pytest.mark.parametrize("condition, message", [
    ("act == gelu and", "t.tspec:6:21: expected a choice name, found ':'"),
    ("act == gelu or wide == no", "t.tspec:6:18: expected ':' or 'and', found 'or'"),
    ("act == gelu and wdie == no",
     "t.tspec:6: 'when' names unknown choice 'wdie'; did you mean 'wide'?"),
])
def test_bad_conjunctions_in_when(condition, message):
    with raises((SpecError, SpecSyntaxError), message):
        parse(HEADER + f'choice act = relu | gelu\nchoice wide = no | yes\nwhen {condition}:\n'
                       '    input X "B T d"\n')


INSTANCE_CLASH = """\
spec clash "an instance named like a parameter"
dim B "batch"
dim d "width"

block inner(X "B d") -> Y:
    param W "d d" "weight"
    Y "B d" "output" = X @ W

block outer(X "B d") -> Z:
    param W "d d" "weight"
    Y "B d" "inner's output" = inner(X) as {instance}
    Z "B d" "output" = Y @ W

input X "B d" "input"
Z "B d" "output" = outer(X) as {top}
output Z
"""


@pytest.mark.parametrize("instance, top, line, message", [
    ("W", "first", 11, ("instance W has the name of a tensor or parameter in block outer (line "
     "10): both would be params['W'] and trace['W']; name the instance otherwise")),
    ("Z", "first", 11, ("instance Z has the name of a tensor or parameter in block outer (line "
     "12): both would be params['Z'] and trace['Z']; name the instance otherwise")),
    ("inner", "X", 15, ("instance X has the name of a tensor or parameter in the model (line "
     "14): both would be params['X'] and trace['X']; name the instance otherwise")),
])
def test_an_instance_named_like_a_tensor_of_its_scope_is_refused(instance, top, line, message):
    """An instance named like a parameter of its block crashed `tspec run` (IndexError):
    the two shared one key of the block's parameters."""
    with raises(SpecError, f"t.tspec:{line}: {message}"):
        parse(INSTANCE_CLASH.format(instance=instance, top=top))


@pytest.mark.parametrize("line", [
    'dim np "c"', 'dim math "c"', 'dim rope_factor "a width"', 'param rt "d"',
    'input MEMORY_LIMIT "B d"', 'input trace "B d"', 'input i "B d"', 'eps "B d" = X',
    'input theta "B d"', 'block prefill(Z "B") -> Y:\n    Y "B" = Z * 2',
    'block recorder(Z "B") -> Y:\n    Y "B" = Z * 2',
])
def test_a_name_generated_code_has_is_the_specs_to_use(line):
    """Names generated code binds of its own (its imports, constants, locals, settings' keyword
    arguments, functions) are spelt otherwise there where a spec takes one
    (codegen.lowering.spelling; tests/codegen/test_spec_names.py shows the numbers the same):
    the language refuses none of them. (A tensor named eps was once LayerNorm's epsilon.)"""
    text = f'dim B "b"\ndim d "w"\ninput X "B d"\n{line}\noutput X\n'
    name = re.match(r"(?:\w+ )?(\w+)", line).group(1)
    spec = parse(text)
    assert name in spec.dims or name in spec.blocks or \
        name in {getattr(s, "name", getattr(s, "output", None)) for s in spec.body}
