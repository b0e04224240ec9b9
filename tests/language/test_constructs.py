"""The spec says things once: a parameter absent under some options (`if`), a choice called as
the op its option names, a block built `from` another's equations, and blocks renamed under
choices. Each resolves when the spec is selected under choices: every selection is what the
spec written out by hand gives, so the checker, counts, docs and code see ordinary records."""

import numpy as np
import pytest
from support.command_line import run
from support.refusals import raises

import tspec
from tspec.analysis.counts import costs
from tspec.checking.check import check, combinations
from tspec.codegen.generate import source
from tspec.errors import LimitError, SpecError, SpecSyntaxError
from tspec.execution.loading import load_source
from tspec.language.model import (
    BlockCall,
    Equation,
    TensorDecl,
    Update,
    every_record,
    select,
    under,
)

HEADER = 'dim B "batch"\ndim T "length"\ndim d "width"\n'


def parse(text):
    return tspec.parse(text, file="t.tspec")


def rows(spec, choices):
    """What the checker lists under these choices: every tensor's name, role, shape and
    equation."""
    return [(r.name, r.role, r.shape.text() if r.shape else None, r.equation)
            for r in check(spec, choices).tensors]


def figures(spec, choices):
    return {name: (body.parameters, body.flops.total) for name, body in
            costs(spec, choices).items()}


def same_selections(sugared: str, written: str) -> int:
    """The two specs check, list and count alike under every combination of choices."""
    a, b = parse(sugared), parse(written)
    assert check(a, all_choices=True).findings == []
    combos = combinations(a)
    for combo in combos:
        assert rows(a, combo) == rows(b, combo), combo
        assert figures(a, combo) == figures(b, combo), combo
    return len(combos)


def equations(statements) -> dict[str, str]:
    return {s.output: s.text for s in statements if isinstance(s, Equation)}


# ---------------------------------------------------------------------------------------------
# Optional parameters

OPTIONAL = (HEADER + 'choice bias = all | none\ninput X "B T d"\nparam W "d d"\n'
            'param b "d" "bias" if bias == all\n'
            'Y "B T d" = X @ W + b\nZ "B T d" = b - X\nU "B T d" = (X + b) @ W\n'
            'V "B T d" = -b + X\noutput Y, Z, U, V\n')


def test_an_absent_parameter_drops_as_a_term_of_plus_or_minus():
    spec = parse(OPTIONAL)
    present = select(spec.body, {"bias": "all"})
    absent = select(spec.body, {"bias": "none"})
    assert equations(present) == {"Y": "X @ W + b", "Z": "b - X", "U": "(X + b) @ W",
                                  "V": "-b + X"}
    assert equations(absent) == {"Y": "X @ W", "Z": "-X", "U": "X @ W", "V": "X"}
    assert "b" in {s.name for s in present if isinstance(s, TensorDecl)}
    assert "b" not in {s.name for s in absent if isinstance(s, TensorDecl)}
    assert check(spec, all_choices=True).findings == []


def test_an_absent_parameter_reads_as_the_branch_written_without_it():
    sugared = (HEADER + 'choice bias = all | none\nchoice io = lm | bert\ninput X "B T d"\n'
               'input s "B T d" "types" if io == bert\nparam W "d d"\n'
               'param b "d" if bias == all and io != lm\n'
               'Y "B T d" = X @ W + b + s\noutput Y\n')
    written = (HEADER + 'choice bias = all | none\nchoice io = lm | bert\ninput X "B T d"\n'
               'when io == bert:\n    input s "B T d" "types"\nparam W "d d"\n'
               'when bias == all and io == bert:\n    param b "d"\n'
               'when bias == all and io == bert:\n    Y "B T d" = X @ W + b + s\n'
               'else:\n    when io == bert:\n        Y "B T d" = X @ W + s\n'
               '    else:\n        Y "B T d" = X @ W\noutput Y\n')
    assert same_selections(sugared, written) == 4


