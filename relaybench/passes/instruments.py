"""Instruments: what watches the passes of a :class:`~relaybench.passes.infra.PassContext`.

* :class:`PassTimer` times every pass (nested ones under their sequence).
* :class:`Snapshots` records every pass in order, skipped ones too, with the module before and
  after, whether it changed, operator and node counts and the time taken: the data the workbench
  shows. IR text is printed only when asked for, from the kept (immutable) modules.
* :class:`PrintIR` prints the IR before and/or after the passes it names.
* :class:`VerifyEach` checks after every pass that the program still type-checks, that
  ``@main`` kept its type and that the program is well formed
  (:mod:`relaybench.passes.well_formed`), raising :class:`PassVerificationError` naming the pass.

>>> import relaybench as rb
>>> from relaybench.passes import PassContext, Sequential, InferType
>>> x = rb.var("x", shape=(2,))
>>> mod = rb.IRModule.from_expr(rb.Function([x], x + x))
>>> snaps, timer = Snapshots(), PassTimer()
>>> with PassContext(opt_level=2, instruments=[snaps, timer, VerifyEach()]):
...     out = Sequential([InferType()], name="demo")(mod)
>>> [(r.name, r.depth, r.skipped, r.ops_before, r.ops_after) for r in snaps]
[('demo', 0, False, 1, 1), ('InferType', 1, False, 1, 1)]
>>> print(snaps[1].after_text.splitlines()[1])
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
>>> [t.name for t in timer.records]
['demo', 'InferType']
"""

from __future__ import annotations

import difflib
import sys
import time
from typing import Iterable, Optional, TextIO, Union

from ..errors import RelayError
from ..ir.module import IRModule
from .infra import PassInfo, PassInstrument

__all__ = ["PassTimer", "PassTime", "Snapshots", "PassRecord", "PrintIR", "VerifyEach",
           "PassVerificationError"]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


# ---------------------------------------------------------------------------------------------
# PassTimer


class PassTime:
    """One run of a pass: its name, label (with options), nesting depth and times in seconds
    (``seconds`` in all, ``self_seconds`` outside the passes it ran itself)."""

    __slots__ = ("name", "label", "depth", "seconds", "self_seconds", "failed")

    def __init__(self, name: str, label: str, depth: int):
        self.name, self.label, self.depth = name, label, depth
        self.seconds = self.self_seconds = 0.0
        self.failed = False

    def __repr__(self) -> str:
        return f"PassTime({self.label}, depth={self.depth}, {_ms(self.seconds)} ms)"


class PassTimer(PassInstrument):
    """Times every pass run in its contexts; nested passes (a Sequential's members) are timed
    under their parent with a stack. Runs accumulate until :meth:`reset`.

    ``records``: a :class:`PassTime` per run, in the order the passes started.
    :meth:`summary` renders them as indented text, :meth:`table` as a table, :meth:`totals`
    adds up the runs of each pass.
    """

    def __init__(self):
        self.records: list = []
        self._stack: list = []   # (record, start time, seconds spent in children)

    def reset(self) -> None:
        self.records.clear()
        self._stack.clear()

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        rec = PassTime(info.name, info.label, len(self._stack))
        self.records.append(rec)
        self._stack.append([rec, time.perf_counter(), 0.0])

    def _finish(self, failed: bool) -> None:
        if not self._stack:
            return
        rec, start, children = self._stack.pop()
        rec.seconds = time.perf_counter() - start
        rec.self_seconds = max(rec.seconds - children, 0.0)
        rec.failed = failed
        if self._stack:
            self._stack[-1][2] += rec.seconds

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        self._finish(False)

    def run_failed_pass(self, mod: IRModule, info: PassInfo, error: BaseException) -> None:
        self._finish(True)

    @property
    def total(self) -> float:
        """Seconds spent in the outermost passes."""
        return sum(r.seconds for r in self.records if r.depth == 0)

    def totals(self) -> dict:
        """Pass name -> (number of runs, seconds in all, seconds of its own), slowest first."""
        acc: dict = {}
        for r in self.records:
            calls, secs, own = acc.get(r.name, (0, 0.0, 0.0))
            acc[r.name] = (calls + 1, secs + r.seconds, own + r.self_seconds)
        return dict(sorted(acc.items(), key=lambda kv: -kv[1][1]))

    def table(self):
        """One row per run: pass (indented by depth), total and own milliseconds, share."""
        from .._table import Table
        total = self.total or 1.0
        rows = []
        for i, r in enumerate(self.records):
            rows.append({"#": i, "pass": "  " * r.depth + r.label, "ms": _ms(r.seconds),
                         "self ms": _ms(r.self_seconds), "%": f"{100 * r.seconds / total:.1f}"
                         + (" (failed)" if r.failed else "")})
        return Table(rows)

    def summary(self) -> str:
        """The runs as text, nested passes indented under their sequence."""
        lines = [f"pass timing: {len(self.records)} pass runs, {_ms(self.total)} ms in all"]
        total = self.total or 1.0
        width = max([len("  " * r.depth + r.label) for r in self.records] + [4])
        for r in self.records:
            name = ("  " * r.depth + r.label).ljust(width)
            lines.append(f"  {name}  {_ms(r.seconds):>9} ms  {100 * r.seconds / total:5.1f}%"
                         + ("  failed" if r.failed else ""))
        return "\n".join(lines)

    render = summary

    def __str__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()


