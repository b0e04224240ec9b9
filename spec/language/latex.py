"""LaTeX for names and equations; each op's own form comes from its catalogue entry."""

import re

import sympy

from tspec.language.model import OpNode, ScalarExpr, TensorRef
from tspec.ops.catalogue import OPS

_GREEK = {"alpha", "beta", "gamma", "delta", "epsilon", "eta", "theta", "kappa", "lambda",
          "mu", "nu", "xi", "pi", "rho", "sigma", "tau", "phi", "chi", "psi", "omega"}


def name_latex(name: str) -> str:
    """``W_Q`` -> ``W_{Q}``, ``d_model`` -> ``d_{\\mathrm{model}}``, ``logits`` -> ``\\mathrm{logits}``."""
    base, *rest = name.split("_")
    base_tex = f"\\{base}" if base in _GREEK else base if len(base) == 1 \
        else f"\\mathrm{{{base}}}"
    if not rest:
        return base_tex
    parts = [p if len(p) <= 1 or re.fullmatch(r"\d+", p) else f"\\mathrm{{{p}}}" for p in rest
             if p]
    return f"{base_tex}_{{{','.join(parts)}}}"


def term_latex(term) -> str:
    if isinstance(term, TensorRef):
        return name_latex(term.name)
    if isinstance(term, ScalarExpr):
        names = {s: sympy.Symbol(name_latex(str(s))) for s in term.expr.free_symbols}
        return sympy.latex(term.expr, symbol_names={s: str(v) for s, v in names.items()})
    assert isinstance(term, OpNode)
    op = OPS[term.op]
    parts = []
    # \frac needs no parentheses around its parts; function-like ops (precedence 100)
    # bracket their arguments themselves
    for index, arg in enumerate(term.args):
        text = term_latex(arg)
        fraction = op.fraction(term.attr)
        if isinstance(arg, OpNode) and not fraction and op.precedence < 100:
            inner = OPS[arg.op].precedence
            if inner < op.precedence or (inner == op.precedence and index > 0
                                         and op.group_right):
                text = f"\\left({text}\\right)"
        elif isinstance(arg, ScalarExpr) and not fraction and op.precedence < 100 \
                and isinstance(arg.expr, sympy.Add):
            text = f"\\left({text}\\right)"
        parts.append(text)
    return op.latex(parts, term.attr)


def equation_latex(output: str, term) -> str:
    return f"{name_latex(output)} = {term_latex(term)}"


def call_latex(output: str, block: str, args, repeat=None) -> str:
    """``Y = block(X, ...)`` as an operator applied to its arguments, ``repeat_N`` before it
    for a stack."""
    arguments = ", ".join(name_latex(a) for a in args)
    function = block.replace("_", "\\_")
    stack = "" if repeat is None else f"\\operatorname{{repeat}}_{{{sympy.latex(repeat)}}}\\,"
    return (f"{name_latex(output)} = {stack}\\operatorname{{{function}}}\\left({arguments}"
            "\\right)")
