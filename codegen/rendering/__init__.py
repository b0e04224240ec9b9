"""Rendering: the IR to Python source text through jinja2 templates, one runtime module per
backend and one module per model."""