# ---------------------------------------------------------------------------------------------
# Snapshots


class PassRecord:
    """What one pass did. Counts, equality and text are computed on first use (and cached).

    Fields: ``index``, ``name`` (Relay's), ``label`` (with options), ``kind``, ``opt_level``,
    ``depth`` (0 for an outermost pass, 1 inside a sequence, ...), ``skipped`` and ``reason``,
    ``failed`` and ``error``, ``before`` and ``after`` (the modules; ``after`` is ``before`` for a
    skipped pass and None for a failed one), ``seconds``. Derived: ``same_object``, ``changed``
    (not structurally equal), ``ops_before``/``ops_after``, ``nodes_before``/``nodes_after``,
    ``before_text``/``after_text`` and :meth:`diff`.
    """

    def __init__(self, owner: "Snapshots", index: int, info: PassInfo, depth: int, before: IRModule):
        self._owner = owner
        self.index = index
        self.name = info.name
        self.label = info.label
        self.kind = info.kind
        self.opt_level = info.opt_level
        self.info = info
        self.depth = depth
        self.before = before
        self.after: Optional[IRModule] = None
        self.skipped = False
        self.reason: Optional[str] = None
        self.failed = False
        self.error: Optional[str] = None
        self.seconds = 0.0
        self._changed: Optional[bool] = None

    # ---- derived, lazily ---------------------------------------------------------------------
    @property
    def status(self) -> str:
        if self.skipped:
            return "skipped"
        if self.failed:
            return "failed"
        return "ran" if self.after is not None else "running"

    @property
    def same_object(self) -> bool:
        """Whether the pass returned the very module it was given (it changed nothing)."""
        return self.after is self.before

    @property
    def changed(self) -> bool:
        """Whether the module after differs structurally from the one before."""
        if self._changed is None:
            if self.after is None or self.after is self.before:
                self._changed = False
            else:
                from ..ir.structural import structural_equal
                self._changed = not structural_equal(self.before, self.after)
        return self._changed

    @property
    def ops_before(self) -> int:
        return self._owner._stat(self.before, "ops")

    @property
    def ops_after(self) -> Optional[int]:
        return None if self.after is None else self._owner._stat(self.after, "ops")

    @property
    def nodes_before(self) -> int:
        return self._owner._stat(self.before, "nodes")

    @property
    def nodes_after(self) -> Optional[int]:
        return None if self.after is None else self._owner._stat(self.after, "nodes")

    @property
    def before_text(self) -> str:
        return self._owner._text(self.before)

    @property
    def after_text(self) -> Optional[str]:
        return None if self.after is None else self._owner._text(self.after)

    def diff(self, context: int = 3) -> str:
        """A unified diff of the IR text before and after (empty when the text is the same)."""
        after = self.after_text or ""
        lines = difflib.unified_diff(self.before_text.splitlines(), after.splitlines(),
                                     f"before {self.label}", f"after {self.label}",
                                     n=context, lineterm="")
        return "\n".join(lines)

    def row(self) -> dict:
        if self.skipped:
            status = f"skipped: {self.reason}"
        elif self.failed:
            status = f"failed: {self.error}"
        else:
            status = self.status
        if self.after is None:
            changed, ops, nodes = "", str(self.ops_before), str(self.nodes_before)
        else:
            changed = "yes" if self.changed else ("no (same module)" if self.same_object else "no")
            ops = f"{self.ops_before} -> {self.ops_after}" if self.ops_before != self.ops_after \
                else str(self.ops_before)
            nodes = f"{self.nodes_before} -> {self.nodes_after}" if self.nodes_before != self.nodes_after \
                else str(self.nodes_before)
        return {"#": self.index, "pass": "  " * self.depth + self.label, "opt_level": self.opt_level,
                "status": status, "changed": changed, "ops": ops, "nodes": nodes,
                "ms": _ms(self.seconds)}

    def __repr__(self) -> str:
        extra = f", reason={self.reason!r}" if self.skipped else ""
        return f"PassRecord(#{self.index} {self.label}, depth={self.depth}, {self.status}{extra})"

    def _repr_html_(self) -> str:
        from ..viz.html import html
        return html(self)


