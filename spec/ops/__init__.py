"""The op catalogue: every op the spec language knows, each defined once."""
