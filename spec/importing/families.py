"""Each supported ``model_type`` as the spec's choices, dims and settings.

A family reads the fields it maps from a ``Fields``, names the ones irrelevant to the forward
pass, and refuses values the spec has no choice for; ``Fields.finish`` then refuses any field
left over. The choices a family does not set keep the spec's defaults, which are its own
(``decoding=full``, ``attention_window=full``...).
"""

import re
from dataclasses import dataclass, field

from tspec.importing.fields import Fields
from tspec.importing.rope import rope_settings
from tspec.language.variant import MAX_DIGITS


@dataclass
class Imported:
    """What a config becomes: the variant's parts, and what to say of it."""
    family: str                 # the model_type
    model: str                  # the Hugging Face model class it describes
    choices: dict[str, str]
    dims: dict[str, int]
    settings: dict[str, float]
    notes: list[str] = field(default_factory=list)
    # each field of the config and how it was accounted for (Fields.kinds)
    fields: dict[str, str] = field(default_factory=dict)
    # the config field each dim, choice and setting comes from (where the config sets it),
    # for errors and findings placed at its line of config.json
    origins: dict[str, str] = field(default_factory=dict)


# Hugging Face activation names (ACT2FN's spellings) and the spec's activation options;
# None: refused (gelu_fast is another approximation)
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
        "gelu_fast": None, "relu": "relu"}
DROPOUTS = ("resid_pdrop", "embd_pdrop", "attn_pdrop", "hidden_dropout_prob",
            "attention_probs_dropout_prob", "classifier_dropout", "attention_dropout",
            "summary_first_dropout")


def _activation(fields: Fields, name: str, default: str) -> str:
    value = fields.raw(name, default)
    option = ACTIVATIONS.get(value) if isinstance(value, str) else None
    if option is None:
        raise fields.refuse(name, value)
    return option


def gpt2(fields: Fields, pooler: bool) -> Imported:
    """GPT2LMHeadModel: pre-LN with a final LayerNorm, learned positions, biases everywhere,
    Conv1D products (y = x W + b, the spec's own layout)."""
    d_model = fields.integer("n_embd", 768)
    d_ff = fields.integer("n_inner", required=False)
    if d_ff is None:                    # GPT-2's own default, 4 * n_embd: a dim too
        d_ff = 4 * d_model
        if d_ff >= 10 ** MAX_DIGITS:
            raise fields.error(f"n_inner is not set, and d_ff = 4 * n_embd = {d_ff} has more "
                               f"than {MAX_DIGITS} digits, the most a dim may have")
    dims = {"V": fields.integer("vocab_size", 50257), "max_len": fields.integer("n_positions", 1024),
            "d_model": d_model, "N": fields.integer("n_layer", 12),
            "H": fields.integer("n_head", 12), "d_ff": d_ff}
    choices = {"arch": "decoder_only", "norm": "pre",
               "activation": _activation(fields, "activation_function", "gelu_new"),
               "positional": "learned",
               "output_embedding": "tied" if fields.flag("tie_word_embeddings", True)
               else "separate",
               "head_dims": "split", "attention_bias": "all"}
    settings = {"eps": fields.number("layer_norm_epsilon", 1e-5)}
    fields.require("scale_attn_weights", True)
    fields.require("scale_attn_by_inverse_layer_idx", False)
    fields.irrelevant(*DROPOUTS,
                      "n_ctx",                       # old name of n_positions, unused
                      "reorder_and_upcast_attn",     # the same scores, computed in float32
                      # GPT2DoubleHeadsModel's multiple-choice head, not in GPT2LMHeadModel
                      "summary_type", "summary_use_proj", "summary_activation",
                      "summary_proj_to_labels")
    return Imported("gpt2", "GPT2LMHeadModel", choices, dims, settings, origins={
        "V": "vocab_size", "max_len": "n_positions", "d_model": "n_embd", "N": "n_layer",
        "H": "n_head", "d_ff": "n_inner" if fields.data.get("n_inner") is not None else "n_embd",
        "activation": "activation_function", "output_embedding": "tie_word_embeddings",
        "eps": "layer_norm_epsilon"})


# the BERT heads that build their BertModel without its pooler (add_pooling_layer=False), as
# transformers 5.23's modeling_bert builds them: a checkpoint saved from one has no pooler
WITHOUT_POOLER = frozenset({"BertForMaskedLM", "BertLMHeadModel", "BertForTokenClassification",
                            "BertForQuestionAnswering"})


