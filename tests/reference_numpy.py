"""An independent NumPy Transformer written from the math, one head and one sequence at a time.

Deliberately plain: loops over batch and heads, explicit per-head weight slices, no shared code
with the generator. It covers every choice of the built-in spec (BERT's token types,
embedding LayerNorm and pooler included), so the generated code can be
compared with it on random variants (tests/test_codegen.py).
"""

import math

import numpy as np


def layer_norm(x, p, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * p["gamma"] + p["beta"]


def activation(x, kind):
    if kind == "relu":
        return np.maximum(x, 0)
    if kind == "gelu":
        return np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))(x)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def attention(X_q, X_kv, keep, p, H, d_k, d_v, bias=None):
    """keep: (B, T_q, T_kv) booleans; bias: (H, T_q, T_kv) or None."""
    B, T_q, _ = X_q.shape
    heads = np.zeros((B, T_q, H * d_v))
    for b in range(B):
        for h in range(H):
            q_cols, v_cols = slice(h * d_k, (h + 1) * d_k), slice(h * d_v, (h + 1) * d_v)
            q = X_q[b] @ p["W_Q"][:, q_cols] + (p["b_Q"][q_cols] if "b_Q" in p else 0)
            k = X_kv[b] @ p["W_K"][:, q_cols] + (p["b_K"][q_cols] if "b_K" in p else 0)
            v = X_kv[b] @ p["W_V"][:, v_cols] + (p["b_V"][v_cols] if "b_V" in p else 0)
            scores = q @ k.T / math.sqrt(d_k)
            if bias is not None:
                scores = scores + bias[h]
            for i in range(T_q):
                row = scores[i][keep[b, i]]
                weights = np.zeros(scores.shape[1])
                if row.size:
                    e = np.exp(row - row.max())
                    weights[keep[b, i]] = e / e.sum()
                heads[b, i, v_cols] = weights @ v
    return heads @ p["W_O"] + (p.get("b_O", 0))


def feed_forward(x, p, kind):
    return activation(x @ p["W_1"] + p["b_1"], kind) @ p["W_2"] + p["b_2"]


def relative_bias(R, T_q, T_kv):
    centre = (R.shape[-1] - 1) // 2
    return np.array([[[R[h, j - i + centre] for j in range(T_kv)] for i in range(T_q)]
                     for h in range(R.shape[0])])


def encoder_layer(x, keep, p, c, H, d_k, d_v, bias):
    kind = c["activation"]
    if c["norm"] == "post":
        x = layer_norm(x + attention(x, x, keep, p["self_attention"], H, d_k, d_v, bias),
                       p["norm_1"])
        return layer_norm(x + feed_forward(x, p["feed_forward"], kind), p["norm_2"])
    n = layer_norm(x, p["norm_1"])
    x = x + attention(n, n, keep, p["self_attention"], H, d_k, d_v, bias)
    return x + feed_forward(layer_norm(x, p["norm_2"]), p["feed_forward"], kind)


def decoder_layer(y, keep_self, memory, keep_cross, p, c, H, d_k, d_v, bias):
    kind = c["activation"]
    if c["norm"] == "post":
        y = layer_norm(y + attention(y, y, keep_self, p["self_attention"], H, d_k, d_v, bias),
                       p["norm_1"])
        y = layer_norm(y + attention(y, memory, keep_cross, p["cross_attention"], H, d_k, d_v),
                       p["norm_2"])
        return layer_norm(y + feed_forward(y, p["feed_forward"], kind), p["norm_3"])
    n = layer_norm(y, p["norm_1"])
    y = y + attention(n, n, keep_self, p["self_attention"], H, d_k, d_v, bias)
    y = y + attention(layer_norm(y, p["norm_2"]), memory, keep_cross, p["cross_attention"], H,
                      d_k, d_v)
    return y + feed_forward(layer_norm(y, p["norm_3"]), p["feed_forward"], kind)


def sinusoid(T, d):
    return np.array([[math.sin(pos / 10000 ** (i / d)) if i % 2 == 0
                      else math.cos(pos / 10000 ** ((i - 1) / d)) for i in range(d)]
                     for pos in range(T)])


def embed(ids, params, c, relative_table=None):
    x = params["E"][ids]
    T = ids.shape[1]
    if c["positional"] == "sinusoidal":
        return x + sinusoid(T, x.shape[-1]), None
    if c["positional"] == "learned":
        return x + params["P_table"][:T], None
    return x, relative_bias(params[relative_table], T, T)


def stack(x, layers, step):
    for p in layers:
        x = step(x, p)
    return x


def bert_input(x, s, params, eps=1e-5):
    """BERT's encoder input: token-type embeddings added, then the sum normalised."""
    return layer_norm(x + params["E_type"][s],
                      {"gamma": params["gamma_emb"], "beta": params["beta_emb"]}, eps)


def pooler(memory, params):
    """BERT's pooled output: the first position, a dense layer, tanh."""
    return np.tanh(memory[:, 0] @ params["W_pool"] + params["b_pool"])


def forward(c, params, inputs, H, d_k, d_v):
    """The outputs of the built-in Transformer under choices ``c``, by name: logits and probs,
    or for BERT (encoder_io=bert) the encoder output Z_enc and the pooled C."""
    bert = c["arch"] == "encoder_only" and c.get("encoder_io") == "bert"
    def finish(x, p):
        return layer_norm(x, p["final_norm"]) if c["norm"] == "pre" else x

    memory = keep_src = None
    if c["arch"] != "decoder_only":
        t, m_src = inputs[0], inputs[1]
        T = t.shape[1]
        keep_src = np.repeat(m_src[:, None, :], T, axis=1)
        x, bias = embed(t, params, c, "R_enc_h")
        if bert:
            x = bert_input(x, inputs[2], params)
        memory = finish(stack(x, params["encoder"]["layers"], lambda x, p: encoder_layer(
            x, keep_src, p, c, H, d_k, d_v, bias)), params["encoder"])
        out = memory
    if c["arch"] != "encoder_only":
        u, m_tgt = inputs[-2], inputs[-1]
        T_dec = u.shape[1]
        keep_self = np.repeat(m_tgt[:, None, :], T_dec, axis=1) & np.tri(T_dec, dtype=bool)
        y, bias = embed(u, params, c, "R_dec_h")
        if c["arch"] == "decoder_only":
            out = finish(stack(y, params["decoder"]["layers"], lambda y, p: encoder_layer(
                y, keep_self, p, c, H, d_k, d_v, bias)), params["decoder"])
        else:
            keep_cross = np.repeat(inputs[1][:, None, :], T_dec, axis=1)
            out = finish(stack(y, params["decoder"]["layers"], lambda y, p: decoder_layer(
                y, keep_self, memory, keep_cross, p, c, H, d_k, d_v, bias)), params["decoder"])
    if bert:
        return {"Z_enc": memory, "C": pooler(memory, params)}
    logits = out @ (params["E"].T if c["output_embedding"] == "tied" else params["W_out"])
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return {"logits": logits, "probs": e / e.sum(axis=-1, keepdims=True)}
