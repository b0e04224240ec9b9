"""The manual's example from a Hugging Face config to logits (docs/manual/importing.md), run
as written: a small Llama 3.1 (rope scaling in all three bands) saved by transformers as
Meta-Llama-3.1-8B/ (config.json and safetensors shards), imported, compiled and loaded; its
logits against the model's own."""

import re
import runpy

import numpy as np
import pytest
from support.hf_configs import LLAMA31_TINY

import tspec
from tspec import api


def manual_example() -> str:
    text = (api.checkout() / "docs" / "manual" / "importing.md").read_text(encoding="utf-8")
    start = text.index("## From a config to logits")
    (block,) = re.findall(r"```python\n(.*?)```", text[start:], re.DOTALL)[:1]
    return block


@pytest.mark.reference
def test_the_manual_goes_from_a_config_to_the_models_logits(tmp_path, monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{**LLAMA31_TINY, "vocab_size": 64})
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(tmp_path / "Meta-Llama-3.1-8B", max_shard_size="20KB")
    assert len(list((tmp_path / "Meta-Llama-3.1-8B").glob("*.safetensors"))) > 1
    monkeypatch.chdir(tmp_path)
    (tmp_path / "example.py").write_text(manual_example())      # the manual's, as written
    example = runpy.run_path(str(tmp_path / "example.py"))
    with torch.no_grad():
        theirs = model(torch.tensor(example["ids"])).logits.numpy()
    assert example["logits"].shape == theirs.shape == (1, 5, 64)
    np.testing.assert_allclose(example["logits"], theirs, rtol=0, atol=5e-5)
    assert capsys.readouterr().out == f"{theirs[0, -1].argmax()}\n"
    assert "rope_factor = 8.0" in (tmp_path / "llama31.toml").read_text()


# Configs whose checkpoints hold what the plain Llama's does not: every bias Llama's config can
# ask for, and a tied output projection saved as lm_head too (Llama 3.2 1B, Qwen2 0.5B)
CHECKPOINTS = {
    "llama-biases": ("LlamaConfig", "LlamaForCausalLM",
                     {"attention_bias": True, "mlp_bias": True}),
    "llama-tied": ("LlamaConfig", "LlamaForCausalLM", {"tie_word_embeddings": True}),
    "qwen2-tied": ("Qwen2Config", "Qwen2ForCausalLM", {"tie_word_embeddings": True}),
}


@pytest.mark.reference
@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_a_saved_checkpoint_runs_from_its_folder_alone(name, tmp_path):
    """A model saved by transformers runs from its folder alone: tspec.compile(folder) and
    tspec.load_weights(folder, folder), against the model's own logits, with padding."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config_class, model_class, fields = CHECKPOINTS[name]
    torch.manual_seed(1)
    config = getattr(transformers, config_class)(
        vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, **fields)
    model = getattr(transformers, model_class)(config).eval()
    for parameter in model.parameters():            # biases off zero, so a lost one shows
        parameter.data.normal_(0, 0.2)
    if fields.get("tie_word_embeddings"):
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    folder = tmp_path / name
    model.save_pretrained(folder)
    module = tspec.compile(folder)
    params = tspec.load_weights(folder, folder)
    ids = np.random.default_rng(2).integers(0, 64, (2, 6))
    keep = np.ones(ids.shape, dtype=bool)
    keep[1, 4:] = False
    ours, _ = module.transformer(ids, keep, params)
    with torch.no_grad():
        theirs = model(torch.tensor(ids), attention_mask=torch.tensor(keep)).logits.numpy()
    np.testing.assert_allclose(ours[0], theirs[0], rtol=0, atol=5e-5)
    np.testing.assert_allclose(ours[1, :4], theirs[1, :4], rtol=0, atol=5e-5)


@pytest.mark.reference
def test_a_bert_without_its_pooler_loads_into_the_unpooled_variant(tmp_path, capsys):
    """BertModel(add_pooling_layer=False), imported with --no-pooler, loads and runs (before:
    no family mapped its names); a pooled checkpoint loads into it with the pooler named as
    unused, and into the pooled variant an unpooled one is refused, saying how to import it.
    Shards are found by their folder or by their index."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from support.command_line import run

    from tspec.execution.weights import WeightsError
    torch.manual_seed(3)
    config = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=24,
                                     max_position_embeddings=16)
    model = transformers.BertModel(config, add_pooling_layer=False).eval()
    model.save_pretrained(tmp_path / "bert", max_shard_size="20KB")
    variant = tmp_path / "bert_unpooled.toml"
    tspec.from_hf(tmp_path / "bert", out=variant, pooler=False)
    for weights in (tmp_path / "bert", tmp_path / "bert" / "model.safetensors.index.json"):
        params = tspec.load_weights(variant, weights)
        ids = np.random.default_rng(4).integers(0, 64, (2, 6))
        keep = np.ones(ids.shape, dtype=bool)
        ours = tspec.compile(variant).transformer(ids, keep, np.zeros_like(ids), params)
        with torch.no_grad():
            theirs = model(torch.tensor(ids)).last_hidden_state.numpy()
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=5e-5)
    with pytest.raises(WeightsError) as raised:
        tspec.load_weights(tmp_path / "bert", tmp_path / "bert")
    assert str(raised.value).endswith(
        "BERT: checkpoint has no pooler (pooler.dense.weight), which the variant has "
        "(encoder_io=bert): import the config with --no-pooler (encoder_io=bert_unpooled)")
    transformers.BertModel(config).save_pretrained(tmp_path / "pooled")
    params = tspec.load_weights(variant, tmp_path / "pooled")
    capsys.readouterr()                             # transformers' progress bars
    assert params.unused == {"pooler.dense.bias": "a pooler the variant has not",
                             "pooler.dense.weight": "a pooler the variant has not"}
    code, out, err = run(capsys, "run", str(variant), "--weights", str(tmp_path / "pooled"),
                         "--set", "T=4")
    assert (code, err) == (0, "")
    assert f"weights from {tmp_path / 'pooled'}" in out