@pytest.mark.parametrize("text, error, message", [
    ('param b "d" "b" if\n', SpecSyntaxError,
     "t.tspec:4:19: expected a choice name, found end of line"),
    ('param b "d" "b" if cc == x\n', SpecError,
     "t.tspec:4: 'if' names unknown choice 'cc'; did you mean 'c'?"),
    ('param b "d" "b" if c == w\n', SpecError,
     "t.tspec:4: choice c has no option 'w'; options: x, y"),
    ('param b "d" "b" if c == x y\n', SpecSyntaxError,
     "t.tspec:4:27: unexpected 'y' at the end of the statement"),
    ('tensor t "d" "t" if c == x\n', SpecSyntaxError,
     "t.tspec:4:18: t: only a param or an input may be absent under a choice ('if ...')"),
    ('when c == x:\n    param b "d" if c == x\nelse:\n    param b "d"\n', SpecError,
     ("t.tspec:7: b is declared with 'if' at line 5 and without at line 7: give every "
     "declaration of it the same condition")),
    (('choice e = p | q\nwhen c == x:\n    param b "d" if c == x\nelse:\n'
     '    param b "d" if e == p\n'), SpecError,
     "t.tspec:8: b is absent under another condition at line 6; declare it under one"),
])
def test_a_malformed_condition_is_a_one_line_error(text, error, message):
    with raises(error, message):
        parse(HEADER.replace('dim d "width"\n', 'dim d "width"\nchoice c = x | y\n')
              .replace('dim B "batch"\n', '') + text)


# ---------------------------------------------------------------------------------------------
# A choice called as the op its option names

def test_a_choice_called_as_an_op_reads_as_one_equation_per_option():
    sugared = (HEADER + 'choice act = relu | gelu | gelu_tanh | swiglu\n'
               'choice bias = all | none\ninput X "B T d"\nparam W "d d"\n'
               'param b "d" if bias == all\n'
               'when act == swiglu:\n    Y "B T d" = silu(X @ W + b) * (X @ W)\n'
               'else:\n    Y "B T d" = act(X @ W + b)\noutput Y\n')
    written = (HEADER + 'choice act = relu | gelu | gelu_tanh | swiglu\n'
               'choice bias = all | none\ninput X "B T d"\nparam W "d d"\n'
               'when bias == all:\n    param b "d"\n')
    for act in ("relu", "gelu", "gelu_tanh"):
        written += (f'when act == {act} and bias == all:\n    Y "B T d" = {act}(X @ W + b)\n'
                    f'when act == {act} and bias == none:\n    Y "B T d" = {act}(X @ W)\n')
    written += ('when act == swiglu and bias == all:\n    Y "B T d" = silu(X @ W + b) * (X @ W)\n'
                'when act == swiglu and bias == none:\n    Y "B T d" = silu(X @ W) * (X @ W)\n'
                'output Y\n')
    assert same_selections(sugared, written) == 8
    spec = parse(sugared)
    assert [s.latex for s in select(spec.body, {"act": "gelu_tanh", "bias": "none"})
            if isinstance(s, Equation)] == [
        r"Y = \mathrm{GELU}_{\tanh}\left(X W\right)"]


@pytest.mark.parametrize("call", ["act(X, X)", "act(X, axis=-1)", "act()"])
def test_a_choice_takes_one_operand(call):
    with raises(SpecError, "t.tspec:6:13: act(...) applies the op its option names to one "
                "tensor: give it one argument"):
        parse(HEADER + f'choice act = relu | gelu\ninput X "B T d"\nY "B T d" = {call}\n')


