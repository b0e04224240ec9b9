"""Hugging Face configs built offline for the importer's tests, each family at a tiny size and
at published sizes; the models they make, with random weights; and a variant's generated
module run on a Hugging Face state dict."""

import inspect

import numpy as np

from tspec import api
from tspec.execution import checkpoints, weights

# family -> (config class, the model class the import describes, the checkpoint map)
FAMILIES = {"gpt2": ("GPT2Config", "GPT2LMHeadModel", "from_gpt2"),
            "bert": ("BertConfig", "BertModel", "from_bert"),
            "llama": ("LlamaConfig", "LlamaForCausalLM", "from_llama"),
            "mistral": ("MistralConfig", "MistralForCausalLM", "from_llama"),
            "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", "from_llama")}

# tiny sizes, with settings off their defaults so that a wrong mapping shows
TINY = {
    "gpt2": {"vocab_size": 13, "n_positions": 16, "n_embd": 16, "n_layer": 2, "n_head": 4,
             "layer_norm_epsilon": 1e-6, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
             "attn_pdrop": 0.0},
    "bert": {"vocab_size": 13, "hidden_size": 16, "num_hidden_layers": 2,
             "num_attention_heads": 4, "intermediate_size": 24, "max_position_embeddings": 16,
             "type_vocab_size": 3, "hidden_dropout_prob": 0.0,
             "attention_probs_dropout_prob": 0.0},
    "llama": {"vocab_size": 13, "hidden_size": 16, "intermediate_size": 24,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
              "rope_parameters": {"rope_type": "default", "rope_theta": 500.0}},
    "mistral": {"vocab_size": 13, "hidden_size": 16, "intermediate_size": 24,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "rms_norm_eps": 1e-5, "sliding_window": 3, "tie_word_embeddings": False,
                "rope_parameters": {"rope_type": "default", "rope_theta": 300.0}},
    "qwen2": {"vocab_size": 13, "hidden_size": 16, "intermediate_size": 24,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
              "rope_parameters": {"rope_type": "default", "rope_theta": 700.0}},
}
# Llama 3.1's rope scaling, at a tiny size: an original context short enough that the tiny
# head's frequencies fall in all three bands (kept, blended, divided)
LLAMA31_TINY = {**TINY["llama"], "rope_parameters": {
    "rope_type": "llama3", "rope_theta": 500.0, "factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}
LLAMA3 = {"rope_type": "llama3", "rope_theta": 500000.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}

# published sizes (their Hugging Face configurations), counted on the meta device
PUBLISHED = {
    "gpt2": ("gpt2", {}),
    "gpt2-xl": ("gpt2", {"n_embd": 1600, "n_layer": 48, "n_head": 25}),
    "bert-base-uncased": ("bert", {}),
    "bert-large-uncased": ("bert", {"hidden_size": 1024, "num_hidden_layers": 24,
                                    "num_attention_heads": 16, "intermediate_size": 4096}),
    "Llama-2-7b": ("llama", {}),
    "Meta-Llama-3-8B": ("llama", {
        "vocab_size": 128256, "intermediate_size": 14336, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-5, "rope_parameters": {"rope_type": "default",
                                                  "rope_theta": 500000.0}}),
    "Llama-3.1-8B": ("llama", {
        "vocab_size": 128256, "intermediate_size": 14336, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-5, "max_position_embeddings": 131072,
        "rope_parameters": {**LLAMA3, "factor": 8.0}}),
    "Llama-3.2-1B": ("llama", {
        "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192,
        "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 64, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
        "rope_parameters": {**LLAMA3, "factor": 32.0}}),
    "Mistral-7B-v0.1": ("mistral", {}),
    "Qwen2-0.5B": ("qwen2", {
        "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
        "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
        "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}),
    "Qwen2-7B": ("qwen2", {"vocab_size": 152064, "hidden_size": 3584,
                           "intermediate_size": 18944, "num_hidden_layers": 28,
                           "num_attention_heads": 28, "num_key_value_heads": 4}),
}


def config(transformers, family: str, **fields):
    return getattr(transformers, FAMILIES[family][0])(**fields)


def model(transformers, family: str, config, pooler: bool = True):
    cls = getattr(transformers, FAMILIES[family][1])
    return cls(config, add_pooling_layer=pooler) if family == "bert" else cls(config)


def import_variant(tmp_path, config, name: str = "imported", pooler: bool = True):
    """The config imported (tspec.from_hf) into a file, loaded as a variant."""
    path = tmp_path / f"{name}.toml"
    api_text = __import__("tspec").from_hf(config, path, pooler=pooler)
    assert path.read_text() == api_text
    return api.load(path)


def parameter_count(variant) -> int:
    shapes = weights.expected_shapes(variant.spec, variant.choices, variant.dims)
    return sum(int(np.prod(shape)) for shape in shapes.values())


def mapped(family: str, variant, state: dict) -> dict:
    """A Hugging Face state dict under the spec's names, checked against the variant."""
    unpooled = variant.choices.get("encoder_io") == "bert_unpooled"
    if unpooled:                    # from_bert maps a BertModel with its pooler: lend it one
        width = variant.dims["d_model"]
        state = {**state, "pooler.dense.weight": np.zeros((width, width)),
                 "pooler.dense.bias": np.zeros(width)}
    flat = getattr(checkpoints, FAMILIES[family][2])(state)
    if unpooled:
        del flat["W_pool"], flat["b_pool"]
    return weights.validate(flat, weights.expected_shapes(variant.spec, variant.choices,
                                                          variant.dims), family)


def run_module(module, variant, inputs: dict, params: dict, trace=None):
    """The module's model function on named inputs, its keyword dims and settings taken from
    the variant."""
    function = module.transformer
    signature = inspect.signature(function)
    positional, keywords = [], {}
    for name, parameter in signature.parameters.items():
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            if name in variant.dims:
                keywords[name] = variant.dims[name]
            elif name in variant.settings:
                keywords[name] = variant.settings[name]
        elif name == "params":
            positional.append(params)
        else:
            positional.append(inputs[name])
    return function(*positional, **keywords, trace=trace)
