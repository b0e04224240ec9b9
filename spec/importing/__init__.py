"""Hugging Face configs in, variants out: ``tspec import CONFIG`` and ``tspec.from_hf``.

The pipeline, a module a step: ``source`` reads a config (a ``config.json``, a folder holding
one, a dict or a ``PretrainedConfig``) into a plain dict; ``fields`` accounts for every key of
it (mapped, irrelevant to the forward pass, or refused by name and value); ``rope`` reads the
rotary settings of both transformers 4.x (``rope_theta``, ``rope_scaling``) and 5.x
(``rope_parameters``); ``families`` maps each supported ``model_type`` to the spec's choices,
dims and settings; ``writing`` lays the result out as variant TOML.
"""

from tspec.importing.convert import from_hf, imported

__all__ = ["from_hf", "imported"]
