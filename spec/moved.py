"""Import paths of modules that moved, kept working: a module imported by its old name is the
module at its new name (the same object, so that what a caller sets on it, or patches, is
seen at both), found by a finder on ``sys.meta_path``.

    tspec.codegen.execution   ->  tspec.execution   (running models, loading weights)
    tspec.codegen.docs        ->  tspec.docs        (the documentation site)
    tspec.language.expr       ->  tspec.symbolic.expr
    tspec.language.shape      ->  tspec.symbolic.shape
    tspec.checking.audit      ->  tspec.audit       (it runs the API: an application of it)

All moved in issue 33: running models and loading weights are not code generation, and the
shape algebra sits beneath the op catalogue, which the language's reader stands on.
"""

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {"tspec.codegen.execution": "tspec.execution", "tspec.codegen.docs": "tspec.docs",
         "tspec.language.expr": "tspec.symbolic.expr",
         "tspec.language.shape": "tspec.symbolic.shape",
         "tspec.checking.audit": "tspec.audit"}


class Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a module by a name in MOVED (or below one) and gives it the module at the new
    name."""

    def find_spec(self, name, path=None, target=None):
        new = self.new_name(name)
        if new is None:
            return None
        module = importlib.import_module(new)       # its package, or its module, as it is
        return importlib.util.spec_from_loader(name, self,
                                               is_package=hasattr(module, "__path__"))

    @staticmethod
    def new_name(name: str) -> str | None:
        for old, new in MOVED.items():
            if name == old or name.startswith(old + "."):
                return new + name[len(old):]
        return None

    def create_module(self, spec):
        module = importlib.import_module(self.new_name(spec.name))
        spec.loader_state = module.__spec__     # the import machinery sets __spec__ anew
        return module

    def exec_module(self, module):
        # the module at its new name has run already: only its own spec is put back
        module.__spec__ = module.__spec__.loader_state


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, Moved) for finder in sys.meta_path):
        sys.meta_path.insert(0, Moved())