def test_every_command_treats_a_flaw_as_a_finding(tmp_path, capsys, monkeypatch):
    # the choice's option names no op: every command sees the finding, none trips over the
    # tensor the equation would compute (before: KeyError in the counts, an internal error)
    (tmp_path / "f.tspec").write_text('spec f "f"\n' + HEADER + 'choice act = relu | swiglu\n'
                                      'input X "B T d"\nparam W "d d"\n'
                                      'Y "B T d" = act(X @ W)\nZ "B T d" = Y @ W\noutput Z\n')
    (tmp_path / "f.toml").write_text('spec = "f.tspec"\n[choices]\nact = "swiglu"\n'
                                     '[dims]\nB = 1\nT = 2\nd = 3\n')
    monkeypatch.chdir(tmp_path)
    # each lists the finding as `tspec check` does, then says what it did not do
    said = ("f.tspec:8: not-an-op: act=swiglu names no activation op; put this equation under "
            "`when act != swiglu`\n    equation: Y = act(X @ W)\n    tensor: Y\ntspec: 1 finding "
            "in f: {}\n")
    for argv, code, refused in (
            (["shapes", "f.toml"], 1, "the shapes listed are those declared, not proved"),
            (["docs", "f.toml", "--out", "out"], 1, "no documentation written"),
            (["generate", "f.toml", "--out", "out"], 1, "no code generated"),
            (["check", "f.toml", "--grid", "d=3,4"], 1, "no combination judged"),
            (["run", "f.toml"], 1, "nothing to run")):
        assert run(capsys, *argv)[::2] == (code, said.format(refused)), argv
    # diff, whose 1 says the two differ, in its one error line
    assert run(capsys, "diff", "f.toml", "f.toml")[::2] == (2, (
        "tspec: error: 1 finding in f and 1 finding in f: nothing compared (the first: "
        "f.tspec:8: not-an-op: act=swiglu names no activation op; put this equation under "
        "`when act != swiglu`)\n"))
    code, out, _ = run(capsys, "shapes", "f.toml")
    assert "Y       intermediate  float  B T d           1 2 3" in out


# ---------------------------------------------------------------------------------------------
# A block built from another's equations

PARENT = ('choice rot = no | yes\n'
          'block attend(X_q "B T_q d", X_kv "B T_kv d") -> O:\n'
          '    dim T_q "query length"\n    dim T_kv "key length"\n'
          '    param W_Q "d d" "query weight"\n    param W_K "d d" "key weight"\n'
          '    param b_Q "d" "query bias" if rot == yes\n'
          '    Q "B T_q d" "queries" = X_q @ W_Q + b_Q\n'
          '    when rot == yes:\n        K "B T_kv d" "keys" = relu(X_kv @ W_K)\n'
          '    else:\n        K "B T_kv d" "keys" = X_kv @ W_K\n'
          '    S "B T_q T_kv" "scores" = Q @ K.T\n'
          '    O "B T_q d" "output" = S @ K\n')
CHILD_BODY = ('    when rot == yes:\n        Q "B T_x d" "queries, turned" = gelu(X @ W_Q)\n'
              '    K_all "B T_past+T_x d" "every key" = concat(K_past, K, axis=-2)\n'
              '    S "B T_x T_past+T_x" "scores" = Q @ K_all.T\n'
              '    O "B T_x d" "output" = S @ K_all\n')
USE = ('input X "B T d"\ninput P "B T_past d"\nY "B T d" = attend(X, X) as full\n'
       'Z "B T d" = cached(X, P) as step\noutput Y, Z\n')