class Snapshots(PassInstrument):
    """Records every pass in order, skipped ones too: the data a workbench view shows.

    ``records`` (also ``len(snapshots)``, ``snapshots[i]``, iteration): a :class:`PassRecord` per
    pass, a sequence before its members (their ``depth`` is one more). :meth:`changed`,
    :meth:`ran` and :meth:`skipped` filter them; :meth:`table` shows them.

    Modules are immutable values, so a record keeps the modules themselves; counts, structural
    comparison and text are computed when first asked for, once per module. With
    ``eager_text=True`` the text is taken while the passes run instead (it then shows the types
    known at that moment).
    """

    def __init__(self, eager_text: bool = False):
        self.records: list = []
        self.eager_text = eager_text
        self._stack: list = []
        self._stats: dict = {}   # (module, what) -> value; the module key keeps it alive
        self._texts: dict = {}

    def reset(self) -> None:
        self.records.clear()
        self._stack.clear()
        self._stats.clear()
        self._texts.clear()

    # ---- caches --------------------------------------------------------------------------------
    def _stat(self, mod: IRModule, what: str) -> int:
        key = (mod, what)
        value = self._stats.get(key)
        if value is None:
            from ..ir.analysis import count_nodes, count_ops
            value = count_ops(mod) if what == "ops" else count_nodes(mod)
            self._stats[key] = value
        return value

    def _text(self, mod: IRModule) -> str:
        text = self._texts.get(mod)
        if text is None:
            text = mod.astext()
            self._texts[mod] = text
        return text

    # ---- hooks ---------------------------------------------------------------------------------
    def _new(self, mod: IRModule, info: PassInfo) -> PassRecord:
        rec = PassRecord(self, len(self.records), info, len(self._stack), mod)
        self.records.append(rec)
        if self.eager_text:
            self._text(mod)
        return rec

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        rec = self._new(mod, info)
        self._stack.append((rec, time.perf_counter()))

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        if not self._stack:
            return
        rec, start = self._stack.pop()
        rec.seconds = time.perf_counter() - start
        rec.after = mod
        if self.eager_text:
            self._text(mod)

    def run_failed_pass(self, mod: IRModule, info: PassInfo, error: BaseException) -> None:
        if not self._stack:
            return
        rec, start = self._stack.pop()
        rec.seconds = time.perf_counter() - start
        rec.failed = True
        rec.error = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"

    def run_skipped_pass(self, mod: IRModule, info: PassInfo, reason: str) -> None:
        rec = self._new(mod, info)
        rec.skipped = True
        rec.reason = reason
        rec.after = mod

    # ---- views ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: Union[int, slice, str]):
        if isinstance(index, str):
            for r in self.records:
                if r.name == index or r.info.kebab == index or r.label == index:
                    return r
            raise KeyError(f"no pass named {index!r} in the snapshots "
                           f"(have: {', '.join(dict.fromkeys(r.name for r in self.records))})")
        return self.records[index]

    def __iter__(self):
        return iter(self.records)

    def changed(self) -> list:
        """The records of passes whose output differs structurally from their input."""
        return [r for r in self.records if not r.skipped and not r.failed and r.changed]

    def ran(self) -> list:
        return [r for r in self.records if not r.skipped]

    def skipped(self) -> list:
        return [r for r in self.records if r.skipped]

    @property
    def final(self) -> Optional[IRModule]:
        """The module the last outermost pass produced."""
        for r in reversed(self.records):
            if r.depth == 0:
                return r.after
        return None

    def table(self, changed_only: bool = False):
        """One row per pass: index, pass (indented by depth), opt_level, status (with the reason
        for a skipped pass), changed, op and node counts (before -> after), milliseconds."""
        from .._table import Table
        records = self.changed() if changed_only else self.records
        return Table([r.row() for r in records])

    def __repr__(self) -> str:
        return f"Snapshots({len(self.records)} passes, {len(self.changed())} changed the program)"

    def _repr_html_(self) -> str:
        from ..viz.html import html
        return html(self)


