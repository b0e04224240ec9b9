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
])
def test_a_config_it_cannot_import_is_one_line_and_exit_2(capsys, tmp_path, data, message):
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