def bert(fields: Fields, pooler: bool) -> Imported:
    """BertModel: post-LN, learned absolute positions, token types, biases everywhere; with
    its pooler (``add_pooling_layer=True``, the default) or without."""
    dims = {"V": fields.integer("vocab_size", 30522), "d_model": fields.integer("hidden_size", 768),
            "N": fields.integer("num_hidden_layers", 12),
            "H": fields.integer("num_attention_heads", 12),
            "d_ff": fields.integer("intermediate_size", 3072),
            "max_len": fields.integer("max_position_embeddings", 512),
            "V_type": fields.integer("type_vocab_size", 2)}
    choices = {"arch": "encoder_only", "norm": "post",
               "activation": _activation(fields, "hidden_act", "gelu"),
               "positional": "learned", "head_dims": "split", "attention_bias": "all",
               "encoder_io": "bert" if pooler else "bert_unpooled"}
    settings = {"eps": fields.number("layer_norm_eps", 1e-12)}
    fields.require("position_embedding_type", "absolute")
    fields.require("is_decoder", False)
    fields.irrelevant(*DROPOUTS,
                      "tie_word_embeddings")         # ties an LM head, which BertModel lacks
    model = "BertModel" + ("" if pooler else " (add_pooling_layer=False)")
    return Imported("bert", model, choices, dims, settings, origins={
        "V": "vocab_size", "d_model": "hidden_size", "N": "num_hidden_layers",
        "H": "num_attention_heads", "d_ff": "intermediate_size",
        "max_len": "max_position_embeddings", "V_type": "type_vocab_size",
        "activation": "hidden_act", "eps": "layer_norm_eps"})


def llama(fields: Fields, pooler: bool) -> Imported:
    """LlamaForCausalLM: pre-norm RMSNorm, rotary positions, grouped-query attention, SwiGLU;
    optional biases on the attention (``attention_bias``: Q, K, V and output) and the MLP."""
    imported = _rotary_decoder(fields, "llama", "LlamaForCausalLM")
    imported.choices["attention_bias"] = "all" if fields.flag("attention_bias", False) \
        else "none"
    imported.choices["feed_forward_bias"] = "all" if fields.flag("mlp_bias", False) else "none"
    imported.origins.update(attention_bias="attention_bias", feed_forward_bias="mlp_bias")
    # a tensor-parallel split of the same products, which 5.x ignores
    fields.irrelevant("pretraining_tp")
    return imported


def mistral(fields: Fields, pooler: bool) -> Imported:
    """MistralForCausalLM: Llama's blocks, no biases, and each query attending to the last
    ``sliding_window`` positions (itself included) where the config sets one."""
    imported = _rotary_decoder(fields, "mistral", "MistralForCausalLM")
    imported.choices["attention_bias"] = "none"
    imported.choices["feed_forward_bias"] = "none"
    return imported


def qwen2(fields: Fields, pooler: bool) -> Imported:
    """Qwen2ForCausalLM: Llama's blocks with biases on the Q, K and V projections alone;
    sliding-window attention only where ``use_sliding_window`` is set (and then on every
    layer: ``layer_types`` or ``max_window_layers`` that mix full and sliding layers are
    refused)."""
    imported = _rotary_decoder(fields, "qwen2", "Qwen2ForCausalLM")
    imported.choices["attention_bias"] = "qkv"
    imported.choices["feed_forward_bias"] = "none"
    return imported


