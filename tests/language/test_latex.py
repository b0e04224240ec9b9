"""Equations carry their LaTeX, built from the op catalogue's forms."""

import pytest

import tspec
from tspec.language.latex import name_latex
from tspec.language.model import Equation, When, select


def equations(parsed):
    found = {}

    def walk(statements):
        for s in statements:
            if isinstance(s, Equation):
                found.setdefault(s.output, s)
            elif isinstance(s, When):
                walk(s.body)
                walk(s.otherwise)
    for block in parsed.blocks.values():
        walk(block.body)
    walk(parsed.body)
    return found


@pytest.mark.parametrize("name, latex", [
    ("W_Q", "W_{Q}"), ("d_model", "d_{\\mathrm{model}}"), ("logits", "\\mathrm{logits}"),
    ("gamma", "\\gamma"), ("Z_0", "Z_{0}"), ("R_enc_h", "R_{\\mathrm{enc},h}"),
])
def test_names(name, latex):
    assert name_latex(name) == latex


@pytest.mark.parametrize("output, latex", [
    ("S_h", "S_{h} = \\frac{Q_{h} K_{h}^\\top}{\\sqrt{d_{k}}} + L_{h}"),
    ("A_h", "A_{h} = \\mathrm{softmax}\\left(S_{h}\\right)"),
    ("Z", "Z = \\mathrm{LayerNorm}\\left(X + Y;\\, \\gamma, \\beta\\right)"),
    ("U", ("U = \\mathrm{SiLU}\\left(X W_{1} + b_{1}\\right) \\odot "
           "\\left(X W_{3} + b_{3}\\right)")),
    ("P", "P = \\mathrm{PE}_{T \\times d_{\\mathrm{model}}}"),
    ("M_self", ("M_{\\mathrm{self}} = M^{\\mathrm{pad}}\\left(m_{\\mathrm{tgt}}\\right) \\odot "
               "M^{\\mathrm{causal}}_{T_{\\mathrm{dec}} \\times T_{\\mathrm{dec}}}")),
    ("P_enc_h", "P_{\\mathrm{enc},h} = {R_{\\mathrm{enc},h}}_{j - i}"),
])
def test_builtin_equations(output, latex):
    assert equations(tspec.load("transformer").spec)[output].latex == latex


def test_a_choice_called_as_an_op_prints_as_the_op_its_option_names():
    # feed_forward's U = activation(X @ W_1 + b_1), under each activation
    spec = tspec.load("transformer").spec
    for activation, name in (("relu", "\\mathrm{ReLU}"), ("gelu", "\\mathrm{GELU}"),
                             ("gelu_tanh", "\\mathrm{GELU}_{\\tanh}")):
        chosen = spec.choice_values({"activation": activation})
        (found,) = [s for s in select(spec.blocks["feed_forward"].body, chosen)
                    if isinstance(s, Equation) and s.output == "U"]
        assert found.latex == f"U = {name}\\left(X W_{{1}} + b_{{1}}\\right)"


def test_parentheses_only_where_needed():
    parsed = tspec.parse('dim B "b"\ndim d "d"\ninput X "B d"\ninput Y "B d"\n'
                        'Z "B d" = (X - (Y - X)) * 2 + -X\noutput Z\n', file="t.tspec")
    assert equations(parsed)["Z"].text == "(X - (Y - X)) * 2 + -X"
    assert equations(parsed)["Z"].latex == "Z = 2 \\left(X - \\left(Y - X\\right)\\right) + -X"


def test_offsets_row_ranges_and_bottom_right_alignment():
    parsed = tspec.parse('dim B "b"\ndim T_past "p"\ndim T "t"\ndim d "d"\ndim L "l"\n'
                        'input X "B T d"\nparam P_table "L d"\nparam R "2*L-1"\n'
                        'Q "B T d" = rotary(X, T_past)\n'
                        'S "T d" = sinusoidal_encoding(T, d, T_past)\n'
                        'P "T d" = P_table[T_past:T_past + T]\n'
                        'F "T d" = P_table[2:T + 2]\n'
                        'Z "T d" = P_table[0:T]\n'
                        'M "T T_past+T" bool = causal_mask(T, T_past + T)\n'
                        'O "T T_past+T" = relative_position_bias(R, T, T_past + T)\n'
                        'output Q, S, P, F, Z, M, O\n', file="t.tspec")
    found = {name: equation.latex for name, equation in equations(parsed).items()}
    past = "T_{\\mathrm{past}}"
    assert found == {
        "Q": f"Q = \\mathrm{{RoPE}}_{{+{past}}}\\left(X\\right)",
        "S": f"S = \\mathrm{{PE}}_{{T \\times d}}^{{+{past}}}",
        # rows count from 1 in the LaTeX: rows a .. b - 1 are a + 1 .. b
        "P": (f"P = {{P_{{\\mathrm{{table}}}}}}_{{{past} + 1:\\left(T + {past}\\right)}}"),
        "F": "F = {P_{\\mathrm{table}}}_{3:\\left(T + 2\\right)}",
        "Z": "Z = {P_{\\mathrm{table}}}_{1:T}",
        "M": f"M = M^{{\\mathrm{{causal}}}}_{{T \\times T + {past}}}",
        "O": f"O = {{R}}_{{j - i - \\left(T + {past} - T\\right)}}",
    }
