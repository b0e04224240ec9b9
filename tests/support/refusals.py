"""Asserting the exact error tspec refuses an input with."""

import re

import pytest


def raises(error_class, where):
    """Assert the exact error: class, 'file:line[:column]: message' as str() shows it."""
    return pytest.raises(error_class, match=f"^{re.escape(where)}$")
