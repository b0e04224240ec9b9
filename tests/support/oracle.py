"""The plain description of a listed set of choice combinations: the oracle the checker's own
(``checking.coverage.Cover.describe``, which never lists them) is tested against."""


def describe_combinations(present: list[dict], everything: list[dict], spec) -> str:
    """A short description of ``present``, some of the combinations ``everything`` of the
    choices of ``spec``."""
    if len(present) == len(everything):
        return "all choices"
    parts = []
    for name in spec.choices:
        values = sorted({c[name] for c in present}, key=spec.choices[name].options.index)
        every = sorted({c[name] for c in everything}, key=spec.choices[name].options.index)
        if values != every:
            parts.append(f"{name}={'|'.join(values)}")
    product = 1
    for name in spec.choices:
        product *= len({c[name] for c in present})
    described = ", ".join(parts)
    if product != len(present):
        counted = f"{len(present)} of {len(everything)} combinations"
        described = f"{described} ({counted})" if described else counted
    return described
