"""Published models as variants: their parameter counts, reproduced exactly."""

import numpy as np
import pytest

from codegen import weights
from spec import api

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