def _rotary_decoder(fields: Fields, family: str, model: str) -> Imported:
    """The fields Llama, Mistral and Qwen2 share."""
    d_model = fields.integer("hidden_size")
    H = fields.integer("num_attention_heads")
    H_kv = fields.integer("num_key_value_heads", H, required=False)
    dims = {"V": fields.integer("vocab_size"), "d_model": d_model,
            "N": fields.integer("num_hidden_layers"), "H": H,
            "d_ff": fields.integer("intermediate_size")}
    choices = {"arch": "decoder_only", "norm": "pre", "activation": "swiglu",
               "positional": "rotary",
               "output_embedding": "tied" if fields.flag("tie_word_embeddings", False)
               else "separate",
               "head_dims": "split", "normalization": "rms_norm",
               "key_value_heads": "all" if H_kv == H else "grouped"}
    if H_kv != H:
        dims["H_kv"] = H_kv
    head_dim = fields.integer("head_dim", d_model // H, required=False)
    if d_model % H or head_dim != d_model // H:
        choices["head_dims"] = "free"
        dims["d_k"] = dims["d_v"] = head_dim
    if fields.raw("hidden_act", "silu") != "silu":
        raise fields.refuse("hidden_act", fields.raw("hidden_act"))
    settings = {"eps": fields.number("rms_norm_eps", 1e-6), **rope_settings(fields)}
    # Llama has no window: a sliding_window or layer_types there is a field it does not know
    window = _window(fields, family, dims["N"]) if family != "llama" else None
    if window is not None:
        choices["attention_window"] = "sliding"
        dims["W"] = window
    fields.irrelevant(*DROPOUTS,
                      # rotary positions have no table: the length trained at is no dim
                      "max_position_embeddings")
    rope = "rope_parameters" if fields.data.get("rope_parameters") is not None else \
        "rope_scaling"
    origins = {"V": "vocab_size", "d_model": "hidden_size", "N": "num_hidden_layers",
               "H": "num_attention_heads", "d_ff": "intermediate_size",
               "H_kv": "num_key_value_heads", "key_value_heads": "num_key_value_heads",
               "d_k": "head_dim", "d_v": "head_dim", "head_dims": "head_dim",
               "output_embedding": "tie_word_embeddings", "W": "sliding_window",
               "attention_window": "sliding_window", "eps": "rms_norm_eps",
               "theta": "rope_theta" if fields.has("rope_theta") else rope,
               **dict.fromkeys(("rope_factor", "rope_low", "rope_high", "rope_context"), rope)}
    return Imported(family, model, choices, dims, settings, origins=origins)


def _window(fields: Fields, family: str, layers: int) -> int | None:
    """The sliding window every layer uses, or None for full attention everywhere."""
    window = fields.integer("sliding_window", required=False)
    layer_types = fields.raw("layer_types")
    if family == "qwen2":
        used = fields.flag("use_sliding_window", False)
        first_sliding = fields.integer("max_window_layers", layers, required=False,
                                       least=0)
        if not used:
            window = None            # Qwen2 keeps the size in the file even when it is off
        elif layer_types is None and first_sliding >= layers:
            window = None            # layers from max_window_layers on slide: none here
        elif layer_types is None and first_sliding > 0:
            raise fields.error(f"max_window_layers = {first_sliding} of {layers} layers mixes "
                               "full and sliding attention, which is not supported")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != layers or not all(
                kind in ("full_attention", "sliding_attention") for kind in layer_types):
            raise fields.refuse("layer_types", layer_types)
        kinds = set(layer_types)
        if len(kinds) > 1:
            raise fields.refuse("layer_types", layer_types,
                                "mixes full and sliding attention, which is not supported")
        if kinds == {"full_attention"}:
            return None
        if window is None:
            raise fields.error("layer_types asks for sliding attention, but sliding_window "
                               "is not set")
    return window


FAMILIES = {"gpt2": gpt2, "bert": bert, "llama": llama, "mistral": mistral, "qwen2": qwen2}

# Each model_type's Hugging Face classes, as a config's ``architectures`` names them: the
# prefix, then the base model, a model with an LM head, or a head (``For`` and a task:
# BertForMaskedLM, LlamaForCausalLM). Nothing else: Qwen2MoeForCausalLM is not Qwen2's, nor
# RobertaModel BERT's, though their tensors share the names.
CLASSES = {"gpt2": ("GPT2", ("Model", "LMHeadModel", "DoubleHeadsModel")),
           "bert": ("Bert", ("Model", "LMHeadModel")),
           "llama": ("Llama", ("Model",)), "mistral": ("Mistral", ("Model",)),
           "qwen2": ("Qwen2", ("Model",))}
_HEAD = re.compile(r"For[A-Z][A-Za-z]*")


def model_type_of(name: str) -> str | None:
    """The model_type whose class ``name`` is (GPT2LMHeadModel: gpt2), or None for a class of
    none that tspec imports (RobertaModel, GemmaForCausalLM)."""
    for model_type, (prefix, models) in CLASSES.items():
        rest = name[len(prefix):] if name.startswith(prefix) else None
        if rest is not None and (rest in models or _HEAD.fullmatch(rest)):
            return model_type
    return None


def classes_text(model_type: str) -> str:
    """The classes of a model_type as an error names them: "BertModel, BertLMHeadModel and
    BertFor..."."""
    prefix, models = CLASSES[model_type]
    return f"{', '.join(prefix + model for model in models)} and {prefix}For..."
