"""Attention whose scores pass through a chain of element-wise ops keeps the blocked path.

The scores of an attention core may be soft-capped (c * tanh(S / c), Gemma 2), shifted by a
bias over the query rows and keys (ALiBi, a relative position bias) or scaled, written in the
scores' equation or in equations of their own: NumPy computes them a block of query rows at a
time (``rt.attend_in_blocks(..., scores=...)``), the chain applied to each block; CuPy's fused
kernel applies no chain, so there the core is computed as written and `tspec generate` says
so. Numbers against softmax(f(q k^T / sqrt(d_k)) + L) V computed here, memory against the
size of one score matrix.
"""

import tracemalloc

import numpy as np
import pytest
from support.command_line import run

import tspec
from tspec import shipped
from tspec.analysis.attention import attention_core
from tspec.codegen.generate import source
from tspec.execution.loading import load_source
from tspec.language.model import Equation, declarations, select

PLAIN = 'S_h[H] "B T_q T_kv" "scores, plus the additive mask log M" = ' \
    'Q_h @ K_h.T / sqrt(d_k) + L_h'


def with_scores(*lines: str):
    """The built-in spec with the scores' equation of scaled_dot_product_attention replaced
    by ``lines`` (each indented as the block's body)."""
    text = shipped.BUILTIN_SPEC.read_text()
    assert text.count(PLAIN) == 1
    # the line that holds it, found by its text: the lines replacing it take its indentation
    start = text.rindex("\n", 0, text.index(PLAIN)) + 1
    indent = text[start:text.index(PLAIN)]
    return tspec.parse(text.replace(PLAIN, f"\n{indent}".join(lines)), file="chained.tspec")


CAPPED = (('S_h[H] "B T_q T_kv" "capped scores, plus the mask" = '
          '30 * tanh(Q_h @ K_h.T / sqrt(d_k) / 30) + L_h'),)
SOFTCAP = (('S_h[H] "B T_q T_kv" "capped scores, plus the mask" = '
           'softcap(Q_h @ K_h.T / sqrt(d_k)) + L_h'),)
STEPS = ('S_r[H] "B T_q T_kv" "raw scores" = Q_h @ K_h.T / sqrt(d_k)',
         'S_c[H] "B T_q T_kv" "capped" = 30 * tanh(S_r / 30)',
         'S_h[H] "B T_q T_kv" "capped scores, plus the mask" = S_c + L_h')
# attention alone, with a bias over its rows and keys (as ALiBi or a relative position bias)
BIASED = '''spec biased "attention with a bias over its rows and keys"
dim B "batch"
dim H "heads"
dim T "length"
dim d_k "width"

block scaled_dot_product_attention(Q_h[H] "B T_q d_k", K_h[H] "B T_kv d_k", \
V_h[H] "B T_kv d_k", L_h[H] "B T_q T_kv", P_h[H] "B T_q T_kv") -> O_h:
    dim T_q "query length"
    dim T_kv "key length"
    S_h[H] "B T_q T_kv" "biased scores, plus the mask" = Q_h @ K_h.T / sqrt(d_k) + P_h + L_h
    A_h[H] "B T_q T_kv" "attention weights" = softmax(S_h, axis=-1)
    O_h[H] "B T_q d_k" "weighted sum of values" = A_h @ V_h

input Q[H] "B T d_k" "queries"
input K[H] "B T d_k" "keys"
input V[H] "B T d_k" "values"
input L[H] "B T T" "the additive mask"
input P[H] "B T T" "a bias over the rows and keys"
O[H] "B T d_k" "output" = scaled_dot_product_attention(Q, K, V, L, P) as attention
output O
'''.replace("\\\n", "")


def biased():
    return tspec.parse(BIASED, file="biased.tspec")


def core_of(spec, choices=None):
    choices = spec.choice_values(choices or {})
    block = spec.blocks["scaled_dot_product_attention"]
    statements = select(block.body, choices)
    decls, _ = declarations(statements, block)
    producers = {s.output: s for s in statements if isinstance(s, Equation)}
    return attention_core(block, producers, decls)


def test_a_chain_on_the_scores_is_attention_still():
    plain = core_of(tspec.parse(shipped.BUILTIN_SPEC.read_text()))
    assert (plain.chain, plain.extras) == ((), ())
    capped = core_of(with_scores(*CAPPED))
    assert (capped.scores, capped.chain, capped.extras) == ("S_h", (), ())
    steps = core_of(with_scores(*STEPS))
    assert (steps.scores, steps.chain, steps.extras) == ("S_h", ("S_r", "S_c"), ())
    assert core_of(biased()).extras == ("P_h",)


@pytest.mark.parametrize("lines", [
    # the mask not added last: a capped mask is -30, no longer -inf, and no key can be dropped
    ('S_h[H] "B T_q T_kv" "s" = 30 * tanh((Q_h @ K_h.T / sqrt(d_k) + L_h) / 30)',),
    # a softmax inside the chain reduces over the keys: a block of rows would see fewer
    ('S_h[H] "B T_q T_kv" "s" = softmax(Q_h @ K_h.T / sqrt(d_k)) + L_h',),
    # two products
    ('S_h[H] "B T_q T_kv" "s" = Q_h @ K_h.T + Q_h @ K_h.T + L_h',),
    # a tensor over the queries' width, not over the rows and keys
    ('S_h[H] "B T_q T_kv" "s" = Q_h @ K_h.T / sqrt(d_k) + L_h + L_h',),
])
def test_what_is_no_chain_is_no_core(lines):
    assert core_of(with_scores(*lines)) is None


