"""Hints are advice people follow verbatim: a constraint a hint suggests is one to add.

Over specs drawn by hypothesis (a table sliced, heads split, sin/cos pairs, masks and derived
dims over random dim expressions and random constraints), every hint that says
"add the constraint `require ...`" must name a constraint that, pasted into the spec,

- parses to the constraint the finding means (``Finding.suggested``),
- is met, together with every constraint the spec has, by some sizes (the prover's search
  finds a witness), and
- removes the finding;

and a finding that suggests no constraint must say none. The mutation corpus
(tests/checking/test_mutations.py) checks the same of every finding it draws from the built-in spec.
"""

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tspec
from tspec.checking.check import check
from tspec.checking.prove import Prover
from tspec.errors import TspecError
from tspec.language.model import Constraint, Let
from tspec.symbolic.expr import parse_expression, to_sympy

SUGGESTION = re.compile(r"add the constraint `require ([^`]*)`")

HEADER = ('dim B "batch"\ndim T "length"\ndim T_past "earlier positions"\ndim d "width"\n'
          'dim H "heads"\ndim L "table rows"\ndim k "derived"\n'
          'input X "B T d"\nparam P_table "L d"\nparam R "2*L-1"\n')

_LENGTHS = st.sampled_from(["T", "T_past", "T + T_past", "L", "2*T", "T - 1", "L + 1", "H",
                            "T_past + 1", "d"])
_WIDTHS = st.sampled_from(["d", "2*H", "d + 1", "H*d", "d - H", "3", "2*d"])
_COUNTS = st.sampled_from(["H", "2", "2*H", "H + 1", "T"])
_CONSTRAINTS = st.sampled_from([
    "require T <= L", "require T + T_past <= L", "require d % H == 0", "require d % 2 == 0",
    "require d % (2*H) == 0", "require T_past < T", "require H <= d", "require 2*T <= L",
    "require T == T_past"])


@st.composite
def statements(draw):
    kind = draw(st.sampled_from(["rows", "range", "split", "pairs", "mask", "bias", "let",
                                 "rotary"]))
    if kind == "rows":
        return f'Y "{draw(_LENGTHS).replace(" ", "")} d" = P_table[:{draw(_LENGTHS)}]'
    if kind == "range":
        start, stop = draw(_LENGTHS), draw(_LENGTHS)
        rows = f"({stop})-({start})".replace(" ", "")
        return f'Y "{rows} d" = P_table[{start}:{stop}]'
    if kind == "split":
        count = draw(_COUNTS)
        return f'Y[{count.replace(" ", "")}] "B T d/({count.replace(" ", "")})" = ' \
               f'split_heads(X, {count})'
    if kind == "pairs":
        return f'Y "T {draw(_WIDTHS).replace(" ", "")}" = sinusoidal_encoding(T, ' \
               f'{draw(_WIDTHS)})'
    if kind == "mask":
        a, b = draw(_LENGTHS), draw(_LENGTHS)
        return f'Y "{a.replace(" ", "")} {b.replace(" ", "")}" bool = causal_mask({a}, {b})'
    if kind == "bias":
        a, b = draw(_LENGTHS), draw(_LENGTHS)
        return (f'Y "{a.replace(" ", "")} {b.replace(" ", "")}" = '
                f'relative_position_bias(R, {a}, {b})')
    if kind == "let":
        return f"let k = {draw(_LENGTHS)} - {draw(_LENGTHS)}" if draw(st.booleans()) else \
            f"let k = ({draw(_WIDTHS)}) / ({draw(_COUNTS)})"
    return f'Y "B T {draw(_WIDTHS).replace(" ", "")}" = rotary(X @ W, T_past)'


@st.composite
def specs(draw):
    constraints = draw(st.lists(_CONSTRAINTS, max_size=3, unique=True))
    statement = draw(statements())
    body = [statement]
    if "rotary" in statement:
        width = statement.split('"')[1].split()[-1]
        body.insert(0, f'param W "d {width}"')
    if not statement.startswith("let"):
        body.append("output Y")
    return HEADER + "".join(c + "\n" for c in constraints) + "".join(b + "\n" for b in body)


def suggested_constraints_hold(text: str, parsed, findings) -> int:
    """Check every finding's hint; returns how many suggested a constraint."""
    symbols = parsed.symbols()
    offered = 0
    for finding in findings:
        match = SUGGESTION.search(finding.hint)
        if finding.suggested is None:
            assert match is None and "`require" not in finding.hint, finding.text()
            continue
        offered += 1
        assert match is not None, finding.text()
        # pasted into the spec: it parses to the constraint the finding means
        meant = to_sympy(parse_expression(match.group(1)), symbols, relational=True)
        assert meant == finding.suggested, (match.group(1), finding.suggested)
        # some sizes meet it and every constraint the spec has
        constraints = [c.relation for c in parsed.body if isinstance(c, Constraint)]
        lets = {symbols[s.dim]: s.expr for s in parsed.body if isinstance(s, Let)}
        prover = Prover(list(symbols.values()), constraints + [meant], lets, {})
        assert prover.satisfiable() == "yes", finding.text()
        # and it removes the finding
        amended = tspec.parse(text + f"require {match.group(1)}\n", file="h.tspec")
        after = check(amended).findings
        assert (finding.kind, finding.line, finding.message) not in \
            {(f.kind, f.line, f.message) for f in after}, finding.text()
    return offered


@pytest.mark.slow
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs())
def test_a_suggested_constraint_parses_holds_somewhere_and_removes_its_finding(text):
    try:
        parsed = tspec.parse(text, file="h.tspec")
        findings = check(parsed).findings
    except TspecError:
        return          # a spec the generator made malformed: not this test's concern
    suggested_constraints_hold(text, parsed, findings)


def test_the_drawn_specs_offer_and_withhold_constraints():
    # the generator reaches both branches: hints that suggest a constraint and hints that
    # may not (the examples below are among those it draws)
    offered = HEADER + 'Y "T d" = P_table[:T]\noutput Y\n'
    parsed = tspec.parse(offered, file="h.tspec")
    assert suggested_constraints_hold(offered, parsed, check(parsed).findings) == 1
    withheld = HEADER + 'require T <= L\nY "L+1 d" = P_table[:L + 1]\noutput Y\n'
    parsed = tspec.parse(withheld, file="h.tspec")
    found = check(parsed).findings
    assert [f.kind for f in found] == ["out-of-range"]
    assert suggested_constraints_hold(withheld, parsed, found) == 0
    assert found[0].hint == ("declare P_table (line 9) with a row for every position it "
                             "serves: its L rows do not cover L+1")