def test_a_block_from_another_is_the_block_written_out():
    dims = HEADER + 'dim T_past "past"\n'
    sugared = (dims + PARENT + 'block cached(X "B T_x d", K_past "B T_past d") -> O:\n'
               '    dim T_x "new"\n    from attend with X_q = X, X_kv = X, T_q = T_x, T_kv = T_x\n'
               + CHILD_BODY + USE)
    written = (dims + PARENT + 'block cached(X "B T_x d", K_past "B T_past d") -> O:\n'
               '    dim T_x "new"\n'
               '    param W_Q "d d" "query weight"\n    param W_K "d d" "key weight"\n'
               '    when rot == yes:\n        param b_Q "d" "query bias"\n'
               '        Q "B T_x d" "queries, turned" = gelu(X @ W_Q)\n'
               '        K "B T_x d" "keys" = relu(X @ W_K)\n'
               '    else:\n        Q "B T_x d" "queries" = X @ W_Q\n'
               '        K "B T_x d" "keys" = X @ W_K\n'
               '    K_all "B T_past+T_x d" "every key" = concat(K_past, K, axis=-2)\n'
               '    S "B T_x T_past+T_x" "scores" = Q @ K_all.T\n'
               '    O "B T_x d" "output" = S @ K_all\n' + USE)
    assert same_selections(sugared, written) == 2
    spec = parse(sugared)
    block = spec.blocks["cached"]
    assert list(block.local_dims) == ["T_x"]
    # an own equation takes the place of the parent's; own statements ahead of it stay ahead
    assert list(equations(select(block.body, {"rot": "no"}))) == ["Q", "K", "K_all", "S", "O"]
    assert equations(select(block.body, {"rot": "yes"})) == {
        "Q": "gelu(X @ W_Q)", "K": "relu(X @ W_K)", "K_all": "concat(K_past, K, axis=-2)",
        "S": "Q @ K_all.T", "O": "S @ K_all"}


def test_a_block_from_a_block_from_another_and_an_unbound_local_dim():
    spec = parse(HEADER + PARENT + 'block again(X "B T_q d") -> O:\n'
                 '    from attend with X_q = X, X_kv = X, T_kv = T_q\n'
                 'block more(Z "B T_q d") -> O:\n    from again with X = Z\n'
                 '    O "B T_q d" "output, twice" = S @ K + S @ K\n'
                 'input X "B T d"\nY "B T d" = more(X) as m\noutput Y\n')
    block = spec.blocks["more"]
    # T_q, never bound, is a local dim of both; the chain's bindings compose
    assert list(block.local_dims) == ["T_q"]
    assert equations(select(block.body, {"rot": "no"})) == {
        "Q": "Z @ W_Q", "K": "Z @ W_K", "S": "Q @ K.T", "O": "S @ K + S @ K"}
    assert check(spec, all_choices=True).findings == []


FROM = HEADER + PARENT.replace("choice rot = no | yes\n", 'choice rot = no | yes\n')


@pytest.mark.parametrize("body, error, message", [
    ('    from attend with X_q = X, X_q = X, X_kv = X\n', SpecError,
     "t.tspec:19:31: from attend: X_q is bound twice"),
    ('    from attend with X_q = Z, X_kv = X\n', SpecError,
     "t.tspec:19:28: from attend: X_q = Z: an input is bound to a tensor of block g"),
    ('    from attend with X_q = X + X, X_kv = X\n', SpecError,
     "t.tspec:19:30: from attend: X_q = X + X: an input is bound to a tensor of block g"),
    ('    from attend with X_q = X, X_kv = X, T_q = Q\n', SpecError,
     "t.tspec:19:47: unknown dim 'Q' in from attend: T_q"),
    ('    from attend with X_q = X\n', SpecError,
     ("t.tspec:19:5: from attend: its input X_kv is neither bound (with X_kv = ...) nor an "
     "input of block g")),
    ('    from attnd with X_q = X, X_kv = X\n', SpecError,
     "t.tspec:19:5: from: unknown block 'attnd'; did you mean 'attend'?"),
    ('    from g\n', SpecError, "t.tspec:19:5: block g starts from itself: g -> g"),
    ('    from attend with\n', SpecSyntaxError,
     "t.tspec:19:21: expected an input or local dim of the block to bind, found end of line"),
    ('    from attend with X_q X\n', SpecSyntaxError,
     "t.tspec:19:26: expected '=' and what it is bound to, found 'X'"),
    ('    from attend X_q = X\n', SpecSyntaxError,
     "t.tspec:19:17: unexpected 'X_q' at the end of the 'from' statement"),
    ('    from\n', SpecSyntaxError,
     "t.tspec:19:9: expected the name of the block to start from, found end of line"),
    ('    param V "d d"\n    from attend with X_q = X, X_kv = X\n', SpecError,
     "t.tspec:20:5: 'from' comes first in a block body, after its dims"),
    ('    when rot == no:\n        from attend with X_q = X, X_kv = X\n', SpecError,
     ("t.tspec:20:9: 'from' belongs first in a block body, not inside 'when' or at the top "
     "level")),
])
def test_a_malformed_from_is_a_one_line_error(body, error, message):
    with raises(error, message):
        parse(FROM + 'block g(X "B T d") -> O:\n' + body + '    O "B T d" = X\n')


