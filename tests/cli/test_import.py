"""`tspec import CONFIG [--out FILE]`: a Hugging Face config.json (or a folder holding one) as
variant TOML, on standard output or in a file; a config it cannot import is one line on
stderr and exit 2."""

import json

import pytest
from support.command_line import run

from tspec import api

transformers = pytest.importorskip("transformers")


def _config(tmp_path, data) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_import_prints_the_variant_and_writes_it_with_out(capsys, tmp_path):
    path = _config(tmp_path, transformers.Qwen2Config(num_hidden_layers=2).to_dict())
    code, out, err = run(capsys, "import", path)
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == f"# Imported by `tspec import` from {path}"
    assert 'attention_bias = "qkv"' in out.splitlines()
    target = tmp_path / "qwen2.toml"
    code, out2, err = run(capsys, "import", str(tmp_path), "--out", str(target))
    assert (code, out2, err) == (0, f"wrote {target}\n", "")
    assert target.read_text() == out
    code, out, err = run(capsys, "check", str(target))
    assert code == 0 and "proved" in out


def test_import_without_the_pooler(capsys, tmp_path):
    path = _config(tmp_path, transformers.BertConfig().to_dict())
    code, _out, _ = run(capsys, "import", path, "--no-pooler", "--out", str(tmp_path / "b.toml"))
    assert code == 0
    variant = api.load(tmp_path / "b.toml")
    assert variant.choices["encoder_io"] == "bert_unpooled"
    assert variant.settings == {"eps": 1e-12}


@pytest.mark.parametrize("data, message", [
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
      "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 10,
      "rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
     'rope_scaling.rope_type = "yarn" is not supported'),
    ({"model_type": "gpt2", "n_layer": 2, "scale_attn_weights": False},
     "scale_attn_weights = false is not supported"),
    ({"model_type": "t5"}, ('model_type = "t5" is not supported; tspec imports gpt2, bert, '
                           "llama, mistral, qwen2 configs")),
    # a RoBERTa config relabelled bert (before: imported as BERT), and a model_type no family
    # is named by (before: a TypeError traceback)
    ("roberta", ('architectures = ["RobertaForMaskedLM"] is not of model_type "bert", whose '
                 "classes are BertModel, BertLMHeadModel and BertFor...; the config is of "
                 "another model than its model_type says")),
    ({"model_type": ["llama"]}, ('model_type = ["llama"] is not supported; tspec imports '
                                 "gpt2, bert, llama, mistral, qwen2 configs")),
], ids=["yarn", "unscaled", "t5", "roberta", "list"])
def test_a_config_it_cannot_import_is_one_line_and_exit_2(capsys, tmp_path, data, message):
    if data == "roberta":
        data = {**transformers.RobertaConfig(architectures=["RobertaForMaskedLM"]).to_dict(),
                "model_type": "bert"}
    path = _config(tmp_path, data)
    code, out, err = run(capsys, "import", path)
    assert (code, out) == (2, "")
    assert err == f"tspec: error: {path}: {message}\n"


def test_a_missing_config_and_an_out_folder_are_usage_errors(capsys, tmp_path):
    code, _, err = run(capsys, "import", str(tmp_path))
    assert (code, err) == (2, f"tspec: error: {tmp_path}: the folder holds no config.json\n")
    path = _config(tmp_path, transformers.GPT2Config().to_dict())
    code, _, err = run(capsys, "import", path, "--out", str(tmp_path))
    assert (code, err) == (2, (f"tspec: error: --out {tmp_path} is a folder; name the variant "
                              "file\n"))


TINY_LLAMA = {"vocab_size": 64, "hidden_size": 16, "intermediate_size": 24,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


def _saved(folder, **fields):
    transformers.LlamaConfig(**TINY_LLAMA | fields).save_pretrained(folder)
    return str(folder)


def test_every_command_takes_a_config_as_tspec_import_reads_it(capsys, tmp_path):
    """A config.json, or a folder holding one, is a variant wherever one is taken (check,
    shapes, run, generate), named after its folder; `tspec check config.json` read it as a
    spec before (':1:1: unexpected character')."""
    folder = _saved(tmp_path / "tiny_llama")
    for target in (folder, f"{folder}/config.json"):
        code, out, err = run(capsys, "check", target)
        assert (code, err) == (0, "")
        assert out.splitlines()[0] == f"== tiny_llama ({folder}/config.json)"
    code, out, err = run(capsys, "run", folder, "--set", "T_dec=4")
    assert (code, err) == (0, "")
    assert "logits                  2 x 4 x 64" in out.splitlines()
    code, out, err = run(capsys, "generate", folder, "--out", str(tmp_path / "models"))
    assert (code, err) == (0, "")
    assert (tmp_path / "models" / "tiny_llama.py").is_file()


def test_a_config_object_or_dict_is_a_variant_in_python(tmp_path):
    config = transformers.LlamaConfig(**TINY_LLAMA)
    variant = api.load(config)
    assert (variant.name, variant.dims["d_model"], variant.choices["positional"]) == (
        "llama", 16, "rotary")
    assert api.check(config.to_dict()).ok
    assert api.load(config.to_dict()).dims == variant.dims


def test_diff_of_two_imports_names_exactly_the_fields_that_differ(capsys, tmp_path):
    a = _saved(tmp_path / "a", rope_theta=500.0, num_hidden_layers=2)
    b = _saved(tmp_path / "b", rope_theta=700.0, num_hidden_layers=3, rms_norm_eps=1e-5)
    code, out, err = run(capsys, "diff", a, b, "--format", "json")
    assert (code, err) == (1, "")
    changes = json.loads(out)
    assert changes["choices"] == []
    assert changes["dims"] == [{"name": "N", "a": 2, "b": 3}]
    assert changes["settings"] == [{"name": "eps", "a": 1e-06, "b": 1e-05},
                                   {"name": "theta", "a": 500.0, "b": 700.0}]
    code, out, err = run(capsys, "diff", a, _saved(tmp_path / "c", rope_theta=500.0))
    assert (code, err) == (0, "")


def test_a_config_that_cannot_be_imported_stops_every_command_in_one_line(capsys, tmp_path):
    folder = _saved(tmp_path / "yarn", rope_parameters={"rope_type": "yarn", "factor": 4.0,
                                                          "rope_theta": 10000.0})
    for command in ("check", "run", "shapes"):
        code, out, err = run(capsys, command, folder)
        assert (code, out) == (2, "")
        assert err == (f'tspec: error: {folder}/config.json: rope_parameters.rope_type = "yarn" '
                       "is not supported\n"), command


def test_a_folder_named_as_hugging_face_names_is_a_module_name(capsys, tmp_path):
    """Meta-Llama-3.1-8B/ is variant Meta_Llama_3_1_8B, whose module `generate` writes
    (before: refused, with advice to rename config.json); a folder without config.json is
    named as such."""
    folder = _saved(tmp_path / "Meta-Llama-3.1-8B")
    code, out, err = run(capsys, "generate", folder, "--out", str(tmp_path / "models"))
    assert (code, err) == (0, "")
    assert (tmp_path / "models" / "Meta_Llama_3_1_8B.py").is_file()
    (tmp_path / "empty").mkdir()
    code, out, err = run(capsys, "check", str(tmp_path / "empty"))
    assert (code, out) == (2, "")
    assert err == (f"tspec: error: {tmp_path / 'empty'} is a folder without config.json: give "
                   "a spec (.tspec), a variant (.toml) or a Hugging Face config (config.json, "
                   "or a folder holding one)\n")
