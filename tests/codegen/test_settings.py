"""The run-time settings travel as one record (issue 33, item 6): an entry function takes each
as a keyword argument and makes the module's Settings from them; a block that reads one takes
the record after its params, SETTINGS (the defaults) when called alone."""

import inspect
from pathlib import Path

import numpy as np
import pytest

from tspec.execution.loading import load_module

GENERATED = Path(__file__).resolve().parents[2] / "generated" / "numpy"


@pytest.fixture(scope="module")
def llama():
    return load_module(GENERATED / "llama.py")


def rms_norm(X, gamma, eps):
    return X / np.sqrt((X * X).mean(-1, keepdims=True) + eps) * gamma


def test_a_block_reads_its_settings_from_the_record(llama):
    X = np.random.default_rng(0).standard_normal((2, 3, 4)) * 1e-2
    gamma = np.linspace(0.5, 2, 4)
    np.testing.assert_allclose(llama.normalize(X, {"gamma": gamma}),
                               rms_norm(X, gamma, 1e-5), rtol=1e-12)
    np.testing.assert_allclose(llama.normalize(X, {"gamma": gamma}, llama.Settings(eps=0.5)),
                               rms_norm(X, gamma, 0.5), rtol=1e-12)
    with pytest.raises(TypeError, match="unexpected keyword argument 'eps'"):
        llama.normalize(X, {"gamma": gamma}, eps=0.5)       # not silently the default


def test_the_defaults_are_the_entry_functions_keywords(llama):
    keywords = inspect.signature(llama.transformer).parameters
    assert llama.SETTINGS == llama.Settings()
    assert llama.SETTINGS._asdict() == {name: keywords[name].default
                                        for name in llama.Settings._fields}
    # a block that reads no setting, and no callee does, takes none
    assert "settings" not in inspect.signature(llama.feed_forward).parameters
    assert inspect.signature(llama.decoder).parameters["settings"].default is llama.SETTINGS