def generated_function(spec, backend="numpy", choices=None):
    code = source(spec, {"arch": "decoder_only"} if choices is None else choices, backend)
    start = code.index("def scaled_dot_product_attention")
    return code, code[start:code.index("\n\n\n", start)]


def test_numpy_computes_a_chained_core_a_block_of_rows_at_a_time():
    _, capped = generated_function(with_scores(*CAPPED))
    assert "    if trace is None:  # the equations below, a block of query rows at a time\n" \
        "        return rt.attend_in_blocks(\n" \
        "            Q_h / math.sqrt(d_k), K_h, V_h, L_h, " \
        "scores=lambda S, rows, keys: np.tanh(S / 30) * 30\n" \
        "        )  # [H] B T_q d_v\n" in capped
    _, softcap = generated_function(with_scores(*SOFTCAP))
    assert "scores=lambda S, rows, keys: np.tanh(S / settings.score_cap) * settings.score_cap,\n" \
        in softcap
    assert "    settings: Settings = SETTINGS,\n    *, trace: dict | None = None,\n" in softcap
    _, steps = generated_function(with_scores(*STEPS))
    assert "scores=lambda S, rows, keys: np.tanh(S / 30) * 30" in steps
    assert "    S_r = Q_h / math.sqrt(d_k) @ K_h.swapaxes(-1, -2)  # [H] B T_q T_kv\n" in steps
    _, bias = generated_function(biased(), choices={})
    assert "            scores=lambda S, rows, keys: S + P_h[..., rows, keys],\n" in bias


def test_cupy_says_its_kernel_applies_no_chain():
    _, capped = generated_function(with_scores(*CAPPED), "cupy")
    assert "    # the scores pass through scale, tanh, which attend_fused cannot apply: " \
        "computed as written, [H]\n    # B T_q T_kv at once\n" in capped
    assert "rt.attend_fused(" not in capped
    _, plain = generated_function(tspec.parse(shipped.BUILTIN_SPEC.read_text()), "cupy")
    assert "rt.attend_fused(" in plain and "cannot apply" not in plain


def reference(q, k, v, L, chain):
    S = chain(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])) + L
    S = S - S.max(axis=-1, keepdims=True)
    A = np.exp(S)
    return (A / A.sum(axis=-1, keepdims=True)) @ v


@pytest.mark.parametrize("which", ["capped", "steps", "biased", "softcap"])
def test_the_blocked_chain_gives_the_scores_numbers(which):
    spec = biased() if which == "biased" else with_scores(*{
        "capped": CAPPED, "steps": STEPS, "softcap": SOFTCAP}[which])
    code, _ = generated_function(spec, choices={} if which == "biased" else None)
    module = load_source(code)
    rng = np.random.default_rng(0)
    H, B, T, d = 2, 2, 300, 8          # more rows than one block of queries
    q, k, v = (rng.standard_normal((H, B, T, d)) * 3 for _ in range(3))
    causal = np.where(np.tril(np.ones((T, T), bool)), 0.0, -np.inf)
    L = np.broadcast_to(causal, (H, B, T, T))
    bias = rng.standard_normal((H, B, T, T))
    extra = {"P_h": bias} if which == "biased" else \
        {"settings": module.Settings(score_cap=2.5)} if which == "softcap" else {}
    cap = 2.5 if which == "softcap" else 30
    chain = (lambda S: S + bias) if which == "biased" else (lambda S: cap * np.tanh(S / cap))
    expected = reference(q, k, v, L, chain)
    blocked = module.scaled_dot_product_attention(q, k, v, L, **extra)
    written = module.scaled_dot_product_attention(q, k, v, L, **extra, trace={})
    np.testing.assert_allclose(blocked, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(written, expected, rtol=1e-10, atol=1e-12)


def test_the_blocked_chain_never_holds_a_whole_score_matrix():
    code, _ = generated_function(with_scores(*CAPPED))
    module = load_source(code)
    rng = np.random.default_rng(1)
    H, B, T, d = 2, 1, 1024, 8
    q, k, v = (rng.standard_normal((H, B, T, d)) for _ in range(3))
    L = np.zeros((1, 1, T, T))
    matrix = H * B * T * T * 8                          # one float64 score matrix: 16 MiB
    for trace, most in ((None, matrix // 2), ({}, 2 * matrix)):
        tracemalloc.start()
        module.scaled_dot_product_attention(q, k, v, L, trace=trace)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        if trace is None:
            assert peak < most, peak                    # blocks of rows, never the whole
        else:
            assert peak >= most, peak                   # as written: scores and weights


def test_generate_names_a_chain_the_backend_cannot_block(tmp_path, capsys):
    spec = tmp_path / "capped.tspec"
    text = shipped.BUILTIN_SPEC.read_text().replace(PLAIN, CAPPED[0])
    spec.write_text(text.replace('choice arch = encoder_decoder | encoder_only | decoder_only',
                                 'choice arch = decoder_only | encoder_decoder | encoder_only'))
    code, out, err = run(capsys, "generate", str(spec), "--backend", "cupy", "--out",
                         str(tmp_path / "out"))
    assert (code, err) == (0, "")
    assert "note: scaled_dot_product_attention: the scores pass through scale, tanh, which " \
        "attend_fused cannot apply: computed as written, [H] B T_q T_kv at once" in out
    code, out, err = run(capsys, "generate", str(spec), "--out", str(tmp_path / "numpy"))
    assert (code, err) == (0, "") and "note:" not in out
