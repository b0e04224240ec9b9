"""Explicit name maps from other implementations' state dicts to the spec's parameter names.

Each map takes a state dict (name -> array-like, e.g. ``model.state_dict()``; tensors are
converted with ``numpy()``) and returns flat spec names (``encoder.layers.0.self_attention.W_Q``)
ready for ``weights.validate``. Weights are transposed where the source stores ``y = x W^T``
(``nn.Linear``); GPT-2's ``Conv1D`` already stores ``y = x W``. A name the map expects but the
state dict lacks is an error naming it; so is a state-dict entry the map has no place for.
"""

import re

import numpy as np

from tspec.codegen.execution.weights import WeightsError


def _array(value, what: str, name: str) -> np.ndarray:
    """An entry of a state dict as a NumPy array; one whose dtype NumPy has no type for (a
    bfloat16 or float8 tensor) is refused by name, before any parameter is used."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        try:
            value = value.numpy()
        except TypeError:                   # PyTorch: "Got unsupported ScalarType BFloat16"
            raise WeightsError(f"{what}: entry {name!r} has dtype {value.dtype}, which NumPy "
                               "has no type for; convert the state dict first, e.g. "
                               "model.float().state_dict()") from None
    return np.asarray(value)


class _Source:
    """A state dict read entry by entry; what was never read is reported as unexpected."""

    def __init__(self, state: dict, what: str, ignore: tuple[str, ...] = ()):
        self.state = {k: v for k, v in state.items() if not any(re.fullmatch(p, k)
                                                                for p in ignore)}
        self.what = what
        self.used: set[str] = set()

    def __call__(self, name: str) -> np.ndarray:
        if name not in self.state:
            raise WeightsError(f"{self.what}: state dict has no entry {name!r}")
        self.used.add(name)
        return _array(self.state[name], self.what, name)

    def has(self, name: str) -> bool:
        return name in self.state

    def finish(self, flat: dict) -> dict:
        unused = [k for k in self.state if k not in self.used]
        if unused:
            raise WeightsError(f"{self.what}: no place in the spec for {', '.join(unused[:5])}"
                               + (f" and {len(unused) - 5} more" if len(unused) > 5 else ""))
        return flat


def _linear_attention(read, prefix: str, out: str, flat: dict, width: int) -> None:
    """nn.MultiheadAttention: in_proj stacks Q, K, V rows; y = x W^T + b."""
    at = f"{prefix}." if prefix else ""
    weight, bias = read(f"{at}in_proj_weight"), read(f"{at}in_proj_bias")
    for index, part in enumerate("QKV"):
        rows = slice(index * width, (index + 1) * width)
        flat[f"{out}.W_{part}"] = weight[rows].T.copy()
        flat[f"{out}.b_{part}"] = bias[rows].copy()
    flat[f"{out}.W_O"] = read(f"{at}out_proj.weight").T.copy()
    flat[f"{out}.b_O"] = read(f"{at}out_proj.bias")


def _layer_norm(read, prefix: str, out: str, flat: dict) -> None:
    flat[f"{out}.gamma"] = read(f"{prefix}.weight")
    flat[f"{out}.beta"] = read(f"{prefix}.bias")


def _linear(read, prefix: str, weight: str, bias: str, flat: dict) -> None:
    flat[weight] = read(f"{prefix}.weight").T.copy()
    flat[bias] = read(f"{prefix}.bias")


def from_torch_multi_head_attention(state: dict) -> dict[str, np.ndarray]:
    """``torch.nn.MultiheadAttention`` (with biases) to the spec's multi_head_attention
    parameters (W_Q, W_K, W_V, W_O and their biases)."""
    read = _Source(state, "nn.MultiheadAttention")
    flat: dict[str, np.ndarray] = {}
    _linear_attention(read, "", "", flat, read("in_proj_weight").shape[1])
    return read.finish({name.lstrip("."): value for name, value in flat.items()})


def from_torch_transformer(state: dict, *, norm: str, embedding=None,
                           output=None) -> dict[str, np.ndarray]:
    """``torch.nn.Transformer`` (batch_first or not: the weights are the same) to the spec.

    The spec's encoder-decoder with ``attention_bias=all``; ``norm`` is "post" (the spec has no
    final LayerNorm, so the model's ``encoder.norm`` and ``decoder.norm`` must be None) or
    "pre" (``norm_first=True``; the final norms map to ``final_norm``). nn.Transformer has no
    embedding or output projection: give them as ``embedding`` (V, d_model) and ``output``
    (d_model, V), or leave them out to get the stacks' parameters alone.
    """
    read = _Source(state, "nn.Transformer")
    flat: dict[str, np.ndarray] = {}
    if embedding is not None:
        flat["E"] = _array(embedding, "nn.Transformer", "embedding")
    if output is not None:
        flat["W_out"] = _array(output, "nn.Transformer", "output")
    width = read("encoder.layers.0.self_attn.in_proj_weight").shape[1]
    for stack in ("encoder", "decoder"):
        index = 0
        while read.has(f"{stack}.layers.{index}.self_attn.in_proj_weight"):
            source, target = f"{stack}.layers.{index}", f"{stack}.layers.{index}"
            _linear_attention(read, f"{source}.self_attn", f"{target}.self_attention", flat,
                              width)
            norms = 2
            if stack == "decoder":
                _linear_attention(read, f"{source}.multihead_attn", f"{target}.cross_attention",
                                  flat, width)
                norms = 3
            _linear(read, f"{source}.linear1", f"{target}.feed_forward.W_1",
                    f"{target}.feed_forward.b_1", flat)
            _linear(read, f"{source}.linear2", f"{target}.feed_forward.W_2",
                    f"{target}.feed_forward.b_2", flat)
            for number in range(1, norms + 1):
                _layer_norm(read, f"{source}.norm{number}", f"{target}.norm_{number}", flat)
            index += 1
        if read.has(f"{stack}.norm.weight"):
            if norm == "post":
                raise WeightsError(f"nn.Transformer: {stack}.norm is set, but the post-LN spec "
                                   "(the seeds) has no final LayerNorm; set the model's "
                                   f"{stack}.norm = None")
            _layer_norm(read, f"{stack}.norm", f"{stack}.final_norm", flat)
    return read.finish(flat)


def from_gpt2(state: dict) -> dict[str, np.ndarray]:
    """Hugging Face ``GPT2LMHeadModel`` (or ``GPT2Model``) to the spec.

    The spec's decoder-only model with norm=pre, activation=gelu_tanh, positional=learned,
    output_embedding=tied, attention_bias=all. GPT-2's Conv1D stores y = x W + b, so no
    transposes; c_attn stacks Q, K, V side by side in its columns.
    """
    prefix = "transformer." if any(k.startswith("transformer.") for k in state) else ""
    ignore = (r"lm_head\.weight",                      # tied to wte
              r".*\.attn\.(masked_)?bias")             # causal-mask buffers of old versions
    read = _Source(state, "GPT-2", ignore)
    flat = {"E": read(f"{prefix}wte.weight"), "P_table": read(f"{prefix}wpe.weight")}
    width = flat["E"].shape[1]
    index = 0
    while read.has(f"{prefix}h.{index}.ln_1.weight"):
        source, target = f"{prefix}h.{index}", f"decoder.layers.{index}"
        _layer_norm(read, f"{source}.ln_1", f"{target}.norm_1", flat)
        weight, bias = read(f"{source}.attn.c_attn.weight"), read(f"{source}.attn.c_attn.bias")
        for part_index, part in enumerate("QKV"):
            columns = slice(part_index * width, (part_index + 1) * width)
            flat[f"{target}.self_attention.W_{part}"] = weight[:, columns].copy()
            flat[f"{target}.self_attention.b_{part}"] = bias[columns].copy()
        flat[f"{target}.self_attention.W_O"] = read(f"{source}.attn.c_proj.weight")
        flat[f"{target}.self_attention.b_O"] = read(f"{source}.attn.c_proj.bias")
        _layer_norm(read, f"{source}.ln_2", f"{target}.norm_2", flat)
        flat[f"{target}.feed_forward.W_1"] = read(f"{source}.mlp.c_fc.weight")
        flat[f"{target}.feed_forward.b_1"] = read(f"{source}.mlp.c_fc.bias")
        flat[f"{target}.feed_forward.W_2"] = read(f"{source}.mlp.c_proj.weight")
        flat[f"{target}.feed_forward.b_2"] = read(f"{source}.mlp.c_proj.bias")
        index += 1
    _layer_norm(read, f"{prefix}ln_f", "decoder.final_norm", flat)
    return read.finish(flat)


def from_bert(state: dict) -> dict[str, np.ndarray]:
    """Hugging Face ``BertModel`` (with its pooler) to the spec, every parameter.

    The spec's encoder-only model with encoder_io=bert, norm=post, activation=gelu,
    positional=learned, attention_bias=all (the bert_base variant; run it with eps=1e-12):
    the word, position and token-type embeddings (``E``, ``P_table``, ``E_type``), the
    embedding LayerNorm (``gamma_emb``, ``beta_emb``), the encoder's layers and the pooler's
    dense layer (``W_pool``, ``b_pool``). A ``BertFor...`` model's state (keys under
    ``bert.``) gives its BertModel part; its ``cls.`` heads are not in the spec and are left
    out. A BertModel built without its pooler lacks ``pooler.dense.weight``: an error.
    """
    prefix = _bert_prefix(state)
    read = _Source(state, "BERT", (r"cls\..*", rf"{re.escape(prefix)}embeddings\.position_ids",
                                   rf"{re.escape(prefix)}embeddings\.token_type_ids"))
    at = f"{prefix}embeddings"
    flat = {"E": read(f"{at}.word_embeddings.weight"),
            "P_table": read(f"{at}.position_embeddings.weight"),
            "E_type": read(f"{at}.token_type_embeddings.weight"),
            "gamma_emb": read(f"{at}.LayerNorm.weight"),
            "beta_emb": read(f"{at}.LayerNorm.bias")}
    _bert_layers(read, prefix, flat)
    _linear(read, f"{prefix}pooler.dense", "W_pool", "b_pool", flat)
    return read.finish(flat)


def from_bert_encoder(state: dict) -> dict[str, np.ndarray]:
    """Hugging Face ``BertModel``'s encoder stack to the spec's ``encoder`` parameters.

    The spec's encoder with norm=post, activation=gelu, attention_bias=all. BERT's embeddings
    and pooler are left out: feed BERT's embedding output to the generated ``encoder``
    function. ``from_bert`` maps the whole model.
    """
    prefix = _bert_prefix(state)
    ignore = (rf"{re.escape(prefix)}embeddings\..*", rf"{re.escape(prefix)}pooler\..*",
              r"cls\..*")
    read = _Source(state, "BERT", ignore)
    flat: dict[str, np.ndarray] = {}
    _bert_layers(read, prefix, flat)
    return read.finish(flat)


def _bert_prefix(state: dict) -> str:
    return "bert." if any(k.startswith("bert.") for k in state) else ""


def _bert_layers(read, prefix: str, flat: dict) -> None:
    """BERT's encoder layers to ``encoder.layers.i``: nn.Linear weights, y = x W^T + b."""
    index = 0
    while read.has(f"{prefix}encoder.layer.{index}.attention.self.query.weight"):
        source, target = f"{prefix}encoder.layer.{index}", f"encoder.layers.{index}"
        for part, name in zip("QKV", ("query", "key", "value")):
            _linear(read, f"{source}.attention.self.{name}",
                    f"{target}.self_attention.W_{part}", f"{target}.self_attention.b_{part}",
                    flat)
        _linear(read, f"{source}.attention.output.dense", f"{target}.self_attention.W_O",
                f"{target}.self_attention.b_O", flat)
        _layer_norm(read, f"{source}.attention.output.LayerNorm", f"{target}.norm_1", flat)
        _linear(read, f"{source}.intermediate.dense", f"{target}.feed_forward.W_1",
                f"{target}.feed_forward.b_1", flat)
        _linear(read, f"{source}.output.dense", f"{target}.feed_forward.W_2",
                f"{target}.feed_forward.b_2", flat)
        _layer_norm(read, f"{source}.output.LayerNorm", f"{target}.norm_2", flat)
        index += 1
    if index == 0:
        raise WeightsError(f"BERT: state dict has no entry '{prefix}encoder.layer.0."
                           "attention.self.query.weight' (no encoder layers)")


