"""A careful hand-written NumPy forward pass: the yardstick the issue's target was set with.

Plain NumPy as a person would write it for speed, independent of the generated code: float32
throughout (every scalar a float32, so nothing is promoted to float64), products on BLAS's own
threads (the machine's default OpenBLAS settings), biases, scaling, softmax and LayerNorm in
place where the array is ours, and causal attention in blocks of query rows that skip the keys
a block cannot see. It takes the parameters nested as the generated code takes them, so the
benchmark feeds both the same arrays. It has none of the generated code's protections (fully
masked rows, float16, constant rows, input checks): it is a speed reference, not a model.
"""

import numpy as np

QUERY_BLOCK = 128  # rows of causal queries per block


def linear(x, W, b):
    """x W + b as one product over all rows (NumPy runs a 3-d @ 2-d product one matrix at a
    time)."""
    y = x.reshape(-1, x.shape[-1]) @ W
    y += b
    return y.reshape(x.shape[:-1] + (W.shape[1],))


def layer_norm(x, p, eps):
    centred = x - x.mean(-1, keepdims=True)
    variance = np.vecdot(centred, centred)[..., None]
    variance /= np.float32(x.shape[-1])
    variance += np.float32(eps)
    np.sqrt(variance, out=variance)
    centred /= variance
    centred *= p["gamma"]
    centred += p["beta"]
    return centred


def softmax_in_place(s):
    s -= s.max(-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(-1, keepdims=True)
    return s


def heads(x, H):
    B, T, d = x.shape
    return x.reshape(B, T, H, d // H).transpose(0, 2, 1, 3)


def attention(x, memory, p, H, bias=None, causal=False):
    """Multi-head attention; bias (B, T_q, T_kv) or None is added to the scores."""
    B, T_q, d = x.shape
    scale = np.float32(1 / np.sqrt(d // H))
    q = linear(x, p["W_Q"], p["b_Q"])
    q *= scale
    q, k, v = heads(q, H), heads(linear(memory, p["W_K"], p["b_K"]), H), \
        heads(linear(memory, p["W_V"], p["b_V"]), H)
    out = np.empty((B, T_q, H, d // H), dtype=x.dtype)
    if causal:
        for start in range(0, T_q, QUERY_BLOCK):
            stop = min(start + QUERY_BLOCK, T_q)
            s = q[:, :, start:stop] @ k[:, :, :stop].transpose(0, 1, 3, 2)
            s[..., start:] += np.triu(np.full((stop - start, stop - start), -np.inf,
                                              dtype=x.dtype), 1)
            out[:, start:stop] = (softmax_in_place(s) @ v[:, :, :stop]).transpose(0, 2, 1, 3)
    else:
        s = q @ k.transpose(0, 1, 3, 2)
        if bias is not None:
            s += bias[:, None]
        out[:] = (softmax_in_place(s) @ v).transpose(0, 2, 1, 3)
    return linear(out.reshape(B, T_q, d), p["W_O"], p["b_O"])


def relu_in_place(x):
    return np.maximum(x, 0, out=x)


def gelu_tanh_in_place(x):
    inner = x * x
    inner *= np.float32(0.044715)
    inner += np.float32(1)
    inner *= x
    inner *= np.float32(np.sqrt(2 / np.pi))
    np.tanh(inner, out=inner)
    inner += np.float32(1)
    inner *= np.float32(0.5)
    x *= inner
    return x


def feed_forward(x, p, activation):
    return linear(activation(linear(x, p["W_1"], p["b_1"])), p["W_2"], p["b_2"])


def encoder_layer(x, bias, p, H, eps=1e-5):
    """Post-LN, ReLU: the base encoder layer."""
    x = layer_norm(x + attention(x, x, p["self_attention"], H, bias), p["norm_1"], eps)
    return layer_norm(x + feed_forward(x, p["feed_forward"], relu_in_place), p["norm_2"], eps)


def decoder_layer(y, memory, bias, p, H, eps=1e-5):
    """Post-LN, ReLU, causal self-attention, then cross-attention with bias on the source."""
    y = layer_norm(y + attention(y, y, p["self_attention"], H, causal=True), p["norm_1"], eps)
    y = layer_norm(y + attention(y, memory, p["cross_attention"], H, bias), p["norm_2"], eps)
    return layer_norm(y + feed_forward(y, p["feed_forward"], relu_in_place), p["norm_3"], eps)


def encoder_decoder(src, tgt, bias, p, H):
    """The stacks without embeddings: bias (B, T, T) masks padded source keys (T_dec = T)."""
    memory = src
    for layer in p["encoder"]["layers"]:
        memory = encoder_layer(memory, bias, layer, H)
    for layer in p["decoder"]["layers"]:
        tgt = decoder_layer(tgt, memory, bias, layer, H)
    return tgt


def causal_stack(x, p, H, eps=1e-5):
    """Pre-LN, tanh GELU, causal self-attention, a final LayerNorm: a GPT-2-shaped stack."""
    for layer in p["layers"]:
        normed = layer_norm(x, layer["norm_1"], eps)
        x = x + attention(normed, normed, layer["self_attention"], H, causal=True)
        x = x + feed_forward(layer_norm(x, layer["norm_2"], eps), layer["feed_forward"],
                             gelu_tanh_in_place)
    return layer_norm(x, p["final_norm"], eps)
