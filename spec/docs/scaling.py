"""Our matrix-product FLOPs against the scaling-law formulas, each as published.

Kaplan et al. 2020, Table 1, count the forward pass per token: C_forward = 2N + 2 n_layer n_ctx
d_attn, N = 2 d_model n_layer (2 d_attn + d_ff) the non-embedding parameters (Q, K and V
projected to d_attn each, the output projection, two feed-forward matrices; the attention term
is Q K^T over the context; the table lists the embedding and de-embedding, but leaves both out
of C_forward). Hoffmann et al. 2022, Appendix F, count it per sequence: embeddings
2 seq_len vocab_size d_model; per layer the key, query and value projections
2 * 3 seq_len d_model (key_size num_heads), the logits Q K^T and the reductions A V
2 seq_len^2 (key_size num_heads) each, softmax 3 num_heads seq_len^2, the final linear
2 seq_len (key_size num_heads) d_model and the dense block 2 seq_len (2 d_model ffw_size);
then the logits 2 seq_len d_model vocab_size; in all, embeddings + num_layers
(total_attention + dense_block) + logits.

Here both are written over the spec's dims (d_attn = key_size num_heads = H d_k, n_ctx =
seq_len the sequence, n_layer = num_layers = N), and every term by which ours differs is its
own formula, from the variant's choices: nothing is a remainder. ``scaling`` proves that
theirs plus the terms is ours, as polynomials in the dims; where it is not (a spec whose
structure the terms do not describe), or where the formulas count another model (an
encoder-decoder has two stacks and cross-attention), it says so and gives no comparison.
"""

from dataclasses import dataclass

import sympy

from tspec.analysis.counts import BodyCost

# the built-in spec's dims the comparison reads
DIMS = ("B", "d_model", "N", "H", "d_k", "d_v", "d_ff", "V")


@dataclass(frozen=True)
class Term:
    """One named difference: ours counts ``formula`` more (negative: less) than theirs."""
    label: str
    formula: sympy.Basic


@dataclass(frozen=True)
class Comparison:
    """One published formula, the terms by which ours differs, and ours."""
    name: str              # "Kaplan et al. 2020, Table 1"
    published: str         # their formula, in their notation (LaTeX between $)
    unit: str              # "per token" or "per sequence"
    theirs: sympy.Basic    # their formula over the spec's dims
    terms: tuple[Term, ...]
    ours: sympy.Basic      # our matrix products, per token or per sequence

    def residual(self) -> sympy.Basic:
        """ours - theirs - every term: 0 when the terms account for the whole difference."""
        return sympy.expand(self.ours - self.theirs - sympy.Add(*(t.formula for t in
                                                                   self.terms)))


@dataclass(frozen=True)
class Scaling:
    """The comparisons, or why there are none (``note``; empty when none is relevant)."""
    comparisons: tuple[Comparison, ...]
    note: str
    sequence: str = ""     # the dim n_ctx and seq stand for: T_dec or T


ENCODER_DECODER = ("The scaling-law formulas of Kaplan et al. 2020 (Table 1) and Hoffmann et "
                   "al. 2022 (Appendix F) count one stack of self-attention layers over one "
                   "sequence; they cannot describe an encoder-decoder, with two stacks, "
                   "cross-attention and a source and a target sequence, so this page gives no "
                   "comparison with them.")
UNDESCRIBED = ("This model's matrix products differ from the scaling-law formulas of Kaplan "
               "et al. 2020 (Table 1) and Hoffmann et al. 2022 (Appendix F) by terms the "
               "comparison cannot name, so this page gives none.")


