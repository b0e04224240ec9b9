"""Code generation from a checked spec (spec -> IR -> templates -> generated/)."""
