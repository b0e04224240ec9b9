"""An independent NumPy Transformer written from the math, one head and one sequence at a time.

Deliberately plain: loops over batch and heads, explicit per-head weight slices, no shared code
with the generator. It covers every choice of the built-in spec (BERT's token types,
embedding LayerNorm and pooler included; RMSNorm, rotary positions, grouped-query attention,
SwiGLU and bias-free feed-forward layers too), so the generated code can be compared with it on
random variants (tests/codegen/test_codegen.py).
"""

import math

import numpy as np


def layer_norm(x, p, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * p["gamma"] + p["beta"]


def rms_norm(x, p, eps=1e-5):
    return x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps) * p["gamma"]


def norm(x, p, c):
    return rms_norm(x, p) if c["normalization"] == "rms_norm" else layer_norm(x, p)


def rotate(x, theta=10000.0):
    """RoFormer's rotation, pair (x_i, x_{i + d/2}) of position pos by pos * theta^(-2i/d),
    one position and one pair at a time; x is (T, d)."""
    T, d = x.shape
    out = np.empty_like(x)
    for pos in range(T):
        for i in range(d // 2):
            angle = pos * theta ** (-2 * i / d)
            a, b = x[pos, i], x[pos, i + d // 2]
            out[pos, i] = a * math.cos(angle) - b * math.sin(angle)
            out[pos, i + d // 2] = b * math.cos(angle) + a * math.sin(angle)
    return out


def activation(x, kind):
    if kind == "relu":
        return np.maximum(x, 0)
    if kind == "gelu":
        return np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))(x)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def softmax(x, axis=-1):
    """softmax in float64 along an axis, 0 for rows that are -inf everywhere."""
    x = np.asarray(x, dtype=np.float64)
    peak = x.max(axis=axis, keepdims=True)
    peak[~np.isfinite(peak)] = 0
    with np.errstate(over="ignore"):
        e = np.exp(x - peak)
    total = e.sum(axis=axis, keepdims=True)
    total[total == 0] = 1
    return e / total


def attention(X_q, X_kv, keep, p, H, d_k, d_v, bias=None, H_kv=None, rotary=False):
    """keep: (B, T_q, T_kv) booleans; bias: (H, T_q, T_kv) or None; H_kv key-value heads,
    head h reading those of head h // (H / H_kv); rotary: queries and keys rotated."""
    B, T_q, _ = X_q.shape
    H_kv = H if H_kv is None else H_kv
    heads = np.zeros((B, T_q, H * d_v))
    for b in range(B):
        for h in range(H):
            g = h // (H // H_kv)
            q_cols, v_cols = slice(h * d_k, (h + 1) * d_k), slice(h * d_v, (h + 1) * d_v)
            k_cols, g_cols = slice(g * d_k, (g + 1) * d_k), slice(g * d_v, (g + 1) * d_v)
            q = X_q[b] @ p["W_Q"][:, q_cols] + (p["b_Q"][q_cols] if "b_Q" in p else 0)
            k = X_kv[b] @ p["W_K"][:, k_cols] + (p["b_K"][k_cols] if "b_K" in p else 0)
            v = X_kv[b] @ p["W_V"][:, g_cols] + (p["b_V"][g_cols] if "b_V" in p else 0)
            if rotary:
                q, k = rotate(q), rotate(k)
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
    first = x @ p["W_1"] + p.get("b_1", 0)
    if kind == "swiglu":                 # silu(x W_1 + b_1) * (x W_3 + b_3)
        hidden = first / (1 + np.exp(-first)) * (x @ p["W_3"] + p.get("b_3", 0))
    else:
        hidden = activation(first, kind)
    return hidden @ p["W_2"] + p.get("b_2", 0)


def relative_bias(R, T_q, T_kv):
    centre = (R.shape[-1] - 1) // 2
    return np.array([[[R[h, j - i + centre] for j in range(T_kv)] for i in range(T_q)]
                     for h in range(R.shape[0])])


def encoder_layer(x, keep, p, c, H, d_k, d_v, bias):
    kind = c["activation"]

    def attend(q, kv):
        return attention(q, kv, keep, p["self_attention"], H, d_k, d_v, bias, c.get("H_kv"),
                         c["positional"] == "rotary")
    if c["norm"] == "post":
        x = norm(x + attend(x, x), p["norm_1"], c)
        return norm(x + feed_forward(x, p["feed_forward"], kind), p["norm_2"], c)
    n = norm(x, p["norm_1"], c)
    x = x + attend(n, n)
    return x + feed_forward(norm(x, p["norm_2"], c), p["feed_forward"], kind)


def decoder_layer(y, keep_self, memory, keep_cross, p, c, H, d_k, d_v, bias):
    kind = c["activation"]
    rotary = c["positional"] == "rotary"

    def attend_self(q):
        return attention(q, q, keep_self, p["self_attention"], H, d_k, d_v, bias,
                         c.get("H_kv"), rotary)

    def attend_memory(q):
        return attention(q, memory, keep_cross, p["cross_attention"], H, d_k, d_v, None,
                         c.get("H_kv"), rotary)
    if c["norm"] == "post":
        y = norm(y + attend_self(y), p["norm_1"], c)
        y = norm(y + attend_memory(y), p["norm_2"], c)
        return norm(y + feed_forward(y, p["feed_forward"], kind), p["norm_3"], c)
    y = y + attend_self(norm(y, p["norm_1"], c))
    y = y + attend_memory(norm(y, p["norm_2"], c))
    return y + feed_forward(norm(y, p["norm_3"], c), p["feed_forward"], kind)


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
    if c["positional"] == "rotary":       # positions turn queries and keys in attention
        return x, None
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
    """The outputs of the built-in Transformer under choices ``c`` (with ``c["H_kv"]`` the
    key-value heads under key_value_heads=grouped), by name: logits and probs, or for BERT
    (encoder_io=bert) the encoder output Z_enc and the pooled C (bert_unpooled: Z_enc alone);
    ``c["W"]``, the window under attention_window=sliding."""
    bert = c["arch"] == "encoder_only" and c.get("encoder_io") in ("bert", "bert_unpooled")
    def finish(x, p):
        return norm(x, p["final_norm"], c) if c["norm"] == "pre" else x

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
        if c.get("attention_window") == "sliding":      # key j seen by query i: j > i - W
            position = np.arange(T_dec)
            keep_self &= position[None, :] > position[:, None] - c["W"]
        y, bias = embed(u, params, c, "R_dec_h")
        if c["arch"] == "decoder_only":
            out = finish(stack(y, params["decoder"]["layers"], lambda y, p: encoder_layer(
                y, keep_self, p, c, H, d_k, d_v, bias)), params["decoder"])
        else:
            keep_cross = np.repeat(inputs[1][:, None, :], T_dec, axis=1)
            out = finish(stack(y, params["decoder"]["layers"], lambda y, p: decoder_layer(
                y, keep_self, memory, keep_cross, p, c, H, d_k, d_v, bias)), params["decoder"])
    if bert and c["encoder_io"] == "bert_unpooled":
        return {"Z_enc": memory}
    if bert:
        return {"Z_enc": memory, "C": pooler(memory, params)}
    logits = out @ (params["E"].T if c["output_embedding"] == "tied" else params["W_out"])
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return {"logits": logits, "probs": e / e.sum(axis=-1, keepdims=True)}
