"""The documentation site: its pages (`site`), the architecture diagram, the index's
comparisons (diffs and a grid) and the text made safe for HTML and Markdown (`markup`)."""
