"""`tspec generate --check` proves each model once: a model and its decoding step in one proof
(the decoding choice left open), read by the lowering of the full model, of the step and of
every backend (codegen.lowering.lower._require_proved)."""

import subprocess
import sys

from support.command_line import ROOT

from tspec.codegen.generate import BUILTIN_MODELS

COUNTED = """
import collections, contextlib, io, sys
from tspec.checking import check
from tspec import cli
proofs = collections.Counter()
original = check._check
def counted(spec, choices, values, all_choices, **kwargs):
    # the choices the proof leaves open: the spec's less those fixed
    open_ = tuple(sorted(set(spec.choices) - set(choices or {})))
    proofs[(spec.name, tuple(sorted((choices or {}).items())), all_choices, open_)] += 1
    return original(spec, choices, values, all_choices, **kwargs)
check._check = counted
with contextlib.redirect_stdout(io.StringIO()):
    status = cli.main(["generate", "--check"])
print(status, sum(proofs.values()), len(proofs), sorted({k[3] for k in proofs}))
"""


def test_generate_check_proves_each_built_in_model_once():
    done = subprocess.run([sys.executable, "-c", COUNTED], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, check=True)
    status, proofs, distinct, left_open = done.stdout.split(maxsplit=3)
    # five models, two backends each, a full model and its step: once each model
    assert (status, int(proofs), int(distinct)) == ("0", len(BUILTIN_MODELS), len(BUILTIN_MODELS))
    # every choice fixed but decoding, which the one proof leaves open
    assert left_open == "[('decoding',)]\n"
