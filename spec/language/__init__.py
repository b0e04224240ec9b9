"""The spec language: its expressions, parser, data model, shapes, names, LaTeX and variants."""
