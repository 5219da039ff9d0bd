"""Compare one program's observables, stock vs the stack, and classify each difference.

A difference is one observable whose value differs (`out[1].requires_grad: True -> False`). Each
is classified, in this order:

  fix         the program runs compiled (any runner but eager) and the stack's value is what
              eager gives with the stack: compiled code now agrees with eager where it did not
  intended    a rule of rules.py covers it: the machine form of one patch's BC note
  stock-fails a compiled program whose first call raised on stock: it did not work there, so
              nothing of it can regress (its other differences are not listed), unless the
              stack runs it where eager raises that same error; or the observation follows a
              step (an in-place change) that raised on stock
  unintended  anything else: a regression until a patch's rule says otherwise

When the first call raises on one side only (`run`), the observables that only the other side
could make are not listed: `run` is the difference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import rules as R

CLASSES = ("fix", "intended", "stock-fails", "unintended")


@dataclass(frozen=True)
class Difference:
    program: str
    path: str
    stock: object
    stack: object
    cls: str = ""
    rule: str = ""  # the rule's name for "intended"

    def line(self) -> str:
        why = " [%s]" % self.rule if self.rule else ""
        return "%s %s: %s -> %s (%s%s)" % (self.program, self.path, _short(self.stock), _short(self.stack),
                                          self.cls, why)


def _short(value, width=90):
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= width else text[: width - 3] + "..."


MISSING = "<absent>"


def differences(stock: dict, stack: dict) -> list[tuple[str, object, object]]:
    """(path, stock value, stack value) of each observable that differs."""
    out = []
    run_differs = stock.get("run") != stack.get("run")
    for path in sorted(set(stock) | set(stack), key=_order):
        a, b = stock.get(path, MISSING), stack.get(path, MISSING)
        if a != b and not (run_differs and MISSING in (a, b)):
            out.append((path, a, b))
    return out


def _order(path: str):
    return (path != "run", path)


# What names the Function or node in an error message: eager's is the user's Function (FBackward),
# compiled code's is ApplyTemplate or CompiledFunction. Compared with eager, the check that raised
# counts, not what it names.
_NAMES = [(re.compile(r"\b(Output|output) \d+ of \w+"), r"\1 ? of ?"),
          (re.compile(r"\[torch\.\w+ \[[\d, ]*\]\]"), "[?]")]


# Autograd's view + in-place checks, each worded in several ways (the view itself, a view of a
# view, its base): a message holding both needles is that check.
_CHECKS = (("created in no_grad mode", "is being modified inplace"),
           ("created in no_grad mode", "has been modified inplace"),
           ("created in inference mode", "modified inplace"),
           ("returns multiple views", "is being modified inplace"),
           ("returns multiple views", "has been modified inplace"),
           ("created inside a custom Function", "is being modified inplace"),
           ("created inside a custom Function", "has been modified inplace"))


def same_check(a, b) -> bool:
    """Whether two values are equal, errors by the check that raised them."""
    if R.raised(a) and R.raised(b):
        for needles in _CHECKS:
            if all(n in a for n in needles) and all(n in b for n in needles):
                return True
        for pattern, repl in _NAMES:
            a, b = pattern.sub(repl, a), pattern.sub(repl, b)
    return a == b


def _as_eager(path, value, stack, eager_stack) -> bool:
    """The stack's value of PATH is eager's (with the stack). A gradient through out[j] after an
    in-place change of out[i] that eager refuses (so eager has no such gradient) counts as
    eager's when it is the stack's own gradient through out[j] without the change, and that one
    is eager's: the change did not touch it."""
    if value == MISSING:
        return False
    if same_check(eager_stack.get(path, MISSING), value):
        return True
    what, i, j = R.parse(path)
    if what in ("inplace", "inplace_no_grad") and j is not None and R.raised(eager_stack.get("%s[%d]" % (what, i))):
        alone = "grad(out[%d])" % j
        return stack.get(alone) == value and same_check(eager_stack.get(alone, MISSING), value)
    return False


def _after_stock_error(path, stock, stack) -> bool:
    """An observation made after a step (an in-place change) that raised on stock and succeeds
    with the stack: that step is a difference of its own; what follows it did not run on stock."""
    what, i, j = R.parse(path)
    if what not in ("inplace", "inplace_no_grad") or j is None:
        return False
    step = "%s[%d]" % (what, i)
    return R.raised(stock.get(step)) and stack.get(step) == "ok"


def _after_stock_repeat_error(path, a, b, stock) -> bool:
    """A later call raised on stock (`repeat`: Dynamo's recompile limit, say): the observations
    after it are missing on stock, and where they stop is no regression."""
    if not R.raised(stock.get("repeat")):
        return False
    return path == "repeat" or MISSING in (a, b)


def _still_raises(program, path, a, b, eager_stack) -> bool:
    """A compiled observation that raised on stock, where eager does not raise that error, and
    raises (otherwise) with the stack: it failed on stock and still does."""
    return (program.runner != "eager" and R.raised(a) and R.raised(b)
            and not (eager_stack is not None and same_check(eager_stack.get(path, MISSING), a)))


def classify(program, stock: dict, stack: dict, eager_stock: dict | None, eager_stack: dict | None
             ) -> list[Difference]:
    """Every difference of PROGRAM (a programs.Program) between its STOCK and STACK records,
    classified; EAGER_* are the same body and caller run eagerly on each side (None for an
    eager program)."""
    found = []
    diffs = differences(stock, stack)
    # A compiled program whose first call raised on stock did not work there, unless the stack
    # now runs it where eager raises the very same error (a missed error is a difference too).
    stock_fails = (program.runner != "eager" and R.raised(stock.get("run"))
                   and not (eager_stack is not None and same_check(eager_stack.get("run"), stock.get("run"))
                            and not R.raised(stack.get("run"))))
    for path, a, b in diffs:
        if program.runner != "eager" and eager_stack is not None and _as_eager(path, b, stack, eager_stack):
            found.append(Difference(program.id, path, a, b, "fix"))
            continue
        rule = R.covering(program, path, a, b, stock, stack, eager_stock, eager_stack)
        if rule is not None:
            found.append(Difference(program.id, path, a, b, "intended", rule))
        elif (_after_stock_error(path, stock, stack) or _after_stock_repeat_error(path, a, b, stock)
              or _still_raises(program, path, a, b, eager_stack)):
            found.append(Difference(program.id, path, a, b, "stock-fails"))
        elif stock_fails:
            found.append(Difference(program.id, path, a, b, "stock-fails"))
            break  # its other differences follow from it
        else:
            found.append(Difference(program.id, path, a, b, "unintended"))
    return found
