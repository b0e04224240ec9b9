"""Published models as variants: their parameter counts, reproduced exactly (GPT-2 small to
XL, BERT-base, Llama 3 8B)."""

import numpy as np
import pytest

from tspec import api
from tspec.execution import checkpoints, weights
from tspec.ops.catalogue import SETTINGS

# Hugging Face's GPT-2 checkpoints (tied output embedding, so lm_head adds nothing)
GPT2 = {"gpt2_small": (124_439_808, "gpt2"), "gpt2_medium": (354_823_168, "gpt2-medium"),
        "gpt2_large": (774_030_080, "gpt2-large"), "gpt2_xl": (1_557_611_200, "gpt2-xl")}


def parameter_count(name: str) -> int:
    variant = api.load(name)
    shapes = weights.expected_shapes(variant.spec, variant.choices, variant.dims)
    return sum(int(np.prod(shape)) for shape in shapes.values())


@pytest.mark.parametrize("name", sorted(GPT2))
def test_gpt2_variants_check_clean_and_count_the_published_parameters(name):
    assert api.check(name).ok
    assert parameter_count(name) == GPT2[name][0]


@pytest.mark.reference
@pytest.mark.parametrize("name", sorted(GPT2))
def test_gpt2_counts_match_hugging_face_models_built_from_their_configs(name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    variant = api.load(name)
    dims = variant.dims
    config = transformers.GPT2Config(vocab_size=dims["V"], n_positions=dims["max_len"],
                                     n_embd=dims["d_model"], n_layer=dims["N"], n_head=dims["H"])
    with torch.device("meta"):                      # shapes only: no memory, no download
        model = transformers.GPT2LMHeadModel(config)
    counted = sum(p.numel() for p in model.parameters())   # tied lm_head is counted once
    assert counted == parameter_count(name)


BERT_BASE = 109_482_240      # Hugging Face BertModel(BertConfig()), pooler included


def test_bert_base_checks_clean_and_counts_the_published_parameters():
    variant = api.load("bert_base")
    assert api.check(variant).ok
    assert variant.published.parameters == BERT_BASE
    assert parameter_count("bert_base") == BERT_BASE


@pytest.mark.reference
def test_bert_base_count_matches_hugging_face_bert_model_built_from_its_config():
    """BertModel with its pooler (add_pooling_layer=True, the default): word, position and
    token-type embeddings, the embedding LayerNorm, the encoder, the pooler's dense layer."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    dims = api.load("bert_base").dims
    config = transformers.BertConfig(vocab_size=dims["V"], hidden_size=dims["d_model"],
                                     num_hidden_layers=dims["N"],
                                     num_attention_heads=dims["H"],
                                     intermediate_size=dims["d_ff"],
                                     max_position_embeddings=dims["max_len"],
                                     type_vocab_size=dims["V_type"])
    assert config.to_dict() == transformers.BertConfig().to_dict()    # BERT-base's defaults
    with torch.device("meta"):                      # shapes only: no memory, no download
        model = transformers.BertModel(config)
    assert model.pooler is not None
    counted = sum(p.numel() for p in model.parameters())
    assert counted == parameter_count("bert_base") == BERT_BASE
    # the spec's parameters are HF's, tensor by tensor, under the checkpoint map's names
    with torch.device("meta"):
        small = transformers.BertModel(transformers.BertConfig(
            vocab_size=11, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=12, max_position_embeddings=6, type_vocab_size=3))
    state = {k: np.zeros(tuple(v.shape)) for k, v in small.state_dict().items()}
    mapped = checkpoints.from_bert(state)
    variant = api.load("bert_base")
    expected = weights.expected_shapes(variant.spec, variant.choices,
                                       {"V": 11, "d_model": 8, "N": 2, "H": 2, "d_ff": 12,
                                        "max_len": 6, "V_type": 3})
    assert {k: v.shape for k, v in mapped.items()} == expected


LLAMA3_8B = 8_030_261_248    # Hugging Face LlamaForCausalLM of Meta-Llama-3-8B's configuration


def test_llama3_8b_checks_clean_and_counts_the_published_parameters():
    variant = api.load("llama3_8b")
    assert api.check(variant).ok
    assert variant.published.parameters == LLAMA3_8B
    assert variant.settings == {"eps": 1e-5, "theta": 500000.0}
    assert parameter_count("llama3_8b") == LLAMA3_8B


@pytest.mark.reference
def test_llama3_8b_count_matches_hugging_face_built_from_its_config():
    """LlamaForCausalLM with 8 key-value heads for 32 query heads, SwiGLU, RMSNorm gains
    only, an untied lm_head; the spec's parameters are its tensors under from_llama's names."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    variant = api.load("llama3_8b")
    dims = variant.dims
    config = transformers.LlamaConfig(
        vocab_size=dims["V"], hidden_size=dims["d_model"], intermediate_size=dims["d_ff"],
        num_hidden_layers=dims["N"], num_attention_heads=dims["H"],
        num_key_value_heads=dims["H_kv"], rms_norm_eps=variant.settings["eps"],
        rope_parameters={"rope_type": "default", "rope_theta": variant.settings["theta"]},
        max_position_embeddings=8192, tie_word_embeddings=False)
    with torch.device("meta"):                      # shapes only: no memory, no download
        model = transformers.LlamaForCausalLM(config)
    counted = sum(p.numel() for p in model.parameters())
    assert counted == parameter_count("llama3_8b") == LLAMA3_8B
    # the name map, on a small model of the same structure (a real one would need 32 GB)
    small = {"d_model": 16, "H": 4, "H_kv": 2, "d_ff": 24, "N": 2, "V": 11}
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=small["V"], hidden_size=small["d_model"], intermediate_size=small["d_ff"],
            num_hidden_layers=small["N"], num_attention_heads=small["H"],
            num_key_value_heads=small["H_kv"], tie_word_embeddings=False))
    expected = weights.expected_shapes(variant.spec, variant.choices, small)
    state = {name: np.zeros(tuple(t.shape), np.float32) for name, t in model.state_dict().items()}
    mapped = checkpoints.from_llama(state)
    assert {name: array.shape for name, array in mapped.items()} == \
        {name: tuple(shape) for name, shape in expected.items()}


@pytest.mark.parametrize("name, config", [
    ("gpt2_small", "GPT2Config()"), ("gpt2_medium", ("GPT2Config(n_embd=1024, n_layer=24, "
                                     "n_head=16)")),
    ("bert_base", "BertConfig()"),
    ("llama3_8b", ("LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, "
                  "num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, "
                  "rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=8192)"))])
def test_a_shipped_variant_is_the_model_it_names_settings_included(name, config):
    """What `tspec import` makes of the configuration a shipped variant says it is: the same
    choices, dims and run-time settings (bert_base once left eps at 1e-5 where BERT's
    LayerNorms take 1e-12: its run and its generated module computed another model)."""
    transformers = pytest.importorskip("transformers")
    kind, _, arguments = config.partition("(")
    fields = dict(item.split("=") for item in arguments.rstrip(")").split(", ") if item)
    built = getattr(transformers, kind)(**{k: float(v) if "." in v or "e-" in v else int(v)
                                           for k, v in fields.items()})
    imported, variant = api.load(built), api.load(name)
    spec = variant.spec
    assert spec.choice_values(imported.choices) == spec.choice_values(variant.choices)
    assert imported.dims == variant.dims
    assert {k: float(imported.settings.get(k, s.default)) for k, s in SETTINGS.items()} == \
        {k: float(variant.settings.get(k, s.default)) for k, s in SETTINGS.items()}