# ---------------------------------------------------------------------------------------------
# PrintIR


class PrintIR(PassInstrument):
    """Prints the IR around the passes named in ``passes`` (Relay or kebab-case names; None
    means every pass except the sequences that only run others): before each with ``before``,
    after each with ``after``, to ``file`` (standard output when None). ``show_skipped`` also
    prints a line for each skipped pass.

    >>> import relaybench as rb
    >>> from relaybench.passes import PassContext, InferType
    >>> x = rb.var("x", shape=(2,))
    >>> mod = rb.IRModule.from_expr(rb.Function([x], x))
    >>> with PassContext(instruments=[PrintIR(["infer-type"])]):
    ...     _ = InferType()(mod)
    // IR after InferType
    #[version = "0.0.5"]
    def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
      %x
    }
    """

    def __init__(self, passes: Optional[Iterable[str]] = None, before: bool = False, after: bool = True,
                 file: Optional[TextIO] = None, show_types: bool = True, show_skipped: bool = False):
        if isinstance(passes, str):
            passes = [passes]
        self.passes = None if passes is None else frozenset(passes)
        self.before, self.after = before, after
        self.file = file
        self.show_types = show_types
        self.show_skipped = show_skipped

    def _wanted(self, info: PassInfo) -> bool:
        if self.passes is None:
            return not info.is_sequential
        return info.matches(self.passes) or info.label in self.passes

    def _print(self, header: str, mod: Optional[IRModule] = None) -> None:
        out = self.file if self.file is not None else sys.stdout
        print(header, file=out)
        if mod is not None:
            print(mod.astext(show_types=self.show_types), file=out)

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        if self.before and self._wanted(info):
            self._print(f"// IR before {info.label}", mod)

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        if self.after and self._wanted(info):
            self._print(f"// IR after {info.label}", mod)

    def run_skipped_pass(self, mod: IRModule, info: PassInfo, reason: str) -> None:
        if self.show_skipped and self._wanted(info):
            self._print(f"// skipped {info.label}: {reason}")


# ---------------------------------------------------------------------------------------------
# VerifyEach


class PassVerificationError(RelayError):
    """A pass produced a program that fails a check; ``pass_name`` and ``problem`` say which."""

    def __init__(self, pass_name: str, problem: str):
        self.pass_name = pass_name
        self.problem = problem
        super().__init__(f"after pass {pass_name}: {problem}")


#: passes whose job is to change ``@main``'s type (reverse-mode AD returns the gradients too;
#: QuantizeAnnotate adds the scalars of its simulated_quantize calls as parameters, as Relay's
#: does, and QuantizeCalibrate binds them)
SIGNATURE_CHANGING_PASSES = frozenset({"Gradient", "QuantizeAnnotate", "QuantizeCalibrate"})


