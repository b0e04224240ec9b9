"""Hugging Face configs as variants (`tspec.from_hf`): every field of every family's config
accounted for (mapped, irrelevant to the forward pass, or refused by name and value), the
spellings of transformers 4.x files and 5.x configs, and the one-line refusals."""

import json

import pytest
from support.hf_configs import FAMILIES, TINY, config, import_variant
from support.refusals import raises

import tspec
from tspec import ConfigError, UsageError, api
from tspec.importing import imported

transformers = pytest.importorskip("transformers")

# the fields each family's Config().to_dict() has that do not change its forward pass
IRRELEVANT = {
    "gpt2": {"resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_first_dropout",
             "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
             "reorder_and_upcast_attn", "initializer_range", "bos_token_id", "eos_token_id",
             "pad_token_id", "use_cache"},
    "bert": {"hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout",
             "initializer_range", "pad_token_id", "bos_token_id", "eos_token_id", "use_cache",
             "tie_word_embeddings"},
    "llama": {"attention_dropout", "initializer_range", "pretraining_tp",
              "max_position_embeddings", "bos_token_id", "eos_token_id", "pad_token_id",
              "use_cache"},
    "mistral": {"attention_dropout", "initializer_range", "max_position_embeddings",
                "bos_token_id", "eos_token_id", "pad_token_id", "use_cache"},
    "qwen2": {"attention_dropout", "initializer_range", "max_position_embeddings",
              "bos_token_id", "eos_token_id", "pad_token_id", "use_cache"},
}
# bookkeeping every config has: versions, output options, labels of task heads, the dtype
# (architectures is not: the classes it names must be of the model_type)
GENERIC = {"transformers_version", "output_hidden_states", "return_dict",
           "dtype", "chunk_size_feed_forward", "id2label", "label2id", "problem_type",
           "_name_or_path", "output_attentions"}


def defaults(family: str) -> dict:
    return config(transformers, family).to_dict()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_field_of_a_default_config_is_accounted_for(family):
    data = defaults(family)
    result, _ = imported(data)
    assert set(result.fields) == set(data)
    irrelevant = {name for name, kind in result.fields.items() if kind == "irrelevant"}
    assert irrelevant == IRRELEVANT[family] | GENERIC
    assert all(kind in ("mapped", "fixed") for name, kind in result.fields.items()
               if name not in irrelevant)


def _every_field():
    return [(family, name) for family in sorted(FAMILIES) for name in sorted(defaults(family))]


@pytest.mark.parametrize("family, name", _every_field())
def test_every_field_is_mapped_ignored_or_refused_by_name(family, name):
    """Each field of each family's Config().to_dict() set to a value no config has: a field
    irrelevant to the forward pass leaves the variant as it was, every other is refused in one
    line naming the field and the value."""
    data = defaults(family)
    before = tspec.from_hf(data)
    data[name] = "?"
    kind = imported(defaults(family))[0].fields[name]
    if kind == "irrelevant":
        assert tspec.from_hf(data) == before
    else:
        with pytest.raises(ConfigError) as caught:
            tspec.from_hf(data)
        message = str(caught.value)
        assert message.startswith(f'a config dict: {name} = "?" ') and "\n" not in message


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_field_of_a_tiny_config_with_settings_off_their_defaults(family, tmp_path):
    variant = import_variant(tmp_path, config(transformers, family, **TINY[family]))
    assert api.check(variant).ok
    tiny = TINY[family]
    width = tiny.get("n_embd") or tiny["hidden_size"]
    assert variant.dims["d_model"] == width and variant.dims["V"] == 13
    expected = tiny.get("layer_norm_epsilon") or tiny.get("rms_norm_eps") or 1e-12
    assert variant.settings["eps"] == expected


