"""One mistake, one finding first: single-declaration mutations of the built-in spec.

Each entry of tests/checking/mutations.toml changes one declaration of spec/transformer.tspec; the
first finding `tspec check` prints for it must be at the mutated line (for [[elsewhere]]
entries, at the line they name, for the reason they give), of the entry's kind, and every
other finding must follow from it (listed beneath it as a consequence). Every constraint a hint suggests on the way must pass what
tests/checking/test_hints.py asks of one. Correct but tricky specs must stay clean.
"""

import functools
import re
import tomllib
from pathlib import Path

import pytest

import tspec
from tspec import api
from tspec.checking.check import check
from tspec.checking.findings import findings_text, grouped
from tspec.symbolic.expr import parse_expression, to_sympy

CORPUS = tomllib.loads((Path(__file__).parent / "mutations.toml").read_text())
SOURCE = api.BUILTIN_SPEC.read_text().splitlines()
BASE = {"arch": "encoder_decoder", "norm": "post", "activation": "relu",
        "positional": "sinusoidal", "head_dims": "split"}
SUGGESTION = re.compile(r"add the constraint `require ([^`]*)`")


def line_of(text: str, occurrence: int | None, entry: dict) -> int:
    """The line of the spec as it is now whose text is ``text``: found by its content alone,
    so that no entry moves when lines are added to the spec (``occurrence``: which of the
    lines of that text, counted from 1, where there are several)."""
    found = [i for i, line in enumerate(SOURCE, 1) if line.strip() == text]
    assert found, f"entry {entry['line']}: {text!r} is gone from the built-in spec"
    if occurrence is None:
        assert len(found) == 1, (f"entry {entry['line']}: {text!r} is on {len(found)} lines of "
                                 "the built-in spec: say which, with occurrence")
        return found[0]
    assert len(found) >= occurrence, (entry, found)
    return found[occurrence - 1]


def where(entry: dict) -> int:
    """The entry's line in the spec as it is now (``line`` only names the entry)."""
    return line_of(entry["text"], entry.get("occurrence"), entry)


def mutated(entry: dict) -> tuple[str, int]:
    line = where(entry)
    lines = list(SOURCE)
    assert entry["old"] in lines[line - 1], entry
    lines[line - 1] = lines[line - 1].replace(entry["old"], entry["new"], 1)
    return "\n".join(lines) + "\n", line


@functools.lru_cache(maxsize=4)
def parsed_once(text: str):
    """The spec parsed (a mutated spec is read by several checks of one entry)."""
    return tspec.parse(text, file="m.tspec")


def findings(text: str, entry: dict, every: bool = False):
    parsed = parsed_once(text)
    if every:
        return check(parsed, all_choices=True).findings
    choices = {**BASE, **entry["choices"]}
    opened = entry.get("open", [])
    if opened:
        fixed = {k: v for k, v in parsed.choice_values(choices).items() if k not in opened}
        return check(parsed, fixed, all_choices=True).findings
    return check(parsed, choices).findings


def suggestions_hold(text: str, entry: dict, found, every: bool = False) -> None:
    """A constraint a hint suggests parses to the one meant and removes its finding."""
    symbols = parsed_once(text).symbols()
    pasted: dict = {}       # each constraint pasted once, for every finding that suggests it
    for finding in found:
        match = SUGGESTION.search(finding.hint)
        assert (match is None) == (finding.suggested is None), finding.text()
        if match is None:
            continue
        assert to_sympy(parse_expression(match.group(1)), symbols, relational=True) == \
            finding.suggested
        if match.group(1) not in pasted:
            pasted[match.group(1)] = findings(text + f"require {match.group(1)}\n", entry, every)
        after = pasted[match.group(1)]
        assert (finding.kind, finding.line, finding.message) not in \
            {(f.kind, f.line, f.message) for f in after}, finding.text()


def first_and_order(found, line: int, kind: str) -> None:
    assert found, "the mutation went unnoticed"
    first = found[0]
    assert (first.line, first.kind) == (line, kind), "\n\n".join(findings_text(found))
    # one mistake, one cause: every other finding follows from the first
    assert [cause for cause, _ in grouped(found)] == [first], "\n\n".join(findings_text(found))


@pytest.mark.parametrize("entry", CORPUS["mutation"],
                         ids=[f"{e['line']}:{e['new']}" for e in CORPUS["mutation"]])
def test_the_first_finding_is_at_the_mutated_line(entry):
    text, line = mutated(entry)
    found = findings(text, entry)
    first_and_order(found, line, entry["kind"])
    suggestions_hold(text, entry, found)


EVERY = [e for e in CORPUS["mutation"] if e.get("every")]


@pytest.mark.parametrize("entry", EVERY, ids=[f"{e['line']}:{e['new']}" for e in EVERY])
def test_under_every_choice_the_first_finding_is_at_the_mutated_line(entry):
    # `tspec check spec.tspec`, no choice set: the mutation is found under the choices it
    # shows in and no finding of another combination comes first or beside it (a variant's
    # decoding step, the full model that starts a step, another branch's use of the tensor)
    text, line = mutated(entry)
    found = findings(text, entry, every=True)
    first_and_order(found, line, entry["kind"])
    suggestions_hold(text, entry, found, every=True)