def test_from_at_the_top_level_and_a_cycle_are_refused():
    with raises(SpecError, "t.tspec:4:1: 'from' belongs first in a block body, not inside "
                "'when' or at the top level"):
        parse(HEADER + 'from attend\n')
    with raises(SpecError, "t.tspec:8:5: block h starts from itself: g -> h -> g"):
        parse(HEADER + 'block g(X "B T d") -> O:\n    from h\n    O "B T d" = X\n'
              'block h(X "B T d") -> O:\n    from g\n    O "B T d" = X\n')


# ---------------------------------------------------------------------------------------------
# Renamed blocks

STACKS = (HEADER + 'choice arch = both | one\n'
          'block layer_a(Z "B T_x d") -> Z_out:\n    dim T_x "x"\n    param W "d d" "w"\n'
          '    Z_1 "B T_x d" = Z @ W\n    Z_out "B T_x d" = relu(Z_1) + Z\n'
          'block encoder(Z_0 "B T_x d") -> Z_enc:\n    dim T_x "x"\n'
          '    Z_enc "B T_x d" = repeat(2, layer_a, Z_0) as layers\n'
          'block decoder(Y_0 "B T_x d", Z_enc "B T_x d") -> Y_dec:\n    dim T_x "x"\n'
          '    Y_dec "B T_x d" = Y_0 + Z_enc\n'
          'input X "B T d"\n'
          'when arch == one:\n'
          '    rename encoder as decoder (Z_0 as Y_0, Z_enc as Y_dec)\n'
          '    rename layer_a as decoder_layer (Z as Y, Z_1 as Y_1, Z_out as Y_out)\n'
          '    Y "B T d" = encoder(X) as decoder\n'
          'else:\n    E "B T d" = encoder(X) as encoder\n'
          '    Y "B T d" = decoder(X, E) as decoder\n'
          'output Y\n')


def test_a_renamed_block_is_named_anew_with_its_calls_and_tensors():
    spec = parse(STACKS)
    assert under(spec, {"arch": "both"}) is spec
    renamed = under(spec, {"arch": "one"})
    assert under(spec, {"arch": "one"}) is renamed          # the same records each time
    assert list(renamed.blocks) == ["decoder_layer", "decoder"]
    assert [r[0] for r in rows(spec, {"arch": "one"})] == [
        "X", "decoder.Y_0", "decoder.layers[i].Y", "decoder.layers[i].W",
        "decoder.layers[i].Y_1", "decoder.layers[i].Y_out", "decoder.Y_dec", "Y"]
    assert [r[3] for r in rows(spec, {"arch": "one"})][-3:] == [
        "Y_out = relu(Y_1) + Y", "Y_dec = repeat(2, decoder_layer, Y_0)", "Y = decoder(X)"]
    assert check(spec, all_choices=True).findings == []
    # the parameters keep their keys: they follow the instances, not the blocks
    assert set(costs(spec, {"arch": "one"})) == {"t", "decoder", "decoder_layer"}
    assert set(costs(spec, {"arch": "both"})) == {"t", "encoder", "layer_a", "decoder"}