def scaling(spec, choices: dict[str, str], model: BodyCost) -> Scaling:
    """The comparisons for a model of one stack over one sequence, with the built-in spec's
    dims (a spec that names them otherwise has none, and no note)."""
    symbols = spec.symbols()
    arch = choices.get("arch")
    sequence = "T" if arch == "encoder_only" else "T_dec"
    grouped = choices.get("key_value_heads") == "grouped"
    if not all(name in symbols for name in DIMS + (sequence,) + (("H_kv",) if grouped
                                                                  else ())):
        return Scaling((), "")
    if arch == "encoder_decoder":
        return Scaling((), ENCODER_DECODER)
    if arch not in ("decoder_only", "encoder_only"):
        return Scaling((), "")
    s = symbols
    B, d, N, H, d_k, d_v, d_ff, V = (s[n] for n in DIMS)
    ctx = s[sequence]
    kv = s["H_kv"] if grouped else H
    swiglu = choices.get("activation") == "swiglu"
    io = choices.get("encoder_io", "lm") if arch == "encoder_only" else "lm"
    logits, pooler = io == "lm", io == "bert"
    d_attn = H * d_k
    matmul = sympy.sympify(model.flops.matmul)

    # Kaplan et al. 2020, Table 1, per token
    parameters = 2 * d * N * (2 * d_attn + d_ff)
    kaplan = [
        Term("the output projection to the vocabulary: Table 1 lists this de-embedding, "
             "$2 d_{model} n_{vocab}$, but leaves it out of $C_{forward}$", 2 * d * V)
        if logits else None,
        Term("the weighted sum of values $A V$: Table 1's attention term (Mask, "
             "$2 n_{layer} n_{ctx} d_{attn}$) is one product over the context, $Q K^T$",
             2 * N * ctx * H * d_v),
        Term("SwiGLU's third feed-forward matrix, $W_3$: Table 1 counts two", 2 * N * d * d_ff)
        if swiglu else None,
        Term("keys and values of $H_{kv}$ heads under grouped-query attention, where Table 1 "
             "projects each to $d_{attn} = H d_k$", -2 * N * d * (H - kv) * (d_k + d_v))
        if grouped else None,
        Term("values and the output projection $H d_v$ wide, where Table 1 has $d_{attn} = H "
             "d_k$", 4 * N * d * H * (d_v - d_k)),
        Term("BertModel's pooler, $2 d_{model}^2$ at the first position of each sequence, per "
             "token", 2 * d * d / ctx) if pooler else None,
    ]
    # Hoffmann et al. 2022, Appendix F, per sequence
    attention = (2 * 3 * ctx * d * d_attn + 2 * ctx * ctx * d_attn + 3 * H * ctx * ctx
                 + 2 * ctx * ctx * d_attn + 2 * ctx * d_attn * d)
    dense = 2 * ctx * (d * d_ff + d * d_ff)
    chinchilla = 2 * ctx * V * d + N * (attention + dense) + 2 * ctx * d * V
    hoffmann = [
        Term("the embedding, which ours looks up (no FLOPs) and Appendix F counts as a "
             "product, $2 \\cdot seq\\_len \\cdot vocab\\_size \\cdot d_{model}$", -2 * ctx * V * d),
        Term("softmax, 3 per score in Appendix F, which ours counts with the element-wise "
             "work (5 per score), not among the matrix products", -3 * N * H * ctx * ctx),
        Term("SwiGLU's third feed-forward matrix, $W_3$: Appendix F's dense block has two",
             2 * N * ctx * d * d_ff) if swiglu else None,
        Term("keys and values of $H_{kv}$ heads under grouped-query attention, where Appendix "
             "F projects each to $key\\_size \\cdot num\\_heads$",
             -2 * N * ctx * d * (H - kv) * (d_k + d_v)) if grouped else None,
        Term("values, $A V$ and the final linear $H d_v$ wide, where Appendix F has "
             "$key\\_size \\cdot num\\_heads = H d_k$", 2 * N * ctx * H * (d_v - d_k) * (ctx + 2 * d)),
        Term("the final logits, which BertModel does not compute: it has no projection to "
             "the vocabulary", -2 * ctx * d * V) if not logits else None,
        Term("BertModel's pooler, $2 d_{model}^2$ at the first position", 2 * d * d)
        if pooler else None,
    ]
    found = (
        Comparison("Kaplan et al. 2020, Table 1",
                   "$C_{forward} = 2N + 2 n_{layer} n_{ctx} d_{attn}$, "
                   "$N = 2 d_{model} n_{layer} (2 d_{attn} + d_{ff})$", "per token",
                   2 * parameters + 2 * N * ctx * d_attn,
                   tuple(t for t in kaplan if t is not None), matmul / (B * ctx)),
        Comparison("Hoffmann et al. 2022, Appendix F",
                   "$embeddings + num\\_layers \\cdot (total\\_attention + "
                   "dense\\_block) + logits$", "per sequence", chinchilla,
                   tuple(t for t in hoffmann if t is not None), matmul / B))
    if any(c.residual() != 0 for c in found):
        return Scaling((), UNDESCRIBED)
    return Scaling(found, "", sequence)
