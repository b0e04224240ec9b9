"""The README's example from a Hugging Face config to logits, run as written: a small Llama 3.1
(rope scaling in all three bands) saved by transformers as Meta-Llama-3.1-8B/ (config.json
and safetensors shards), imported, compiled and loaded; its logits against the model's own."""

import re
import runpy

import numpy as np
import pytest
from support.hf_configs import LLAMA31_TINY

from tspec import api


def readme_example() -> str:
    text = (api.checkout() / "README.md").read_text(encoding="utf-8")
    start = text.index("From a config to logits")
    (block,) = re.findall(r"```python\n(.*?)```", text[start:], re.DOTALL)[:1]
    return block


@pytest.mark.reference
def test_the_readme_goes_from_a_config_to_the_models_logits(tmp_path, monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{**LLAMA31_TINY, "vocab_size": 64})
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(tmp_path / "Meta-Llama-3.1-8B", max_shard_size="20KB")
    assert len(list((tmp_path / "Meta-Llama-3.1-8B").glob("*.safetensors"))) > 1
    monkeypatch.chdir(tmp_path)
    (tmp_path / "example.py").write_text(readme_example())      # our README, as written
    example = runpy.run_path(str(tmp_path / "example.py"))
    with torch.no_grad():
        theirs = model(torch.tensor(example["ids"])).logits.numpy()
    assert example["logits"].shape == theirs.shape == (1, 5, 64)
    np.testing.assert_allclose(example["logits"], theirs, rtol=0, atol=5e-5)
    assert capsys.readouterr().out == f"{theirs[0, -1].argmax()}\n"
    assert "rope_factor = 8.0" in (tmp_path / "llama31.toml").read_text()