def test_renamed_code_runs_as_the_blocks_it_renames():
    spec = parse(STACKS)
    text = source(spec, {"arch": "one"})
    assert "def decoder(\n    Y_0:" in text and "class DecoderLayerParams" in text
    assert "def encoder" not in text and "encoder(" not in text and "layer_a" not in text
    module = load_source(text)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2, 3, 4))
    W = [rng.standard_normal((4, 4)) for _ in range(2)]
    trace: dict = {}
    Y = module.t(X, {"decoder": {"layers": [{"W": w} for w in W]}}, trace=trace)
    expected = X
    for w in W:
        expected = np.maximum(expected @ w, 0) + expected
    np.testing.assert_allclose(Y, expected, rtol=1e-12)
    assert sorted(trace["decoder"]["layers"][0]) == ["Y_1", "Y_out"]
    assert sorted(trace["decoder"]) == ["Y_dec", "layers"]


def test_a_renamed_block_cites_the_source_of_its_call_and_names_itself_anew():
    """Under a rename, a block's records cite the source in force where the model calls the
    renamed stack (a decoder-only decoder cited the seeds' encoder sections) and its tensors'
    meanings name the renamed blocks by their new names; blocks it calls keep their own."""
    text = ('spec t\ndim B "b"\ndim T "t"\ndim d "d"\nchoice arch = both | one\n'
            'source "the attention paper, section 3"\n'
            'block inner(X "B T_x d") -> O:\n    dim T_x "x"\n    O "B T_x d" "inner output" = X\n'
            'source "the encoder section"\n'
            'block layer_a(Z "B T_x d") -> Z_out:\n    dim T_x "x"\n'
            '    Z_1 "B T_x d" "what inner gives" = inner(Z) as inner\n'
            '    Z_out "B T_x d" "layer_a output" = relu(Z_1) + Z\n'
            'block encoder(Z_0 "B T_x d") -> Z_enc:\n    dim T_x "x"\n'
            '    Z_enc "B T_x d" "encoder output, of every layer_a" = repeat(2, layer_a, Z_0) as layers\n'
            'input X "B T d"\n'
            'when arch == one:\n'
            '    source "the decoder-only paper, section 2"\n'
            '    rename encoder as decoder (Z_0 as Y_0, Z_enc as Y_dec)\n'
            '    rename layer_a as decoder_layer (Z as Y, Z_1 as Y_1, Z_out as Y_out)\n'
            '    Y "B T d" = encoder(X) as decoder\n'
            'else:\n    Y "B T d" = encoder(X) as encoder\n'
            'output Y\n')
    spec = parse(text)

    def texts(choices):
        renamed = under(spec, choices)
        return {name: sorted({(s.output, s.source) for s in every_record(block.body)
                              if isinstance(s, (Equation, BlockCall))}
                             | {(s.name, s.meaning) for s in every_record(block.body)
                                if isinstance(s, TensorDecl)})
                for name, block in renamed.blocks.items()}
    assert texts({"arch": "one"}) == {
        "inner": [("O", "inner output"), ("O", "the attention paper, section 3")],
        "decoder_layer": [("Y_1", "the decoder-only paper, section 2"),
                          ("Y_1", "what inner gives"),
                          ("Y_out", "decoder_layer output"),
                          ("Y_out", "the decoder-only paper, section 2")],
        "decoder": [("Y_dec", "decoder output, of every decoder_layer"),
                    ("Y_dec", "the decoder-only paper, section 2")]}
    assert texts({"arch": "both"})["encoder"] == [
        ("Z_enc", "encoder output, of every layer_a"), ("Z_enc", "the encoder section")]


