"""The generated code against independent implementations, tensor by tensor.

PyTorch's nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer and
nn.Transformer (post-LN and norm_first, ReLU and GELU, causal and key-padding masks), and Hugging
Face GPT-2, BERT (BertModel, from token ids and types to the pooled output) and Llama
(LlamaForCausalLM: RMSNorm, rotary positions, grouped-query attention, SwiGLU) built offline
from small configs with random weights. The same weights go to both sides through the
explicit name maps of tspec.execution.checkpoints; every named intermediate the reference exposes
(through forward hooks or its own outputs) is compared, float64 against float64 within 1e-10
and float32 (float16) against float64 within the named tolerance.

Each test runs the generated NumPy code on the CPU and, where a GPU is, the generated CuPy code
(float64, float32 and float16) against the same references run by PyTorch on CUDA; without
one the CuPy cases skip with the reason. The CuPy code also runs on the CPU (cupy-on-cpu: its
kernels compiled by g++ and emulated, its array code on NumPy; support/cupy_on_cpu) against the
references run on the CPU, traced and untraced, within the same tolerances.
"""

import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from support.arrays import BACKEND_DTYPES, BACKENDS, NUMPY, to_numpy
from support.compare import TOLERANCES, assert_close, flat

from tspec import api
from tspec.codegen.generate import source
from tspec.execution import checkpoints, weights

torch.backends.mha.set_fastpath_enabled(False)     # the reference path, not the fused kernels
pytestmark = pytest.mark.reference
d_model, H, d_ff, N, V = 16, 4, 24, 2, 13


@functools.cache
def generated(arrays=NUMPY, **choices):
    """The generated module for these choices and backend, with run-time shape checks on."""
    spec = api.read_spec(api.BUILTIN_SPEC)
    return arrays.load(source(spec, choices, arrays.backend), typecheck=True)


def numpy(tensor):
    return tensor.detach().cpu().numpy()