def from_llama(state: dict) -> dict[str, np.ndarray]:
    """Hugging Face ``LlamaForCausalLM`` (or ``LlamaModel``) to the spec, every parameter;
    ``MistralForCausalLM`` and ``Qwen2ForCausalLM`` too (the same names; Qwen2's biases on
    q_proj, k_proj and v_proj to b_Q, b_K and b_V, for attention_bias=qkv).

    The spec's decoder-only model with norm=pre, normalization=rms_norm, positional=rotary,
    activation=swiglu, key_value_heads=grouped, attention_bias=none, feed_forward_bias=none
    and output_embedding=separate (the llama3_8b variant; run it with that model's
    ``rms_norm_eps`` as eps and ``rope_theta`` as theta). nn.Linear weights, y = x W^T:
    ``q_proj`` to W_Q, ``k_proj`` and ``v_proj`` (H_kv heads) to W_K and W_V, ``o_proj`` to
    W_O; the MLP's ``gate_proj`` to W_1 (the gate), ``up_proj`` to W_3, ``down_proj`` to W_2;
    ``input_layernorm`` and ``post_attention_layernorm`` to norm_1 and norm_2, ``model.norm``
    to the final norm, ``lm_head`` to W_out. Rotary halves: HF's rotate_half pairs feature i
    with i + d_k/2, as the spec's rotary does, so the projections need no permutation. A
    ``LlamaModel`` has no ``lm_head``: an error (the spec's model ends in the vocabulary).
    """
    prefix = "model." if any(k.startswith("model.") for k in state) else ""
    read = _Source(state, "Llama")
    flat = {"E": read(f"{prefix}embed_tokens.weight")}
    index = 0
    while read.has(f"{prefix}layers.{index}.self_attn.q_proj.weight"):
        source, target = f"{prefix}layers.{index}", f"decoder.layers.{index}"
        for part, name in zip("QKVO", ("q_proj", "k_proj", "v_proj", "o_proj")):
            flat[f"{target}.self_attention.W_{part}"] = \
                read(f"{source}.self_attn.{name}.weight").T.copy()
            if read.has(f"{source}.self_attn.{name}.bias"):    # Qwen2: Q, K, V; attention_bias
                flat[f"{target}.self_attention.b_{part}"] = read(f"{source}.self_attn.{name}.bias")
        for part, name in zip("132", ("gate_proj", "up_proj", "down_proj")):
            flat[f"{target}.feed_forward.W_{part}"] = read(f"{source}.mlp.{name}.weight").T.copy()
        flat[f"{target}.norm_1.gamma"] = read(f"{source}.input_layernorm.weight")
        flat[f"{target}.norm_2.gamma"] = read(f"{source}.post_attention_layernorm.weight")
        index += 1
    if index == 0:
        raise WeightsError(f"Llama: state dict has no entry '{prefix}layers.0.self_attn.q_proj."
                           "weight' (no decoder layers)")
    flat["decoder.final_norm.gamma"] = read(f"{prefix}norm.weight")
    flat["W_out"] = read("lm_head.weight").T.copy()
    return read.finish(flat)