@pytest.mark.parametrize("statement, message", [
    ("rename encodr as decoder", ("t.tspec:18: rename: unknown block 'encodr'; did you mean "
     "'encoder'?")),
    ("rename encoder as decoder (Z_1 as Y)", ("t.tspec:18: rename encoder: 'Z_1' is not a "
     "tensor of block encoder; did you mean 'Z_0'?")),
    ("rename encoder as decoder (Z_0 as d)", ("t.tspec:18: rename encoder: d is already a name "
     "in block encoder or the spec")),
    ("rename encoder as decoder (Z_0 as Y, Z_0 as V)", ("t.tspec:18: rename encoder: Z_0 is "
     "listed twice")),
    ("rename encoder as spec", "t.tspec:18: block name 'spec' is a word of the spec language"),
    ("rename encoder as E", ("t.tspec:18: rename encoder as E: E is a dim or a tensor of this "
     "spec; a block takes a name of its own")),
    ("rename encoder as Z_1", ("t.tspec:18: rename encoder as Z_1: Z_1 is a dim or a tensor of "
     "this spec; a block takes a name of its own")),
    ("rename encoder as d", ("t.tspec:18: rename encoder as d: d is a dim or a tensor of this "
     "spec; a block takes a name of its own")),
])
def test_a_bad_rename_is_a_one_line_error(statement, message):
    with raises(SpecError, message):
        parse(STACKS.replace("    rename encoder as decoder (Z_0 as Y_0, Z_enc as Y_dec)",
                             "    " + statement))


@pytest.mark.parametrize("statement, message", [
    ("rename encoder decoder", ("t.tspec:18:20: expected 'as' and the block's new name, found "
     "'decoder'")),
    ("rename encoder as decoder (Z_0 as)", ("t.tspec:18:38: expected the tensor's new name, "
     "found ')'")),
    ("rename encoder as decoder (Z_0 Y_0)", ("t.tspec:18:36: expected 'as' and the tensor's new "
     "name, found 'Y_0'")),
    ("rename encoder as decoder (Z_0 as Y_0", ("t.tspec:18:31: bracket opened here is never "
     "closed (expected ')')")),
    ("rename encoder as decoder junk", ("t.tspec:18:31: unexpected 'junk' at the end of the "
     "'rename' statement")),
])
def test_a_malformed_rename_is_a_one_line_syntax_error(statement, message):
    with raises(SpecSyntaxError, message):
        parse(STACKS.replace("    rename encoder as decoder (Z_0 as Y_0, Z_enc as Y_dec)",
                             "    " + statement))


def test_a_rename_in_a_block_or_onto_a_called_block_is_refused():
    with raises(SpecError, "t.tspec:6:5: 'rename' belongs at the top level, or under a "
                "top-level 'when'"):
        parse(HEADER + 'block f(X "B T d") -> Y:\n    Y "B T d" = relu(X)\n'
              '    rename f as g\n')
    # under arch=both the model calls decoder itself: encoder cannot take its name there
    spec = parse(STACKS + "rename encoder as decoder\n")
    with raises(SpecError, "t.tspec:25: rename encoder as decoder: the model calls block "
                "decoder under arch=both; a block's new name must be one it does not call "
                "there"):
        check(spec, {"arch": "both"})
    spec = parse(STACKS.replace("    rename layer_a as decoder_layer",
                                "    rename encoder as other\n    rename layer_a as decoder_layer"))
    with raises(SpecError, "t.tspec:19: block encoder is renamed twice under arch=one (lines 18 "
                "and 19)"):
        check(spec, {"arch": "one"})


def test_rename_is_a_reserved_word():
    with raises(SpecError, "t.tspec:4: tensor name 'rename' is a word of the spec language"):
        parse(HEADER + 'input rename "B T d"\n')


# ---------------------------------------------------------------------------------------------
# The built-in spec says things once

