"""Bounds on every command's work, so that no spec (thousands of equations, shape expressions
that sympy takes long to compare, blocks that call blocks exponentially often) can make it
hang or exhaust the machine: a time limit, and a limit on the tensors a spec expands to.

The time limit interrupts even one long sympy computation where it can (SIGALRM, in the main
thread on POSIX), and the checker looks at the clock before each statement too, as the other
work of a command (diffs, docs pages, grids) does before each phase (``doing``). The command
line puts every command but `run` under one (``--time-limit``, default TIME_LIMIT).
"""

import signal
import threading
import time

from tspec.errors import LimitError, UsageError
from tspec.inputs import real, short_repr
from tspec.language.model import BlockCall, Equation, Let, Spec, TensorDecl, When

TIME_LIMIT = 60.0            # seconds a check may take by default (the built-in spec: ~0.6)
MAX_TENSORS = 100_000        # tensors a spec may expand to, every block call its own
MAX_CALL_DEPTH = 64          # blocks calling blocks calling blocks...
LONGEST_TIMER = 2 ** 31 - 1  # seconds (68 years): a longer limit is timed by the clock alone,
#                              as setitimer takes no more on every platform


class _Bound:
    """The time bound in force: when it ends, and the statement the checker is at (or what
    the command is doing besides checking)."""

    def __init__(self, seconds: float, command: str, phase: str | None):
        self.seconds = seconds
        self.command = command    # "tspec docs": what a phase's error names
        self.deadline = time.monotonic() + seconds
        self.at = phase           # the statement reached: a Let, TensorDecl, Equation, ...;
        #                           or a phase of the command's other work ("comparing ...")
        self.file = None          # the file a phase reads, if any
        self.raised = False       # once raised (by the signal or the clock), never again

    def error(self) -> LimitError:
        self.raised = True
        if isinstance(self.at, str):
            return LimitError(f"{self.command} stopped at its time limit of {self.seconds:g} s, "
                              f"{self.at}; give it longer with --time-limit SECONDS",
                              file=self.file)
        file, line, what = _described(self.at)
        return LimitError(f"the check stopped at its time limit of {self.seconds:g} s, at "
                          f"{what}: the spec has more statements, or more complex shape "
                          "expressions, than the checker proves in that time; give it "
                          "longer with --time-limit SECONDS", file=file, line=line)


_bound = threading.local()
_UNBOUNDED = object()           # time_limit(None) in force: no inner bound either


class time_limit:
    """``with time_limit(seconds):`` bounds the work done inside: past ``seconds``, a
    LimitError naming the statement the checker reached, or the phase ``command`` (its name
    in errors: "tspec docs") was in. None: no bound, for anything inside either. Inside
    another, the outer holds. (A class, not a generator: its exit must run even when the
    signal fires as an error unwinds.)"""

    def __init__(self, seconds: float | None, command: str = "the command",
                 phase: str | None = None):
        if seconds is not None:             # a Python or NumPy number, bounded first
            number = real(seconds)
            if number is None or number <= 0:
                shown = f"{seconds:g}" if isinstance(seconds, float) else short_repr(seconds)
                raise UsageError(f"a time limit is a positive number of seconds, not {shown}")
            seconds = number
        self.seconds = seconds
        self.command = command
        self.phase = phase        # what the work inside starts with, for an error before the
        #                           first statement or phase it reaches
        self.owner = False        # whether this one set the bound (the outermost)
        self.timer = False        # whether it set a timer (and a SIGALRM handler)
        self.previous = None      # the SIGALRM handler it replaced
        self.bound = None
        self.saved = None         # inside another: its bound, place and file on entry

    def __enter__(self):
        current = getattr(_bound, "current", None)
        if current is not None:
            # inside another: the work inside (a check a command's phase runs) leaves the
            # place as it found it, so that a limit past it names that phase again
            if isinstance(current, _Bound):
                self.saved = (current, current.at, current.file)
            return self
        self.owner = True
        if self.seconds is None:
            _bound.current = _UNBOUNDED
            return self
        self.bound = bound = _Bound(self.seconds, self.command, self.phase)
        _bound.current = bound
        if threading.current_thread() is threading.main_thread() and \
                hasattr(signal, "setitimer") and \
                signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0):
            def expired(signum, frame):
                if not bound.raised:
                    raise bound.error()
            self.previous = signal.signal(signal.SIGALRM, expired)
            self.timer = True
            signal.setitimer(signal.ITIMER_REAL, min(self.seconds, LONGEST_TIMER))
        return self

    def __exit__(self, *exception) -> bool:
        if not self.owner:
            if self.saved is not None and exception[0] is None:
                bound, bound.at, bound.file = self.saved
            return False
        while True:
            try:          # the signal may fire while this runs: then it runs again
                if self.bound is not None:
                    self.bound.raised = True          # no signal raises from here on
                if self.timer:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    signal.signal(signal.SIGALRM, self.previous)
                    self.timer = False
                _bound.current = None
                return False
            except LimitError:
                continue


