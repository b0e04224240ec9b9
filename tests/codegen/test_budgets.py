"""Generated model modules lead with the model and stay short (issue 22, step 3): the first
parameter type or block function within the first 85 lines, and at most so many lines per
NumPy module (its runtime, _runtime.py, apart); at 3215fda they were 931 to 1,611 lines. (80
and 805 for encoder_decoder until the module docstring said truly what the entry functions
check on every call, and prefill's what its cache holds: issue 31, item 5.)"""

import re

import pytest

from tspec import api
from tspec.codegen.generate import BUILTIN_MODELS

GENERATED = api.checkout() / "generated"
FIRST_DEFINITION = 85
# the most lines each NumPy model module may take
LINES = {"bert": 465, "decoder_only": 668, "encoder_decoder": 815, "encoder_only": 443,
         "llama": 737}


@pytest.mark.parametrize("backend", ["numpy", "cupy"])
@pytest.mark.parametrize("name", sorted(LINES))
def test_a_model_module_starts_with_the_model(backend, name):
    lines = (GENERATED / backend / f"{name}.py").read_text(encoding="utf-8").splitlines()
    first = next(number for number, line in enumerate(lines, 1)
                 if re.match(r"class \w+Params\(TypedDict\):|def \w+\(", line))
    assert first <= FIRST_DEFINITION, (name, first)


@pytest.mark.parametrize("name", sorted(LINES))
def test_a_numpy_model_module_keeps_to_its_budget(name):
    lines = (GENERATED / "numpy" / f"{name}.py").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= LINES[name], (name, len(lines))


def test_the_budgets_cover_every_model_module():
    """Every built-in model (a variant's module that `tspec generate VARIANT` writes beside
    them is the user's)."""
    assert sorted(BUILTIN_MODELS) == sorted(LINES)