@pytest.mark.parametrize("entry", CORPUS["elsewhere"],
                         ids=[f"{e['line']}:{e['new']}" for e in CORPUS["elsewhere"]])
def test_a_declaration_its_one_use_compares_is_reported_at_the_use(entry):
    text, _ = mutated(entry)
    at = line_of(entry["at_text"], entry.get("at_occurrence"), entry)
    found = findings(text, entry)
    first_and_order(found, at, entry["kind"])


def test_the_corpus_is_large_and_varied():
    entries = CORPUS["mutation"]
    assert len(entries) >= 50
    kinds = {e["kind"] for e in entries}
    assert kinds >= {"shape-mismatch", "operand-mismatch", "argument-mismatch",
                     "declaration-mismatch", "not-divisible", "not-integral", "out-of-range"}
    # every kind of declaration: a param, a block input, a let, an equation
    texts = [e["text"] for e in entries]
    assert any(t.startswith("param ") for t in texts)
    assert any(t.startswith("block ") for t in texts)
    assert any(t.startswith("let ") for t in texts)
    assert any(" = " in t and not t.startswith(("param ", "let ")) for t in texts)


# ---------------------------------------------------------------------------------------------
# Correct but tricky: each must stay clean

TRICKY = {
    # one block called at two bindings (self- and cross-attention), a mask family broadcast
    "attention at two bindings": (
        'dim B "b"\ndim T "t"\ndim S "s"\ndim d "d"\ndim H "h"\nrequire d % H == 0\n'
        'block attend(X_q "B T_q d", X_kv "B T_kv d", L_h[H] "B T_q T_kv") -> O:\n'
        '    dim T_q "q"\n    dim T_kv "k"\n'
        '    Q_h[H] "B T_q d/H" = split_heads(X_q, H)\n'
        '    K_h[H] "B T_kv d/H" = split_heads(X_kv, H)\n'
        '    A_h[H] "B T_q T_kv" = softmax(Q_h @ K_h.T / sqrt(d/H) + L_h, axis=-1)\n'
        '    O "B T_q d" = concat_heads(A_h @ K_h)\n'
        'input X "B T d"\ninput Y "B S d"\ninput m "B T" bool\ninput n "B S" bool\n'
        'L "B T T" = log(padding_mask(m, T))\nL_x "B T S" = log(padding_mask(n, T))\n'
        'Z "B T d" = attend(X, X, L) as self_attention\n'
        'W "B T d" = attend(Z, Y, L_x) as cross_attention\n'
        'output W\n'),
    # one dim written three ways, a leading unit axis, broadcasting against 1
    "one size written three ways": (
        'dim B "b"\ndim T "t"\ndim T_past "p"\ndim d "d"\ndim H "h"\ndim d_k "k"\n'
        'let d_k = d / H\nrequire d % H == 0\n'
        'input X "B T_past+T H*d_k"\nparam g "1 1 d"\n'
        'Y "B T+T_past d" = X * g\nZ "1 B T_past+T d_k*H" = relu(Y)\noutput Z\n'),
    # a learned table sliced at an offset within its rows, a causal mask at an offset
    "a decoding step's rows": (
        'dim B "b"\ndim T_new "n"\ndim T_past "p"\ndim d "d"\ndim max_len "m"\n'
        'require T_past + T_new <= max_len\n'
        'input X "B T_new d"\nparam P "max_len d"\n'
        'Y "B T_new d" = X + P[T_past:T_past + T_new]\n'
        'M "T_new T_past+T_new" bool = causal_mask(T_new, T_past + T_new)\noutput Y, M\n'),
    # a parameter used at several lines, each under its own choice
    "one weight, used under two choices": (
        'dim B "b"\ndim T "t"\ndim d "d"\ndim e "e"\nchoice act = relu | gelu\n'
        'input X "B T d"\nparam W "d e"\n'
        'when act == relu:\n    Y "B T e" = relu(X @ W)\nelse:\n    Y "B T e" = gelu(X @ W)\n'
        'output Y\n'),
    # an equality constraint proves two widths equal; a derived dim divides evenly
    "widths equal by a constraint": (
        'dim B "b"\ndim d_k "k"\ndim d_v "v"\ndim d "d"\ndim k "half"\n'
        'require d_v == d_k\nrequire d_k % 2 == 0\nlet k = d_k / 2\n'
        'input Q "B d_k"\ninput V "B d_v"\nY "B d_v" = Q + V\n'
        'P "k d_k" = sinusoidal_encoding(k, d_k)\noutput Y, P\n'),
}


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_correct_but_tricky_specs_stay_clean(name):
    parsed = tspec.parse(TRICKY[name], file="t.tspec")
    assert check(parsed, all_choices=True).findings == [], name