class VerifyEach(PassInstrument):
    """After every pass that changed the module, checks that:

    * the program is well formed (:func:`relaybench.passes.well_formed.well_formed_problems`);
    * every function still type-checks, inferred afresh, and the types a function carries agree
      with that inference;
    * ``@main`` has the same type as before the pass (a ``?`` dimension may become known).
      Passes whose job is to change it (:data:`SIGNATURE_CHANGING_PASSES`, plus those named in
      ``allow_signature_change``) are exempt.

    A failure raises :class:`PassVerificationError` naming the pass and the problem. The checks
    run after the passes that do the work, not after the sequences that only run them.
    """

    def __init__(self, types: bool = True, well_formed: bool = True,
                 allow_signature_change: Iterable[str] = ()):
        self.types = types
        self.well_formed = well_formed
        self.allow_signature_change = SIGNATURE_CHANGING_PASSES | frozenset(allow_signature_change)
        self._stack: list = []

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        self._stack.append(mod)

    def run_failed_pass(self, mod: IRModule, info: PassInfo, error: BaseException) -> None:
        if self._stack:
            self._stack.pop()

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        before = self._stack.pop() if self._stack else None
        if before is mod or info.is_sequential:
            return
        self.verify(mod, info.label, before, check_signature=not info.matches(self.allow_signature_change))

    def verify(self, mod: IRModule, pass_name: str, before: Optional[IRModule] = None,
               check_signature: bool = True) -> None:
        """Run the checks on ``mod``, the output of ``pass_name`` whose input was ``before``
        (``@main``'s type is compared with ``before``'s when given and ``check_signature``)."""
        if self.well_formed:
            from .well_formed import well_formed_problems
            problems = well_formed_problems(mod)
            if problems:
                more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
                raise PassVerificationError(pass_name, f"the program is not well formed: {problems[0]}{more}")
        if not self.types:
            return
        from ..ir.type_infer import infer_module
        recorded = {gv: f.type_or_none for gv, f in mod.functions.items()}
        try:
            fresh = infer_module(mod)
        except RelayError as err:
            raise PassVerificationError(pass_name, f"the program no longer type-checks: {err}") from err
        from ..ir.structural import structural_equal
        for gv, f in fresh.functions.items():
            old = recorded.get(gv)
            if old is not None and not structural_equal(old, f.checked_type):
                raise PassVerificationError(
                    pass_name, f"@{gv.name_hint} carries the type {old} but its body has the type "
                               f"{f.checked_type}")
        if before is None or not check_signature:
            return
        if "main" not in before or "main" not in fresh:
            if "main" in before:
                raise PassVerificationError(pass_name, "@main is gone")
            return
        from .infra import typed
        old_t = typed(before)["main"].checked_type
        new_t = fresh["main"].checked_type
        if not _refines(old_t, new_t):
            raise PassVerificationError(pass_name, f"@main's type changed from {old_t} to {new_t}")


def _refines(old, new) -> bool:
    """Whether type ``new`` is ``old``, or ``old`` with some ``?`` dimensions made known."""
    from ..ir.structural import structural_equal
    from ..ir.symbolic import AnyDim
    from ..ir.types import FuncType, TensorType, TupleType
    stack = [(old, new)]
    while stack:
        a, b = stack.pop()
        if structural_equal(a, b):
            continue
        if isinstance(a, TensorType) and isinstance(b, TensorType):
            if a.dtype != b.dtype or len(a.shape) != len(b.shape):
                return False
            if any(not isinstance(da, AnyDim) and da != db for da, db in zip(a.shape, b.shape)):
                return False
        elif isinstance(a, TupleType) and isinstance(b, TupleType):
            if len(a.fields) != len(b.fields):
                return False
            stack.extend(zip(a.fields, b.fields))
        elif isinstance(a, FuncType) and isinstance(b, FuncType):
            if len(a.arg_types) != len(b.arg_types) or len(a.type_params) != len(b.type_params):
                return False
            stack.extend(zip(a.arg_types, b.arg_types))
            stack.append((a.ret_type, b.ret_type))
        else:
            return False
    return True