def test_the_choices_of_each_family():
    choices = {family: imported(defaults(family))[0].choices for family in FAMILIES}
    assert choices["gpt2"] == {"arch": "decoder_only", "norm": "pre",
                               "activation": "gelu_tanh", "positional": "learned",
                               "output_embedding": "tied", "head_dims": "split",
                               "attention_bias": "all"}
    assert choices["bert"]["encoder_io"] == "bert"
    assert imported(defaults("bert"), pooler=False)[0].choices["encoder_io"] == "bert_unpooled"
    assert choices["llama"]["attention_bias"] == "none"
    assert choices["mistral"]["attention_window"] == "sliding"
    assert choices["qwen2"]["attention_bias"] == "qkv"
    assert "attention_window" not in choices["qwen2"]
    assert choices["llama"]["key_value_heads"] == "all"         # 32 of 32: no grouping
    assert choices["mistral"]["key_value_heads"] == "grouped"


def test_the_variant_text_names_its_source_and_reads_back(tmp_path):
    text = tspec.from_hf(transformers.MistralConfig())
    assert text.splitlines()[:2] == [
        "# Imported by `tspec import` from a transformers MistralConfig",
        "# (model_type 'mistral', Hugging Face MistralForCausalLM)."]
    variant = import_variant(tmp_path, transformers.MistralConfig())
    assert variant.dims == {"d_model": 4096, "H": 32, "H_kv": 8, "d_ff": 14336, "N": 32,
                            "V": 32000, "W": 4096}
    assert variant.settings == {"eps": 1e-6, "theta": 10000.0}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(transformers.MistralConfig().to_dict()))
    assert tspec.from_hf(tmp_path).splitlines()[0] == \
        f"# Imported by `tspec import` from {path}"


# transformers 4.x config.json files, as the hub holds them
LLAMA_31_FILE = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
    "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_scaling": {
        "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256}
MISTRAL_FILE = {
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.34.0.dev0", "use_cache": True, "vocab_size": 32000}
QWEN2_FILE = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
    "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 131072,
    "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14,
    "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936}
GPT2_FILE = {
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
    "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
    "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
    "resid_pdrop": 0.1, "summary_activation": None, "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "vocab_size": 50257}
BERT_FILE = {
    "architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1,
    "gradient_checkpointing": False, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
    "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
    "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert",
    "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 0,
    "position_embedding_type": "absolute", "transformers_version": "4.6.0.dev0",
    "type_vocab_size": 2, "use_cache": True, "vocab_size": 30522}


def test_a_4x_llama_31_file_and_its_5x_config_give_one_variant(tmp_path):
    file = tmp_path / "config.json"
    file.write_text(json.dumps(LLAMA_31_FILE))
    old = imported(file)[0]
    assert old.settings == {"eps": 1e-5, "theta": 500000.0, "rope_factor": 8.0,
                            "rope_low": 1.0, "rope_high": 4.0, "rope_context": 8192.0}
    new = imported(transformers.LlamaConfig(**{
        k: v for k, v in LLAMA_31_FILE.items() if k not in ("rope_scaling", "rope_theta")},
        rope_parameters=dict(LLAMA_31_FILE["rope_scaling"], rope_theta=500000.0)))[0]
    assert (new.choices, new.dims, new.settings) == (old.choices, old.dims, old.settings)
    variant = import_variant(tmp_path, file)
    assert api.check(variant).ok
    assert variant.dims == {"d_model": 4096, "H": 32, "H_kv": 8, "d_ff": 14336, "N": 32,
                            "V": 128256}


@pytest.mark.parametrize("data", [MISTRAL_FILE, QWEN2_FILE, GPT2_FILE, BERT_FILE],
                         ids=["mistral", "qwen2", "gpt2", "bert"])
def test_4x_files_of_every_family_import_as_their_5x_configs_do(data):
    """Each 4.x file, and the 5.x config transformers makes of it, give one variant."""
    family = data["model_type"]
    fields = {k: v for k, v in data.items() if k not in ("model_type", "torch_dtype",
                                                         "transformers_version", "n_ctx")}
    if "rope_theta" in fields:
        fields["rope_parameters"] = {"rope_type": "default",
                                     "rope_theta": fields.pop("rope_theta")}
    old = imported(data)[0]
    new = imported(config(transformers, family, **fields))[0]
    assert (new.choices, new.dims, new.settings) == (old.choices, old.dims, old.settings)


def test_qwen2_keeps_its_window_size_when_the_window_is_off_and_slides_when_on():
    assert "W" not in imported(QWEN2_FILE)[0].dims
    on = imported({**QWEN2_FILE, "use_sliding_window": True, "max_window_layers": 0,
                   "sliding_window": 4096})[0]
    assert (on.choices["attention_window"], on.dims["W"]) == ("sliding", 4096)
    with raises(ConfigError, "a config dict: max_window_layers = 21 of 24 layers mixes full "
                             "and sliding attention, which is not supported"):
        imported({**QWEN2_FILE, "use_sliding_window": True, "max_window_layers": 21})


def test_llama_options_biases_head_dim_and_tied_embeddings():
    result = imported(transformers.LlamaConfig(
        hidden_size=64, num_attention_heads=4, head_dim=8, attention_bias=True, mlp_bias=True,
        tie_word_embeddings=True).to_dict())[0]
    assert {k: result.choices[k] for k in ("attention_bias", "feed_forward_bias",
                                           "output_embedding", "head_dims")} == {
        "attention_bias": "all", "feed_forward_bias": "all", "output_embedding": "tied",
        "head_dims": "free"}
    assert (result.dims["d_k"], result.dims["d_v"]) == (8, 8)


@pytest.mark.parametrize("change, message", [
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0}},
     'rope_parameters.rope_type = "yarn" is not supported'),
    ({"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}},
     'rope_parameters.rope_type = "linear" is not supported'),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                          "partial_rotary_factor": 0.5}},
     "rope_parameters.partial_rotary_factor = 0.5 is not supported"),
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                          "low_freq_factor": 1.0, "high_freq_factor": 4.0}},
     ('rope_parameters.original_max_position_embeddings is missing; rope_type "llama3" '
      "needs it")),
    ({"hidden_act": "gelu"}, 'hidden_act = "gelu" is not supported'),
    ({"num_hidden_layers": 0}, "num_hidden_layers = 0 is not a positive integer"),
    ({"rms_norm_eps": -1.0}, "rms_norm_eps = -1.0 is not a positive number"),
    ({"tie_word_embeddings": "yes"}, 'tie_word_embeddings = "yes" is not true or false'),
    ({"is_encoder_decoder": True}, "is_encoder_decoder = true is not supported"),
    ({"quantum": 3}, 'quantum = 3 is not a field tspec knows for model_type "llama"'),
    # Llama's attention has no window, whatever the file says
    ({"sliding_window": 3}, ('sliding_window = 3 is not a field tspec knows for model_type '
                            '"llama"')),
])
def test_llama_refusals_name_the_field_and_its_value(change, message):
    with raises(ConfigError, f"a config dict: {message}"):
        tspec.from_hf({**defaults("llama"), **change})