def reached(statement) -> None:
    """The checker is at this statement (a spec for its set-up, a let, a declaration, an
    equation or a block call): remembered for the error, and past the deadline an error at
    once (where no signal interrupts, or its error was swallowed: one raised while Python runs
    a finaliser is printed and dropped)."""
    bound = getattr(_bound, "current", None)
    if bound is None or bound is _UNBOUNDED:
        return
    bound.at = statement
    if time.monotonic() > bound.deadline:
        raise bound.error()


def doing(phase: str, file: str | None = None) -> None:
    """The command is at ``phase`` of its work besides checking ("comparing base with big"),
    of ``file`` if it reads one, remembered for the error; past the deadline an error at
    once, as ``reached``. Called before each phase and, in long ones, every so often (where
    no signal interrupts: outside the main thread, or under another timer, this is what stops
    them)."""
    bound = getattr(_bound, "current", None)
    if bound is None or bound is _UNBOUNDED:
        return
    bound.at, bound.file = phase, file
    if time.monotonic() > bound.deadline:
        raise bound.error()


def placed(error: LimitError) -> LimitError:
    """``error`` (raised without a place, deep in the checker) at the statement the checker
    has reached, where a time limit follows it."""
    bound = getattr(_bound, "current", None)
    if error.file is None and bound is not None and bound is not _UNBOUNDED and \
            not isinstance(bound.at, str):
        error.file, error.line, _ = _described(bound.at)
    return error


def tick() -> None:
    """Past the deadline, the error at once, naming the phase or statement last reached: for
    the loops of a long phase."""
    bound = getattr(_bound, "current", None)
    if bound is not None and bound is not _UNBOUNDED and time.monotonic() > bound.deadline:
        raise bound.error()


def _described(statement) -> tuple[str | None, int | None, str]:
    """Where a statement is, and what it says, for the error."""
    if statement is None or isinstance(statement, Spec):
        return getattr(statement, "file", None), None, "its set-up"
    if isinstance(statement, Let):
        what = f"let {statement.dim} = {statement.text}"
    elif isinstance(statement, TensorDecl):
        what = f"{statement.role} {statement.name}"
    elif hasattr(statement, "output") and hasattr(statement, "text"):
        what = f"{statement.output} = {statement.text}"
    else:          # anything else the checker may be at (a tensor's row): its name
        what = str(getattr(statement, "name", "") or type(statement).__name__)
    return getattr(statement, "file", None), getattr(statement, "line", None), what[:80]


def tensor_count(spec: Spec) -> int:
    """The tensors a spec expands to when every block call is its own copy (a repeat counts
    once: its layers share their shapes), taking the larger branch of every `when`: what the
    shapes table lists at most. A block that calls itself counts nothing for that call (the
    checker names the cycle); calls nested past MAX_CALL_DEPTH are a LimitError."""
    counted: dict[str, int] = {}

    def body(statements: list, active: tuple[str, ...]) -> int:
        names, total = set(), 0         # a declared tensor and its equation: one tensor
        for statement in statements:
            if isinstance(statement, When):
                total += max(body(statement.body, active), body(statement.otherwise, active))
            elif isinstance(statement, TensorDecl):
                names.add(statement.name)
            elif isinstance(statement, (Equation, BlockCall)):
                names.add(statement.output)
                if isinstance(statement, BlockCall):
                    total += block(statement.block, active)
        return len(names) + total

    def block(name: str, active: tuple[str, ...]) -> int:
        if name in active or name not in spec.blocks:
            return 0
        if len(active) == MAX_CALL_DEPTH:
            chain = " -> ".join(active[:3] + ("...",) + active[-2:] + (name,))
            raise LimitError(f"blocks call blocks more than {MAX_CALL_DEPTH} deep ({chain}); "
                             f"the checker follows at most {MAX_CALL_DEPTH}",
                             file=spec.blocks[name].file, line=spec.blocks[name].line)
        if name not in counted:
            counted[name] = body(spec.blocks[name].body, active + (name,))
        return counted[name]

    return body(spec.body, ())


def require_tensor_count(spec: Spec) -> None:
    """Refuse a spec past MAX_TENSORS before checking it (blocks calling blocks twice, a
    hundred deep, expand to 2**100 tensors)."""
    count = tensor_count(spec)
    if count > MAX_TENSORS:
        shown = f"{count:,}" if count < 10 ** 15 else f"about 10^{len(str(count)) - 1}"
        raise LimitError(f"the spec expands to {shown} tensors, every block call its own copy; "
                         f"the checker takes at most {MAX_TENSORS:,}: call blocks fewer times "
                         "(a repeat counts once)", file=spec.file)