def masks(B, T_q, T_kv, causal, rng):
    """Key-padding keep mask (every row keeps its first key) and the torch equivalents."""
    keep = np.ones((B, T_kv), dtype=bool)
    keep[-1, T_kv - max(1, T_kv // 3):] = False
    keep[:, 0] = True
    padding = torch.tensor(~keep)
    causal_mask = torch.tensor(~np.tri(T_q, T_kv, dtype=bool)) if causal else None
    return keep, padding, causal_mask


def cast(params, dtype):
    return weights.nest({k: v.astype(dtype) for k, v in weights.flatten(params).items()})


def hooks(names: dict, store: dict):
    """Record the output of each named submodule (first element of a tuple output)."""
    handles = []
    for name, submodule in names.items():
        def hook(_module, _inputs, output, name=name):
            store[name] = numpy(output[0] if isinstance(output, tuple) else output)
        handles.append(submodule.register_forward_hook(hook))
    return handles


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("arrays, dtype", BACKEND_DTYPES)
def test_multi_head_attention_matches_torch(causal, arrays, dtype):
    """Traced (the equations as written) and untraced (query blocks on NumPy, the fused masked
    softmax on CuPy), against nn.MultiheadAttention."""
    torch.manual_seed(1)
    rng = np.random.default_rng(1)
    B, T_q, T_kv = 3, 5, 5 if causal else 7
    reference = torch.nn.MultiheadAttention(d_model, H, batch_first=True).double().eval()
    reference = reference.to(arrays.device)
    params = weights.nest(checkpoints.from_torch_multi_head_attention(reference.state_dict()))
    X_q, X_kv = rng.standard_normal((B, T_q, d_model)), rng.standard_normal((B, T_kv, d_model))
    keep, padding, causal_mask = masks(B, T_q, T_kv, causal, rng)
    module = generated(arrays, attention_bias="all")
    keep_q = module.rt.padding_mask(arrays.put(keep), T_q) & (
        arrays.put(np.tri(T_q, T_kv, dtype=bool)) if causal else True)
    inputs = (arrays.put(X_q.astype(dtype)), arrays.put(X_kv.astype(dtype)),
              module.rt.log_mask(keep_q, np.dtype(dtype))[None], arrays.put(cast(params, dtype)))
    trace = {}
    ours = module.multi_head_attention(*inputs, H=H, trace=trace)
    untraced = module.multi_head_attention(*inputs, H=H)

    def tensor(x):
        return torch.tensor(x, device=arrays.device)

    out, attention = reference(tensor(X_q), tensor(X_kv), tensor(X_kv),
                               key_padding_mask=padding.to(arrays.device),
                               attn_mask=None if causal_mask is None else
                               causal_mask.to(arrays.device),
                               need_weights=True, average_attn_weights=False)
    weight, bias = reference.in_proj_weight, reference.in_proj_bias
    projections = {f"{p}_proj": numpy(torch.nn.functional.linear(
        tensor(x), weight[i * d_model:(i + 1) * d_model], bias[i * d_model:(i + 1) * d_model]))
        for i, (p, x) in enumerate((("Q", X_q), ("K", X_kv), ("V", X_kv)))}
    assert ours.dtype == untraced.dtype == np.dtype(dtype)
    assert_close({**flat(trace), "O_proj": ours, "untraced": untraced},
                 {**projections, "attention.A_h": numpy(attention).transpose(1, 0, 2, 3),
                  "O_proj": numpy(out), "untraced": numpy(out)}, dtype)


def _layer_names(layer, kind: str, norm: str) -> dict:
    names = {"self_attention.O_proj": layer.self_attn, "feed_forward.F": layer.linear2}
    if kind == "decoder":
        names["cross_attention.O_proj"] = layer.multihead_attn
    count = 3 if kind == "decoder" else 2
    for number in range(1, count + 1):
        names[f"norm_{number}.{'Z' if norm == 'post' else 'X_norm'}"] = \
            getattr(layer, f"norm{number}")
    return names


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("arrays, dtype", BACKEND_DTYPES)
def test_transformer_matches_torch_layer_by_layer(norm, activation, arrays, dtype):
    """nn.Transformer (so nn.TransformerEncoderLayer and nn.TransformerDecoderLayer) with
    source key padding, target causal and memory padding masks, every sublayer compared, and
    the untraced run's output."""
    torch.manual_seed(2)
    rng = np.random.default_rng(2)
    B, T, T_dec = 3, 6, 5
    reference = torch.nn.Transformer(d_model, H, N, N, d_ff, dropout=0.0, activation=activation,
                                     batch_first=True, norm_first=norm == "pre").double().eval()
    reference = reference.to(arrays.device)
    if norm == "post":
        reference.encoder.norm = None          # the seeds' post-LN has no final LayerNorm
        reference.decoder.norm = None
    E, W_out = rng.standard_normal((V, d_model)), rng.standard_normal((d_model, V))
    params = weights.validate(
        checkpoints.from_torch_transformer(reference.state_dict(), norm=norm, embedding=E,
                                           output=W_out),
        weights.expected_shapes(api.read_spec(api.BUILTIN_SPEC),
                                {"attention_bias": "all", "norm": norm},
                                {"d_model": d_model, "H": H, "d_ff": d_ff, "N": N, "V": V}),
        "nn.Transformer")
    module = generated(arrays, attention_bias="all", norm=norm, activation=activation)
    t, u = rng.integers(0, V, (B, T)), rng.integers(0, V, (B, T_dec))
    keep_src, padding, _ = masks(B, T, T, False, rng)
    padding = padding.to(arrays.device)
    keep_tgt = np.ones((B, T_dec), dtype=bool)
    keep_tgt[0, -2:] = False                   # target padding too (key 0 stays visible)
    inputs = arrays.put((t, keep_src, u, keep_tgt, cast(params, dtype)))
    trace = {}
    logits, probs = module.transformer(*inputs, H=H, trace=trace)
    untraced, _ = module.transformer(*inputs, H=H)
    ours = flat(trace)
    store = {}
    handles = []
    for kind, stack in (("encoder", reference.encoder), ("decoder", reference.decoder)):
        for index, layer in enumerate(stack.layers):
            prefix = f"{kind}.layers.{index}."
            names = {prefix + k: v for k, v in _layer_names(layer, kind, norm).items()}
            names[prefix + ("Z_out" if kind == "encoder" else "Y_out")] = layer
            handles += hooks(names, store)
    Z_0, Y_0 = (torch.tensor(to_numpy(ours[name]).astype(np.float64), device=arrays.device)
                for name in ("Z_0", "Y_0"))
    causal = torch.tensor(~np.tri(T_dec, T_dec, dtype=bool),      # True: may not attend
                          device=arrays.device)
    Y_dec = reference(Z_0, Y_0, tgt_mask=causal, src_key_padding_mask=padding,
                      tgt_key_padding_mask=torch.tensor(~keep_tgt, device=arrays.device),
                      memory_key_padding_mask=padding, tgt_is_causal=True)
    for handle in handles:
        handle.remove()
    Z_enc = reference.encoder(Z_0, src_key_padding_mask=padding)
    logits_reference = Y_dec @ torch.tensor(W_out, device=arrays.device)
    expected = {**store, "Z_enc": numpy(Z_enc), "Y_dec": numpy(Y_dec),
                "logits": numpy(logits_reference), "untraced": numpy(logits_reference),
                "probs": numpy(torch.softmax(logits_reference, dim=-1))}
    rows = assert_close({**ours, "logits": logits, "untraced": untraced, "probs": probs},
                        expected, dtype)
    assert len(rows) == 5 + N * (5 + 7)      # every layer's sublayers, the stacks, the head
    assert logits.dtype == probs.dtype == untraced.dtype == np.dtype(dtype)


@pytest.mark.parametrize("T, width, offset", [(9, 8, 0), (9, 7, 0), (4, 1, 0), (5, 7, 6)])
@pytest.mark.parametrize("arrays", BACKENDS)
def test_sinusoidal_table_matches_hugging_face_at_odd_and_even_widths(T, width, offset, arrays):
    """DistilBERT's fixed position table (XLM's too): sin on the even columns, cos on the
    odd, at any width; an odd one ends with a sin column. Rows offset .. offset + T - 1."""
    from transformers.models.distilbert.modeling_distilbert import create_sinusoidal_embeddings
    reference = create_sinusoidal_embeddings(offset + T, width, torch.empty(offset + T, width))
    table = generated(arrays).rt.positional_encoding(T, width, arrays.xp.float64,
                                                     offset=offset)
    # Hugging Face computes in float64 and stores float32: within half a float32 ulp of 1
    np.testing.assert_allclose(to_numpy(table), numpy(reference)[offset:], rtol=0, atol=6e-8)


@pytest.mark.parametrize("arrays, dtype", BACKEND_DTYPES)
def test_gpt2_matches_hugging_face(arrays, dtype):
    """Decoder-only, pre-LN, tanh GELU, learned positions, tied output embedding."""
    torch.manual_seed(3)
    config = transformers.GPT2Config(vocab_size=V, n_positions=16, n_embd=d_model, n_layer=N,
                                     n_head=H, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     bos_token_id=0, eos_token_id=0)
    reference = transformers.GPT2LMHeadModel(config).double().eval().to(arrays.device)
    choices = {"arch": "decoder_only", "norm": "pre", "activation": "gelu_tanh",
               "positional": "learned", "output_embedding": "tied", "attention_bias": "all"}
    params = weights.validate(
        checkpoints.from_gpt2(reference.state_dict()),
        weights.expected_shapes(api.read_spec(api.BUILTIN_SPEC), choices,
                                {"d_model": d_model, "H": H, "d_ff": 4 * d_model, "N": N,
                                 "V": V, "max_len": 16}), "GPT-2")
    module = generated(arrays, **choices)
    u = np.random.default_rng(3).integers(0, V, (2, 9))
    inputs = arrays.put((u, np.ones(u.shape, dtype=bool), cast(params, dtype)))
    trace = {}
    logits, probs = module.transformer(*inputs, H=H, trace=trace)
    untraced, _ = module.transformer(*inputs, H=H)
    output = reference(torch.tensor(u, device=arrays.device), output_hidden_states=True)
    hidden = [numpy(h) for h in output.hidden_states]
    expected = {"Y_0": hidden[0], "Y_dec": hidden[-1], "logits": numpy(output.logits),
                "untraced": numpy(output.logits),
                "probs": numpy(torch.softmax(output.logits, dim=-1))}
    expected |= {f"decoder.layers.{i}.Y_out": hidden[i + 1] for i in range(N - 1)}
    assert_close({**flat(trace), "logits": logits, "untraced": untraced, "probs": probs},
                 expected, dtype)


@pytest.mark.parametrize("arrays, dtype", BACKEND_DTYPES)
def test_bert_encoder_matches_hugging_face(arrays, dtype):
    """BERT's encoder stack (post-LN, exact GELU, eps 1e-12) with a padding mask, layer by
    layer, fed BERT's own embedding output (its token-type embeddings and embedding LayerNorm
    are not in the spec)."""
    torch.manual_seed(4)
    config = transformers.BertConfig(vocab_size=V, hidden_size=d_model, num_hidden_layers=N,
                                     num_attention_heads=H, intermediate_size=d_ff,
                                     max_position_embeddings=16, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    reference = transformers.BertModel(config).double().eval().to(arrays.device)
    module = generated(arrays, arch="encoder_only", activation="gelu", attention_bias="all")
    params = weights.nest(checkpoints.from_bert_encoder(reference.state_dict()))["encoder"]
    ids = np.random.default_rng(4).integers(0, V, (2, 8))
    keep = np.ones(ids.shape, dtype=bool)
    keep[1, 6:] = False
    output = reference(torch.tensor(ids, device=arrays.device),
                       attention_mask=torch.tensor(keep.astype(np.int64), device=arrays.device),
                       output_hidden_states=True)
    hidden = [numpy(h) for h in output.hidden_states]
    runtime = module.rt
    L = runtime.log_mask(runtime.padding_mask(arrays.put(keep), ids.shape[1]),
                         np.dtype(dtype))[None]
    inputs = arrays.put((hidden[0].astype(dtype), L, cast(params, dtype)))
    trace = {}
    settings = module.Settings(eps=1e-12)         # a block takes the settings as one record
    Z_enc = module.encoder(*inputs, settings, H=H, trace=trace)
    untraced = module.encoder(*inputs, settings, H=H)
    expected = {f"layers.{i}.Z_out": hidden[i + 1] for i in range(N)} | {
        "Z_enc": hidden[-1], "untraced": hidden[-1]}
    assert_close({**flat(trace), "Z_enc": Z_enc, "untraced": untraced}, expected, dtype)


BERT = {"arch": "encoder_only", "encoder_io": "bert", "activation": "gelu",
        "positional": "learned", "attention_bias": "all"}


@pytest.mark.parametrize("arrays, dtype", BACKEND_DTYPES)
def test_bert_matches_hugging_face_bert_model(arrays, dtype):
    """The whole BertModel: word, position and token-type embeddings and their LayerNorm,
    every encoder layer under a padding mask, and the pooler (first position, dense, tanh),
    with every parameter loaded through checkpoints.from_bert."""
    torch.manual_seed(6)
    config = transformers.BertConfig(vocab_size=V, hidden_size=d_model, num_hidden_layers=N,
                                     num_attention_heads=H, intermediate_size=d_ff,
                                     max_position_embeddings=16, type_vocab_size=3,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    reference = transformers.BertModel(config).double().eval().to(arrays.device)
    with torch.no_grad():                    # LayerNorm starts at gain 1, bias 0: move every
        for parameter in reference.parameters():     # parameter, so none is told apart by luck
            parameter.add_(0.1 * torch.randn_like(parameter))
    dims = {"d_model": d_model, "H": H, "d_ff": d_ff, "N": N, "V": V, "max_len": 16,
            "V_type": 3}
    params = weights.validate(checkpoints.from_bert(reference.state_dict()),
                              weights.expected_shapes(api.read_spec(api.BUILTIN_SPEC), BERT,
                                                      dims), "BERT")
    module = generated(arrays, **BERT)
    rng = np.random.default_rng(6)
    t, s = rng.integers(0, V, (3, 9)), rng.integers(0, 3, (3, 9))
    keep = np.ones(t.shape, dtype=bool)
    keep[1, 6:] = False                      # padding: later keys hidden from every query
    keep[2, 3:] = False
    output = reference(torch.tensor(t, device=arrays.device),
                       attention_mask=torch.tensor(keep.astype(np.int64), device=arrays.device),
                       token_type_ids=torch.tensor(s, device=arrays.device),
                       output_hidden_states=True)
    hidden = [numpy(h) for h in output.hidden_states]
    inputs = arrays.put((t, keep, s, cast(params, dtype)))
    trace = {}
    Z_enc, C = module.transformer(*inputs, H=H, eps=1e-12, trace=trace)
    _, untraced = module.transformer(*inputs, H=H, eps=1e-12)
    expected = {"Z_emb": hidden[0], "Z_enc": numpy(output.last_hidden_state),
                "C": numpy(output.pooler_output), "untraced": numpy(output.pooler_output)}
    expected |= {f"encoder.layers.{i}.Z_out": hidden[i + 1] for i in range(N)}
    rows = assert_close({**flat(trace), "Z_enc": Z_enc, "C": C, "untraced": untraced},
                        expected, dtype)
    assert len(rows) == 4 + N
    assert Z_enc.dtype == C.dtype == np.dtype(dtype)
    assert C.shape == (3, d_model)


LLAMA = {"arch": "decoder_only", "norm": "pre", "activation": "swiglu", "positional": "rotary",
         "normalization": "rms_norm", "key_value_heads": "grouped", "feed_forward_bias": "none"}


def _llama(device, H_kv: int, theta: float):
    torch.manual_seed(7)
    config = transformers.LlamaConfig(
        vocab_size=V, hidden_size=d_model, intermediate_size=d_ff, num_hidden_layers=N,
        num_attention_heads=H, num_key_value_heads=H_kv, max_position_embeddings=32,
        rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": theta},
        attention_bias=False, mlp_bias=False, tie_word_embeddings=False)
    reference = transformers.LlamaForCausalLM(config).double().eval().to(device)
    with torch.no_grad():                    # RMSNorm gains start at 1: move every parameter
        for parameter in reference.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return reference


def _llama_in_float64(reference, theta: float):
    """Hugging Face's Llama computes RMSNorm and the rotary angles in float32 whatever the
    model's dtype (for bfloat16 training); for a float64 reference, each RMSNorm runs
    PyTorch's own rms_norm in the input's dtype, and the cos and sin tables are computed in
    float64 from RoFormer's formula. Everything else (projections, rotate_half and its
    application, grouped-query attention by SDPA, SwiGLU, residuals) stays Hugging Face's."""
    for module in reference.modules():
        if type(module).__name__ == "LlamaRMSNorm":
            module.forward = lambda x, m=module: torch.nn.functional.rms_norm(
                x, (x.shape[-1],), m.weight, m.variance_epsilon)
    rotary = reference.model.rotary_emb
    d = d_model // H

    def angles(x, position_ids):
        frequency = theta ** -(torch.arange(0, d, 2, dtype=torch.float64,
                                            device=x.device) / d)
        angle = position_ids[..., None].double() * frequency
        both = torch.cat((angle, angle), dim=-1)
        return both.cos().to(x.dtype), both.sin().to(x.dtype)
    rotary.forward = angles


@pytest.mark.parametrize("H_kv", [1, 2])
@pytest.mark.parametrize("arrays, dtype", BACKEND_DTYPES)
def test_llama_matches_hugging_face(H_kv, arrays, dtype):
    """LlamaForCausalLM: RMSNorm before each sublayer and at the end, rotary positions (base
    500), grouped-query (H_kv = 2 of 4 heads) and multi-query (H_kv = 1) attention, SwiGLU,
    no biases, its own output projection; right padding in one sequence. Every projection,
    norm, attention and feed-forward output of every layer, the logits and probabilities."""
    theta = 500.0
    reference = _llama(arrays.device, H_kv, theta)
    dims = {"d_model": d_model, "H": H, "H_kv": H_kv, "d_ff": d_ff, "N": N, "V": V}
    params = weights.validate(checkpoints.from_llama(reference.state_dict()),
                              weights.expected_shapes(api.read_spec(api.BUILTIN_SPEC), LLAMA,
                                                      dims), "Llama")
    rng = np.random.default_rng(7)
    u = rng.integers(0, V, (2, 9))
    keep = np.ones(u.shape, dtype=bool)
    keep[1, 6:] = False
    stock = reference(torch.tensor(u, device=arrays.device),
                      attention_mask=torch.tensor(keep.astype(np.int64), device=arrays.device))
    _llama_in_float64(reference, theta)
    captured: dict = {}
    layers = reference.model.layers
    names = {}
    for i, layer in enumerate(layers):
        at = f"decoder.layers.{i}"
        names |= {f"{at}.Y_n": layer.input_layernorm, f"{at}.A": layer.self_attn,
                  f"{at}.Y_1n": layer.post_attention_layernorm, f"{at}.F": layer.mlp,
                  f"{at}.self_attention.Q_proj": layer.self_attn.q_proj,
                  f"{at}.self_attention.K_proj": layer.self_attn.k_proj,
                  f"{at}.self_attention.V_proj": layer.self_attn.v_proj}
    names["Y_dec"] = reference.model.norm
    handles = hooks(names, captured)
    output = reference(torch.tensor(u, device=arrays.device),
                       attention_mask=torch.tensor(keep.astype(np.int64), device=arrays.device),
                       output_hidden_states=True)
    for handle in handles:
        handle.remove()
    hidden = [numpy(h) for h in output.hidden_states]
    module = generated(arrays, **LLAMA)
    inputs = arrays.put((u, keep, cast(params, dtype)))
    trace = {}
    logits, probs = module.transformer(*inputs, H=H, H_kv=H_kv, theta=theta, trace=trace)
    untraced, _ = module.transformer(*inputs, H=H, H_kv=H_kv, theta=theta)
    expected = {"Y_0": hidden[0], "logits": numpy(output.logits),
                "untraced": numpy(output.logits),
                "probs": numpy(torch.softmax(output.logits, dim=-1)), **captured}
    expected |= {f"decoder.layers.{i}.Y_out": hidden[i + 1] for i in range(N - 1)}
    ours = {**flat(trace), "logits": logits, "untraced": untraced, "probs": probs}
    rows = assert_close(ours, expected, dtype)
    assert len(rows) == 5 + 8 * N - 1
    # and against Hugging Face as it ships (float32 angles and norms), within float32's reach
    assert_close({"logits": logits}, {"logits": numpy(stock.logits)}, dtype,
                 tolerance=max(5e-5, TOLERANCES[dtype]))


def test_bert_map_names_what_it_cannot_place():
    config = transformers.BertConfig(vocab_size=V, hidden_size=d_model, num_hidden_layers=1,
                                     num_attention_heads=H, intermediate_size=d_ff,
                                     max_position_embeddings=16)
    state = transformers.BertModel(config, add_pooling_layer=False).state_dict()
    with pytest.raises(weights.WeightsError, match=r"^BERT: state dict has no pooler "
                                                   r"\(pooler\.dense\.weight\), which the "
                                                   r"variant has \(encoder_io=bert\): import "
                                                   r"the config with --no-pooler "
                                                   r"\(encoder_io=bert_unpooled\)$"):
        checkpoints.from_bert(state)
    assert "W_pool" not in checkpoints.from_bert(state, pooler=False)
    with pytest.raises(weights.WeightsError, match=r"^BERT: no place in the spec for extra$"):
        checkpoints.from_bert({**transformers.BertModel(config).state_dict(),
                               "extra": torch.zeros(1)})


def test_a_tensor_off_by_a_little_fails_with_a_table():
    with pytest.raises(AssertionError, match=r"1 of 2 tensors differ beyond 1e-10 \(float64\)"
                                             r":\na  max abs 0.000e\+00"):
        assert_close({"a": np.zeros(3), "b": np.full(3, 1e-9)},
                     {"a": np.zeros(3), "b": np.zeros(3)}, "float64")


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("arrays, dtype", BACKEND_DTYPES)
def test_untraced_attention_matches_torch_with_every_kind_of_mask(monkeypatch, arrays, dtype):
    """Without a trace, NumPy attention runs in blocks of query rows that skip the keys their
    mask hides (query_blocks) and CuPy's adds the mask inside its softmax kernel. With blocks
    of 2 rows, causal and padding masks make blocks of every kind (keys cut by causality, by
    padding, and a block of fully masked rows), and the model's output still matches
    nn.Transformer's and the traced run's."""
    torch.manual_seed(5)
    rng = np.random.default_rng(5)
    B, T, T_dec = 3, 7, 6
    reference = torch.nn.Transformer(d_model, H, N, N, d_ff, dropout=0.0,
                                     batch_first=True).double().eval().to(arrays.device)
    reference.encoder.norm = None
    reference.decoder.norm = None
    E, W_out = rng.standard_normal((V, d_model)), rng.standard_normal((d_model, V))
    params = weights.nest(checkpoints.from_torch_transformer(
        reference.state_dict(), norm="post", embedding=E, output=W_out))
    module = generated(arrays, attention_bias="all")
    if arrays is NUMPY:
        monkeypatch.setattr(module.rt, "QUERY_BLOCK", 2)
    t, u = rng.integers(0, V, (B, T)), rng.integers(0, V, (B, T_dec))
    keep_src = np.ones((B, T), dtype=bool)
    keep_src[1, 4:] = False                    # a padded source: later key blocks dropped
    keep_tgt = np.ones((B, T_dec), dtype=bool)
    keep_tgt[2, :] = False                     # a target with every key masked: weights 0
    inputs = arrays.put((t, keep_src, u, keep_tgt, cast(params, dtype)))
    logits, _ = module.transformer(*inputs, H=H)
    traced = {}
    logits_whole, _ = module.transformer(*inputs, H=H, trace=traced)
    # the reference: the same embedded inputs; the fully masked target gets zero weights in
    # our code and NaN in torch, so it is compared with the traced run of our own code

    def tensor(x):
        return torch.tensor(x, device=arrays.device)

    Z_0, Y_0 = (tensor(to_numpy(traced[k]).astype(np.float64)) for k in ("Z_0", "Y_0"))
    causal = tensor(~np.tri(T_dec, T_dec, dtype=bool))
    Y_dec = reference(Z_0[:2], Y_0[:2], tgt_mask=causal,
                      src_key_padding_mask=tensor(~keep_src[:2]),
                      tgt_key_padding_mask=tensor(~keep_tgt[:2]),
                      memory_key_padding_mask=tensor(~keep_src[:2]), tgt_is_causal=True)
    assert_close({"logits": logits[:2]}, {"logits": numpy(Y_dec @ tensor(W_out))}, dtype)
    assert_close({"logits": logits}, {"logits": logits_whole}, dtype)
    assert np.isfinite(to_numpy(logits)).all()


def test_query_blocks_keep_the_keys_a_mask_leaves_visible():
    runtime = generated(attention_bias="all").rt
    causal = runtime.log_mask(np.tri(5, 5, dtype=bool), np.float64)[None, None]
    assert runtime.query_blocks(causal, 2) == [(slice(0, 2), slice(0, 2)),
                                              (slice(2, 4), slice(0, 4)),
                                              (slice(4, 5), slice(0, 5))]
    padded = runtime.log_mask(runtime.padding_mask(np.array([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0]],
                                                            dtype=bool), 3), np.float64)[None]
    assert runtime.query_blocks(padded, 2) == [(slice(0, 2), slice(0, 3)),
                                              (slice(2, 3), slice(0, 3))]
    hidden = np.full((1, 1, 3, 4), -np.inf)
    assert runtime.query_blocks(hidden, 8) == [(slice(0, 3), slice(0, 1))]
    assert runtime.query_blocks(causal, None) == [(slice(0, 5), slice(0, 5))]


def test_a_long_query_axis_goes_in_blocks_of_twice_the_size(monkeypatch):
    """Blocks of 2 * size rows from LONG_QUERY_AXIS (32) blocks of size rows on: fewer,
    larger products where there are blocks enough to share out; the same blocks on any
    number of threads, so the same numbers."""
    module = generated(attention_bias="all")

    def sizes(T, workers):
        monkeypatch.setattr(module.rt, "WORKERS", workers)
        causal = module.rt.log_mask(np.tri(T, T, dtype=bool), np.float64)[None, None]
        blocks = module.rt.query_blocks(causal, 2)
        assert blocks[-1][1] == slice(0, T)                      # the last block: every key
        return {rows.stop - rows.start for rows, _ in blocks}

    for workers in (1, 2, 16):
        assert sizes(63, workers) == {2, 1} and sizes(64, workers) == {4}
        assert sizes(65, workers) == {4, 1}