def test_the_4x_spelling_of_a_refused_rope_type_is_named_as_written():
    with raises(ConfigError, 'a config dict: rope_scaling.rope_type = "yarn" is not supported'):
        tspec.from_hf({**LLAMA_31_FILE, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    with raises(ConfigError, 'a config dict: rope_scaling.type = "dynamic" is not supported'):
        tspec.from_hf({**MISTRAL_FILE, "rope_scaling": {"type": "dynamic", "factor": 2.0}})


@pytest.mark.parametrize("family, change, message", [
    ("gpt2", {"scale_attn_weights": False}, "scale_attn_weights = false is not supported"),
    ("gpt2", {"activation_function": "swish"}, 'activation_function = "swish" is not supported'),
    ("gpt2", {"add_cross_attention": True}, "add_cross_attention = true is not supported"),
    ("bert", {"position_embedding_type": "relative_key"},
     'position_embedding_type = "relative_key" is not supported'),
    ("bert", {"is_decoder": True}, "is_decoder = true is not supported"),
    ("mistral", {"sliding_window": 0}, "sliding_window = 0 is not a positive integer"),
    ("mistral", {"layer_types": ["full_attention", "sliding_attention"], "num_hidden_layers": 2},
     ('layer_types = ["full_attention", "sliding_attention"] mixes full and sliding '
      "attention, which is not supported")),
    ("qwen2", {"layer_types": ["sliding_attention"] * 2, "num_hidden_layers": 2},
     "layer_types asks for sliding attention, but sliding_window is not set"),
])
def test_other_families_refusals(family, change, message):
    with raises(ConfigError, f"a config dict: {message}"):
        tspec.from_hf({**defaults(family), **change})


def test_unreadable_and_unsupported_configs(tmp_path):
    with raises(ConfigError, 'a config dict: model_type = "t5" is not supported; tspec '
                             "imports gpt2, bert, llama, mistral, qwen2 configs"):
        tspec.from_hf({"model_type": "t5"})
    with raises(UsageError, f"{tmp_path}: the folder holds no config.json"):
        tspec.from_hf(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "gpt2",\n')
    with raises(ConfigError, f"{bad}:2:1: malformed JSON: Expecting property name enclosed in "
                             "double quotes"):
        tspec.from_hf(bad)
    bad.write_text("[1]")
    with raises(ConfigError, f"{bad}: a config is a JSON object, got list"):
        tspec.from_hf(bad)


def test_a_sliding_window_longer_than_the_sequence_is_legal(tmp_path):
    variant = import_variant(tmp_path, config(transformers, "mistral",
                                              **dict(TINY["mistral"], sliding_window=1000)))
    assert api.check(variant).ok
    result = api.run(variant, ["T_dec=5"], dtype="float64")
    assert result.outputs["logits"].shape[1] == 5


# A config's architectures are of its model_type (issue 31, item 1): a RoBERTa config whose
# model_type was edited to bert imported as BERT, and computes otherwise (its positions start
# past the padding index)
@pytest.mark.parametrize("base, change, message", [
    ("roberta", {"model_type": "bert", "architectures": ["RobertaModel"]},
     ('architectures = ["RobertaModel"] is not of model_type "bert", whose classes are '
      "BertModel, BertLMHeadModel and BertFor...; the config is of another model than its "
      "model_type says")),
    ("roberta", {"model_type": "bert", "architectures": ["BertModel", "XLMRobertaForMaskedLM"]},
     ('architectures = ["BertModel", "XLMRobertaForMaskedLM"] is not of model_type "bert", '
      "whose classes are BertModel, BertLMHeadModel and BertFor...; the config is of another "
      "model than its model_type says")),
    ("llama", {"architectures": ["MistralForCausalLM"]},
     ('architectures = ["MistralForCausalLM"] is not of model_type "llama", whose classes are '
      "LlamaModel and LlamaFor...; the config is of another model than its model_type says")),
    ("qwen2", {"architectures": ["Qwen2MoeForCausalLM"]},
     ('architectures = ["Qwen2MoeForCausalLM"] is not of model_type "qwen2", whose classes are '
      "Qwen2Model and Qwen2For...; the config is of another model than its model_type says")),
    ("bert", {"architectures": "BertModel"},
     'architectures = "BertModel" is not a list of model class names'),
    ("bert", {"architectures": [3]},
      "architectures = [3] is not a list of model class names"),
    ("bert", {"model_type": ["bert"]},
     ('model_type = ["bert"] is not supported; tspec imports gpt2, bert, llama, mistral, qwen2 '
      "configs")),
    ("bert", {"model_type": {"bert": 1}},
     ('model_type = {"bert": 1} is not supported; tspec imports gpt2, bert, llama, mistral, '
      "qwen2 configs")),
], ids=["roberta", "mixed", "llama-mistral", "qwen2-moe", "string", "number", "list", "dict"])
def test_a_config_whose_architectures_are_not_of_its_model_type_is_refused(base, change,
                                                                          message):
    data = transformers.RobertaConfig().to_dict() if base == "roberta" else defaults(base)
    with raises(ConfigError, f"a config dict: {message}"):
        tspec.from_hf({**data, **change})


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_classes_of_each_family_import(family):
    """Each model_type's own classes, the base model and its heads, import; as do none."""
    base = {"bert": "BertModel", "gpt2": "GPT2Model", "llama": "LlamaModel",
            "mistral": "MistralModel", "qwen2": "Qwen2Model"}[family]
    heads = [FAMILIES[family][1], base, base.replace("Model", "ForSequenceClassification")]
    for architectures in ([], None, heads):
        tspec.from_hf({**defaults(family), "architectures": architectures})
        assert getattr(transformers, heads[-1])      # a class transformers has


# Issue 32: every number of a config is bounded before arithmetic or conversion (an integer of
# 5,001 digits, 10**400 for a setting: internal errors), NumPy's scalars are numbers, and the
# API's misuses are tspec's own errors

GPT2_TINY = {"model_type": "gpt2", "n_embd": 16, "n_head": 4, "n_layer": 2, "vocab_size": 13,
             "n_positions": 16}
LLAMA_TINY = {"model_type": "llama", "hidden_size": 16, "num_attention_heads": 4,
              "num_hidden_layers": 2, "vocab_size": 13, "intermediate_size": 24}
SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
BIG = 10 ** 400
HUGE = 10 ** 5000


@pytest.mark.parametrize("data, message", [
    ({**GPT2_TINY, "layer_norm_epsilon": BIG},
     "layer_norm_epsilon = ~1.000e400 is not a positive number"),
    ({**LLAMA_TINY, "rope_theta": BIG}, "rope_theta = ~1.000e400 is not a positive number"),
    ({**LLAMA_TINY, "rope_parameters": {"rope_type": "default", "rope_theta": BIG}},
     "rope_parameters.rope_theta = ~1.000e400 is not a positive number"),
    ({**LLAMA_TINY, "rope_scaling": {**SCALING, "factor": BIG}},
     "rope_scaling.factor = ~1.000e400 is not a positive number"),
    ({**GPT2_TINY, "n_embd": HUGE}, ("n_embd = ~1.000e5000 is not a positive integer of at "
                                    "most 40 digits")),
    ({**GPT2_TINY, "n_layer": 10 ** 40}, ("n_layer = 100000000000000000000000000000000000000"
                                         "00 is not a positive integer of at most 40 digits")),
    ({**GPT2_TINY, "n_embd": 10 ** 40 - 1},
     ("n_inner is not set, and d_ff = 4 * n_embd = 39999999999999999999999999999999999999996 "
     "has more than 40 digits, the most a dim may have")),
    ({**GPT2_TINY, "quantum": HUGE},
     'quantum = ~1.000e5000 is not a field tspec knows for model_type "gpt2"'),
    ({**GPT2_TINY, "layer_types": [HUGE]},
     'layer_types = [~1.000e5000] is not a field tspec knows for model_type "gpt2"'),
    ({**GPT2_TINY, "model_type": ["gpt2"]},
     ('model_type = ["gpt2"] is not supported; tspec imports gpt2, bert, llama, mistral, qwen2 '
     "configs")),
], ids=["eps", "theta", "theta-5x", "llama3-factor", "digits", "41-digits", "derived",
        "irrelevant-field", "nested", "model-type-list"])
def test_a_number_past_what_a_setting_or_dim_holds_is_refused_by_name(data, message):
    with raises(ConfigError, f"a config dict: {message}"):
        tspec.from_hf(data)


@pytest.mark.parametrize("text, place, message", [
    ('{"model_type": "gpt2", "n_embd": ' + "1" * 5001 + "}", ":1:34",
     "an integer of 5,001 digits; tspec reads integers of at most 1,000"),
    ('{\n  "model_type": "gpt2",\n  "layer_norm_epsilon": 1' + "0" * 400 + "\n}", "",
     "layer_norm_epsilon = ~1.000e400 is not a positive number"),
])
def test_a_config_file_of_huge_numbers_is_refused(tmp_path, text, place, message):
    path = tmp_path / "config.json"
    path.write_text(text)
    with raises(ConfigError, f"{path}{place}: {message}"):
        tspec.from_hf(path)


def test_numpy_scalars_are_numbers():
    np = pytest.importorskip("numpy")
    data = {**GPT2_TINY, "n_embd": np.int64(16), "n_head": np.int32(4),
            "layer_norm_epsilon": np.float32(1e-5), "tie_word_embeddings": np.bool_(True),
            "n_inner": np.uint16(64)}
    text = tspec.from_hf(data)
    assert text == tspec.from_hf({**GPT2_TINY, "layer_norm_epsilon": float(np.float32(1e-5)),
                                  "n_inner": 64})
    rope = {**LLAMA_TINY, "rope_scaling": {**SCALING, "factor": np.float64(8.0)}}
    assert "rope_factor = 8.0" in tspec.from_hf(rope)


@pytest.mark.parametrize("call, error, message", [
    (lambda tmp: tspec.from_hf(GPT2_TINY, out=42), UsageError,
     "--out is a str or a path object, got int 42"),
    (lambda tmp: tspec.from_hf(GPT2_TINY, out=f"{tmp}/a\0b.toml"), UsageError,
     "--out '{tmp}/a\\x00b.toml' holds a NUL character, which no file name holds"),
    (lambda tmp: tspec.from_hf(f"{tmp}/a\0b.json"), UsageError,
     "a config path '{tmp}/a\\x00b.json' holds a NUL character, which no file name holds"),
    (lambda tmp: tspec.from_hf(3.5), UsageError,
     "a config is a path, a dict or a transformers PretrainedConfig, got float"),
    (lambda tmp: tspec.load(f"{tmp}/a\0b.toml"), UsageError,
     ("a spec or variant path '{tmp}/a\\x00b.toml' holds a NUL character, which no file name "
     "holds")),
    (lambda tmp: api.read_spec(f"{tmp}/a\0b.tspec"), UsageError,
     "a spec path '{tmp}/a\\x00b.tspec' holds a NUL character, which no file name holds"),
    (lambda tmp: tspec.load(42), UsageError,
     ("a spec or variant is a name, a path, a config dict or a transformers PretrainedConfig, "
     "got int")),
    (lambda tmp: tspec.load({**GPT2_TINY, "n_embd": HUGE}), ConfigError,
     "a config dict: n_embd = ~1.000e5000 is not a positive integer of at most 40 digits"),
    (lambda tmp: tspec.check("base", 42), UsageError,
     "settings are a list of NAME=VALUE strings, got int"),
    (lambda tmp: tspec.check("base", "H=8"), UsageError,
     "settings are a list of NAME=VALUE strings, got the str 'H=8'"),
    (lambda tmp: tspec.check("base", [8]), UsageError,
     "settings are a list of NAME=VALUE strings, got 8 among them"),
    (lambda tmp: tspec.check("base", time_limit="x"), UsageError,
     "a time limit is a positive number of seconds, not 'x'"),
], ids=["out-int", "out-nul", "config-nul", "config-float", "load-nul", "read-spec-nul",
        "load-int", "load-huge", "settings-int", "settings-str", "settings-items",
        "time-limit-str"])
def test_the_api_refuses_a_misuse_with_its_own_error(tmp_path, call, error, message):
    with raises(error, message.replace("{tmp}", str(tmp_path))):
        call(tmp_path)


def test_a_time_limit_may_be_a_numpy_number():
    np = pytest.importorskip("numpy")
    assert tspec.check("base", time_limit=np.float32(60)).ok
    assert tspec.check("base", time_limit=np.int64(60)).ok


def test_an_imported_variant_is_placed_at_the_lines_of_its_config(tmp_path):
    # issue 32: its places were the lines of the TOML made in memory, named as config.json's
    # (`config.json:7: [dims] d_model: a value of more than 40 digits`, line 7 vocab_size)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**GPT2_TINY, "layer_norm_epsilon": 1e-6}, indent=2))
    lines = {name: number for number, line in enumerate(path.read_text().splitlines(), 1)
             for name in GPT2_TINY | {"layer_norm_epsilon": 0} if f'"{name}"' in line}
    variant = api.load(path)
    assert variant.places["d_model"] == (lines["n_embd"], "d_model = 16")
    assert variant.places["V"] == (lines["vocab_size"], "V = 13")
    assert variant.places["d_ff"] == (lines["n_embd"], "d_ff = 64")        # 4 * n_embd
    assert variant.places["arch"] == (None, 'arch = "decoder_only"')        # no field gives it
    assert variant.setting_places["eps"] == (lines["layer_norm_epsilon"], "eps = 1e-06")
    assert api.load({**GPT2_TINY}).places["d_model"] == (None, "d_model = 16")
    path.write_text(json.dumps({**GPT2_TINY, "n_embd": 10 ** 40}, indent=2))
    with raises(ConfigError, f"{path}: n_embd = 10000000000000000000000000000000000000000 is "
                             "not a positive integer of at most 40 digits"):
        api.load(path)
