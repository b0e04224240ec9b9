"""Rotary settings from a config: theta and Llama 3.1's scaling, from transformers 4.x's
``rope_theta`` and ``rope_scaling`` or 5.x's ``rope_parameters``; every other rope type
(linear, dynamic, yarn, longrope...) refused by name."""

from tspec.importing.fields import Fields
from tspec.inputs import real

# the llama3 scaling's fields and the settings they become (spec.ops.catalogue.ROPE_SCALING)
LLAMA3 = {"factor": "rope_factor", "low_freq_factor": "rope_low",
          "high_freq_factor": "rope_high", "original_max_position_embeddings": "rope_context"}


def rope_settings(fields: Fields) -> dict[str, float]:
    """theta, and the rope_* scaling settings where the config scales (rope_type llama3)."""
    settings = {}
    parameters = fields.raw("rope_parameters")
    scaling = fields.raw("rope_scaling")
    theta = fields.number("rope_theta", 10000.0) if fields.has("rope_theta") else None
    if parameters is not None and scaling is not None and parameters != scaling:
        raise fields.error("rope_parameters and rope_scaling are both set, and differ")
    table, name = (parameters, "rope_parameters") if parameters is not None else \
        (scaling, "rope_scaling")
    if table is not None and not isinstance(table, dict):
        raise fields.refuse(name, table, "is not a table")
    table = dict(table or {})
    if "rope_theta" in table:
        value = table.pop("rope_theta")
        if not _positive(value):
            raise fields.refuse(f"{name}.rope_theta", value, "is not a positive number")
        if theta is not None and float(value) != theta:
            raise fields.error(f"rope_theta = {theta} and {name}.rope_theta = {value} differ")
        theta = float(value)
    settings["theta"] = 10000.0 if theta is None else theta
    kind_key = "rope_type" if "rope_type" in table else "type"      # 4.x wrote either
    kind = table.pop(kind_key, "default")
    table.pop("type" if kind_key == "rope_type" else "rope_type", None)
    if kind == "default":
        pass
    elif kind == "llama3":
        for key, setting in LLAMA3.items():
            if key not in table:
                raise fields.error(f"{name}.{key} is missing; rope_type \"llama3\" needs it")
            value = table.pop(key)
            if not _positive(value):
                raise fields.refuse(f"{name}.{key}", value, "is not a positive number")
            settings[setting] = float(value)
        if not settings["rope_high"] > settings["rope_low"]:
            raise fields.error(f"{name}.high_freq_factor = {settings['rope_high']} is not above "
                               f"low_freq_factor = {settings['rope_low']}")
    else:
        raise fields.refuse(f"{name}.{kind_key}", kind)
    partial = table.pop("partial_rotary_factor", 1.0)
    if partial != 1.0:
        raise fields.refuse(f"{name}.partial_rotary_factor", partial)
    for key, value in table.items():
        raise fields.refuse(f"{name}.{key}", value, f"is not a field of rope_type {kind!r}"
                            if kind != "default" else "is not supported")
    return settings


def _positive(value) -> bool:
    """A positive finite number (an integer past a float's range is none)."""
    number = real(value)
    return number is not None and number > 0