def test_the_builtin_cached_self_attention_is_multi_head_attention_with_a_cache():
    # its tensors, in order, and its states keep the names they had when written out in full
    spec = tspec.load("transformer").spec
    block = spec.blocks["cached_self_attention"]
    head = "Q_proj K_proj V_proj"
    expected = {
        ("all", "sinusoidal"): (f"{head} Q_h K_n V_n K_h V_h O_h O O_proj", "K_h V_h", "K_h V_h"),
        ("all", "rotary"): (f"{head} Q_u Q_h K_u K_n V_n K_h V_h O_h O O_proj", "K_h V_h",
                            "K_h V_h"),
        ("grouped", "sinusoidal"): (f"{head} Q_h K_g V_g K_all V_all K_h V_h O_h O O_proj",
                                    "K_g V_g", "K_all V_all"),
        ("grouped", "rotary"): (f"{head} Q_u Q_h K_gu K_g V_g K_all V_all K_h V_h O_h O O_proj",
                                "K_g V_g", "K_all V_all"),
    }
    for (heads, positional), (outputs, starts, updates) in expected.items():
        chosen = spec.choice_values({"key_value_heads": heads, "positional": positional,
                                     "decoding": "step", "attention_bias": "all"})
        statements = select(block.body, chosen)
        assert " ".join(s.output for s in statements
                        if isinstance(s, (Equation, BlockCall))) == outputs
        assert [(s.name, s.start) for s in statements
                if isinstance(s, TensorDecl) and s.role == "state"] == \
            list(zip(("K_past", "V_past"), starts.split()))
        assert [(s.state, s.value) for s in statements if isinstance(s, Update)] == \
            list(zip(("K_past", "V_past"), updates.split()))
        rotated = "rotary(Q_u, T_past)" if positional == "rotary" else "split_heads(Q_proj, H)"
        assert equations(statements)["Q_h"] == rotated
        assert equations(statements)["Q_proj"] == "X @ W_Q + b_Q"


def test_decoder_only_stacks_are_named_as_decoders():
    spec = tspec.load("transformer").spec
    for choices in ({"arch": "decoder_only"}, {"arch": "decoder_only", "norm": "pre",
                                               "activation": "swiglu", "positional": "rotary",
                                               "normalization": "rms_norm",
                                               "key_value_heads": "grouped",
                                               "feed_forward_bias": "none"}):
        text = source(spec, choices)
        for name in ("def decoder(\n    Y_0:", "def decoder_layer(\n    Y:", "def decoder_step(",
                     "def decoder_layer_step(", "class DecoderParams", "Y_dec = decoder(",
                     "Y_dec = decoder_step("):
            assert name in text, name
        assert "def encoder" not in text and "EncoderParams" not in text and \
            "EncoderLayer" not in text and "encoder(" not in text
    # the encoder-decoder keeps both stacks by their own names
    text = source(spec, {"arch": "encoder_decoder"})
    assert "def encoder(\n    Z_0:" in text and "def decoder(\n    Y_0:" in text


# ---------------------------------------------------------------------------------------------
# Bounded: what the constructs expand to

def test_an_equation_varied_by_too_many_options_is_refused():
    options = "relu | gelu | gelu_tanh | silu | tanh_ | a | b | c | e"
    choices = "".join(f"choice k{i} = {options}\n" for i in range(4))
    with raises(SpecError, "t.tspec:9:13: Y: its choices and absent operands make 6,561 "
                "equations; the limit is 4,096"):
        parse(HEADER + choices + 'input X "B T d"\nY "B T d" = k0(k1(k2(k3(X))))\n')


def test_a_block_from_another_that_differs_in_too_many_ways_is_refused():
    choices = "".join(f"choice c{i} = x | y\n" for i in range(13))
    consults = "".join(f'    when c{i} == x:\n        Y{i} "B T d" = relu(X)\n'
                       for i in range(13))
    with raises(SpecError, "t.tspec:46:5: block g: f and its own statements differ in more "
                "than 4,096 ways of setting the choices"):
        parse(HEADER + choices + 'block f(X "B T d") -> O:\n' + consults +
              '    O "B T d" = relu(X)\nblock g(X "B T d") -> O:\n    from f\n')


def test_what_the_constructs_expand_to_is_bounded(monkeypatch):
    from tspec.language import building
    monkeypatch.setattr(building, "MAX_EXPANDED", 20)
    with raises(LimitError, "t.tspec: the spec's optional operands, choice calls and `from` "
                "blocks expand to more than 20 statements over its choices: vary fewer "
                "equations by more choices"):
        parse(HEADER + 'choice act = relu | gelu | gelu_tanh | silu\ninput X "B T d"\n' +
              "".join(f'Y{i} "B T d" = act(X)\n' for i in range(6)))
