"""Simplifying loop-IR index arithmetic with the ranges of the loop variables.

Lowering blocked layouts and split loops produces indices such as ``(c_outer * 16 + c_inner) // 16``
and ``(c_outer * 16 + c_inner) % 16``. Knowing that ``c_inner`` ranges over ``[0, 16)``, they are
``c_outer`` and ``c_inner``: affine again, so a code generator can load a whole vector at once.
:func:`simplify_func` walks a PrimFunc, learning each loop variable's range from its ``For``, and
rewrites every integer expression to a canonical affine form (a sum of terms with integer
coefficients) where it can:

* ``(q * c + r) // c`` is ``q + k`` and ``(q * c + r) % c`` is ``r - k * c`` when ``r`` stays within
  ``[k * c, (k + 1) * c)`` over the ranges;
* comparisons decided by the ranges become constants (a padding guard that always holds
  disappears), and so do ``min``/``max`` whose sides are ordered;
* ``select`` and ``if`` with a constant condition keep the taken side only; ``and``/``or`` with a
  constant side fold;
* a loop of extent 1 is replaced by its body with the variable set to the loop's start;
* with ``partition`` (what lowering asks for), loops are partitioned where a padding guard
  turns: a serial loop is cut into consecutive loops (the edges keep the guard, the interior
  loses it and the clamps under it), and a parallel loop, whose iterations are the threads',
  branches on the term its guards read (the row ``i % 112`` of a fused (block, row) loop).

Floating-point expressions are left as written (their rounding is the program's meaning).

>>> from relaybench.te import loop_ir as L
>>> co, ci = L.Var("co"), L.Var("ci")
>>> ranges = {co: (0, 3), ci: (0, 15)}
>>> print(simplify((co * 16 + ci) // 16, ranges), simplify((co * 16 + ci) % 16, ranges))
co ci
>>> print(simplify(L.logical_and(co * 2 + 1 >= 0, ci < 16), ranges))
True
"""

from __future__ import annotations

from relaybench.te import loop_ir as L
from relaybench.te.loop_ir import (Allocate, Binary, Cast, Expr, For, IfThenElse, IntImm, LetStmt,
                                   PrimFunc, Select, SeqStmt, Unary, Var)

__all__ = ["simplify", "simplify_stmt", "simplify_func", "bounds"]


def _wrap(value: int, dtype: str) -> int:
    """``value`` converted to the integer ``dtype`` as a cast does: modulo 2**bits, into the
    dtype's range (a bool is 1 for any non-zero value).

    >>> _wrap(-3, "uint8"), _wrap(200, "int8"), _wrap(7, "bool")
    (253, -56, 1)
    """
    if dtype == "bool":
        return int(value != 0)
    bits = int(dtype.lstrip("uint"))
    value %= 1 << bits
    if dtype.startswith("int") and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def _exact(bounds, dtype: str) -> bool:
    """Whether values within ``bounds`` (None: unknown) are all representable in ``dtype``."""
    if bounds is None:
        return False
    if dtype == "bool":
        return 0 <= bounds[0] <= bounds[1] <= 1
    bits = int(dtype.lstrip("uint"))
    lo, hi = (0, (1 << bits) - 1) if dtype.startswith("uint") else (-(1 << (bits - 1)),
                                                                   (1 << (bits - 1)) - 1)
    return lo <= bounds[0] and bounds[1] <= hi


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


#: loop partitioning: at most this many cut points per loop, and only in loops whose body has
#: at most this many nodes (each segment is a copy of the body)
MAX_CUTS = 4
MAX_PARTITIONED_NODES = 4000


def _term_name(term) -> str:
    names = sorted(v.name for v in L.free_vars(term))
    return names[0] if names else "t"


class _Simplifier:
    def __init__(self, ranges: dict, partition: bool = False):
        self.ranges = dict(ranges)
        self.memo: dict = {}
        self.partition = partition

    def conditions(self, body):
        """``(comparisons, inner)``: the integer comparisons in ``body`` and the ranges of the
        loops inside it; None when the body is too large to copy, or holds a barrier or a
        shared or local array (a GPU kernel's, declared once per kernel)."""
        stack, seen, compares, inner = [body], set(), [], {}
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if len(seen) > MAX_PARTITIONED_NODES:
                return None
            if isinstance(node, L.Barrier) or (isinstance(node, Allocate)
                                                and node.buffer.scope != "global"):
                return None
            if isinstance(node, For) and isinstance(node.begin, IntImm) \
                    and isinstance(node.extent, IntImm):
                inner[node.var] = (node.begin.value, node.begin.value + node.extent.value - 1)
            if isinstance(node, Binary) and node.op in L.COMPARE_OPS and _is_int(node.a.dtype):
                compares.append(node)
            stack.extend(L.children(node))
        return compares, inner

    def cuts(self, loop, body, begin: int, end: int) -> list:
        """The points of ``[begin, end)`` where a condition of ``body`` (of a ``select`` or an
        ``if``) over ``loop``'s variable changes its truth: a padding guard
        ``x - 1 >= 0 and x - 1 < 112`` over ``x`` in ``[0, 114)`` cuts at 1 and 113. Empty when
        there are none, more than :data:`MAX_CUTS`, or :meth:`conditions` finds none."""
        found = self.conditions(body)
        if found is None:
            return []
        compares, inner = found
        points = {point for compare in compares
                  for point in self.cut_points(loop.var, compare, inner) if begin < point < end}
        return sorted(points) if len(points) <= MAX_CUTS else []

    def term_split(self, loop, body):
        """For a loop that cannot be cut (a parallel one), ``(term, low, high)``: a term of its
        conditions computed from the loop's variable alone (the row ``i % 112`` of a fused
        (channel block, row) loop, or the variable itself) and the widest range of its values
        over which none of them turns; None when there is no such term or range short of the
        whole."""
        found = self.conditions(body)
        if found is None:
            return None
        compares, inner = found
        var, by_term = loop.var, {}
        for compare in compares:
            form = self.linear(compare.a - compare.b)
            if form is None:
                continue
            for key, (node, _) in form[0].items():
                if node is var or (not isinstance(node, Var) and L.free_vars(node) == {var}):
                    by_term.setdefault(key, [node, []])[1].append(compare)
        best = None
        for key, (node, compares_of) in by_term.items():
            b = self.bounds(node)
            if b is None:
                continue
            points = sorted({p for c in compares_of for p in self.cut_points(node, c, inner, key)
                             if b[0] < p <= b[1]})
            if not points or len(points) > MAX_CUTS:
                continue
            edges = [b[0]] + points + [b[1] + 1]
            lo, hi = max(zip(edges, edges[1:]), key=lambda seg: seg[1] - seg[0])
            if hi - lo < 2 or 2 * (hi - lo) < b[1] - b[0] + 1:
                continue   # no interior worth a second copy of the body
            if best is None or len(compares_of) > best[3]:
                best = (node, lo, hi - 1, len(compares_of))
        return None if best is None else best[:3]

    def split_body(self, body, term, lo: int, hi: int):
        """``body`` as ``let t = term in if lo <= t <= hi: A else: B``: ``A`` is the body with
        ``term`` read from ``t`` and simplified knowing its range (partitioned further), ``B``
        the body with its guards kept. Where the values outside ``[lo, hi]`` are one value (the
        last tile of a row or a plane, the last row), ``B`` has the term replaced by it, so its
        guards and indices fold: a guard inside a loop that the body's ``if`` leaves alone
        would otherwise be a loop-invariant branch LLVM copies the loop for (a ResNet-18
        kernel's compile time tripled)."""
        t = Var(f"{_term_name(term)}_in", term.dtype)
        key = L.to_text(term)

        def replaced(by):
            memo: dict = {}

            def replace(node):
                if id(node) in memo:
                    return memo[id(node)]
                if node is term or (not isinstance(term, Var) and isinstance(node, type(term))
                                    and getattr(node, "op", None) == term.op
                                    and L.to_text(node) == key):
                    out = by
                else:
                    out = L.map_children(node, replace)
                memo[id(node)] = out
                return out
            return replace(body)

        self.ranges[t] = (lo, hi)
        self.memo.clear()
        inside = self.stmt(replaced(t))
        self.ranges.pop(t)
        self.memo.clear()
        self.partition = False
        b = self.bounds(term)
        if b is not None and b[1] - b[0] == hi - lo + 1:   # one value left: an end of the range
            outside = self.stmt(replaced(IntImm(b[0] if b[0] < lo else b[1], term.dtype)))
        else:
            outside = self.stmt(body)
        self.partition = True
        self.memo.clear()
        cond = L.logical_and(t >= IntImm(lo, t.dtype), t <= IntImm(hi, t.dtype))
        return LetStmt(t, self.expr(term), IfThenElse(cond, inside, outside))

    def cut_points(self, var, compare, inner: dict, key: str | None = None) -> tuple:
        """Where ``compare`` (a comparison of integers affine in ``var``) may turn: points ``t``
        such that on each side of every one the comparison holds for every value of its other
        variables, fails for every one, or neither. Its other variables are loops inside this
        one (``inner``: their ranges) or around it (known ranges); ``a * var + r + c >= 0``
        with ``r`` in ``[lo, hi]`` holds for all ``r`` past the point of ``c + lo`` and for
        none past that of ``c + hi``. No points for a comparison that is not affine in
        ``var`` or whose other terms have no known range. With ``key``, ``var`` is a term (an
        expression whose text is ``key``) rather than a variable."""
        form = self.linear(compare.a - compare.b)
        if form is None:
            return ()
        terms, const = form
        coef, lo, hi = 0, 0, 0
        for term, (node, k) in terms.items():
            if node is var or (key is not None and term == key):
                coef = k
                continue
            b = inner.get(node) if isinstance(node, Var) else None
            if b is None:
                b = self.bounds(node)
            if b is None:
                return ()
            lo, hi = lo + min(k * b[0], k * b[1]), hi + max(k * b[0], k * b[1])
        if not coef:
            return ()
        points = []
        for offset in {lo, hi}:
            c = const + offset
            # as a * var + c >= 0 (true on one side of the point)
            a, c = {">=": (coef, c), ">": (coef, c - 1), "<=": (-coef, -c),
                    "<": (-coef, -c - 1)}.get(compare.op, (coef, c))
            if compare.op in ("==", "!="):   # hold or fail at one point: cut on both sides
                if a > 0:
                    points += [-(c // a), -(c // a) + 1] if c % a == 0 else []
                else:
                    points += [c // -a, c // -a + 1] if c % a == 0 else []
            elif a > 0:
                points.append(-(c // a))              # var >= ceil(-c / a)
            else:
                points.append(c // -a + 1)            # var <= floor(c / -a)
        return points

    # ------------------------------------------------------------------ affine forms
    def linear(self, e):
        """``(terms, const)``: terms maps a key to ``[node, coefficient]``; None when ``e`` is not
        an integer expression."""
        if not _is_int(e.dtype):
            return None
        if isinstance(e, IntImm):
            return {}, e.value
        if isinstance(e, Binary) and e.op in ("+", "-"):
            a, b = self.linear(e.a), self.linear(e.b)
            if a is not None and b is not None:
                sign = 1 if e.op == "+" else -1
                terms = {k: [n, c] for k, (n, c) in a[0].items()}
                for k, (n, c) in b[0].items():
                    if k in terms:
                        terms[k][1] += sign * c
                    else:
                        terms[k] = [n, sign * c]
                return {k: v for k, v in terms.items() if v[1]}, a[1] + sign * b[1]
        if isinstance(e, Binary) and e.op == "*":
            a, b = self.linear(e.a), self.linear(e.b)
            if a is not None and b is not None:
                if not a[0]:
                    a, b = b, a
                if not b[0]:
                    f = b[1]
                    return {k: [n, c * f] for k, (n, c) in a[0].items() if c * f}, a[1] * f
        return {L.to_text(e): [e, 1]}, 0

    def rebuild(self, form, dtype: str):
        terms, const = form
        out = None
        for node, coef in terms.values():
            if coef == 0:
                continue
            if coef == 1:
                term = node
            elif coef == -1 and out is not None:
                out = out - node
                continue
            else:
                term = node * IntImm(_wrap(coef, dtype), dtype)
            out = term if out is None else out + term
        const = _wrap(const, dtype)
        if out is None:
            return IntImm(const, dtype)
        if const > 0:
            out = out + IntImm(const, dtype)
        elif const < 0:
            out = out - IntImm(-const, dtype)
        return out

    def form_bounds(self, form):
        terms, const = form
        lo = hi = const
        for node, coef in terms.values():
            b = self.bounds(node)
            if b is None:
                return None
            a, z = b[0] * coef, b[1] * coef
            lo += min(a, z)
            hi += max(a, z)
        return lo, hi

    def bounds(self, e):
        """``(low, high)`` of an integer expression over the known ranges, or None (also when
        the expression could wrap around its dtype, where its exact value is not its value)."""
        if not _is_int(e.dtype) and e.dtype != "bool":
            return None
        found = self._bounds(e)
        return found if _exact(found, e.dtype) else None

    def _bounds(self, e):
        if isinstance(e, IntImm):
            return e.value, e.value
        if isinstance(e, Var):
            return self.ranges.get(e)
        if isinstance(e, Cast):
            return self.bounds(e.value) if _is_int(e.value.dtype) else None
        if isinstance(e, Select):
            a, b = self.bounds(e.true_value), self.bounds(e.false_value)
            if a is None or b is None:
                return None
            return min(a[0], b[0]), max(a[1], b[1])
        if isinstance(e, Binary):
            if e.op in ("+", "-", "*"):
                form = self.linear(e)
                if form is not None and not (len(form[0]) == 1 and
                                             next(iter(form[0].values()))[0] is e):
                    return self.form_bounds(form)
                a, b = self.bounds(e.a), self.bounds(e.b)
                if e.op == "*" and a is not None and b is not None:
                    products = [x * y for x in a for y in b]
                    return min(products), max(products)
                return None
            if e.op in ("//", "%") and isinstance(e.b, IntImm) and e.b.value > 0:
                c = e.b.value
                if e.op == "%":
                    a = self.bounds(e.a)
                    if a is not None and a[0] // c == a[1] // c:
                        return a[0] % c, a[1] % c
                    return 0, c - 1
                a = self.bounds(e.a)
                return None if a is None else (a[0] // c, a[1] // c)
            if e.op in ("min", "max"):
                a, b = self.bounds(e.a), self.bounds(e.b)
                if a is None or b is None:
                    return None
                f = min if e.op == "min" else max
                return f(a[0], b[0]), f(a[1], b[1])
        return None

    # ------------------------------------------------------------------ expressions
    def expr(self, e):
        if e in self.memo:
            return self.memo[e]
        out = self._expr(e)
        self.memo[e] = out
        return out

    def _expr(self, e):
        if isinstance(e, (IntImm, L.FloatImm, Var)):
            return e
        e = L.map_children(e, self.expr)
        if isinstance(e, Binary):
            return self._binary(e)
        if isinstance(e, Unary) and e.op == "not" and isinstance(e.a, IntImm):
            return IntImm(1 - e.a.value, "bool")
        if isinstance(e, Select) and isinstance(e.cond, IntImm):
            return e.true_value if e.cond.value else e.false_value
        if isinstance(e, Cast) and isinstance(e.value, IntImm) and _is_int(e.dtype):
            return IntImm(_wrap(e.value.value, e.dtype), e.dtype)
        return e

    def _binary(self, e):
        op = e.op
        if op in ("and", "or"):
            for side, other in ((e.a, e.b), (e.b, e.a)):
                if isinstance(side, IntImm):
                    if op == "and":
                        return other if side.value else IntImm(0, "bool")
                    return IntImm(1, "bool") if side.value else other
            return e
        if op in L.COMPARE_OPS and _is_int(e.a.dtype):
            diff = self.linear(e.a - e.b)
            b = self.form_bounds(diff) if diff is not None else None
            # decided only where no operand can wrap (the difference is taken exactly)
            if (b is not None and _exact(self.bounds(e.a), e.a.dtype)
                    and _exact(self.bounds(e.b), e.b.dtype)):
                lo, hi = b
                decided = {"<": (hi < 0, lo >= 0), "<=": (hi <= 0, lo > 0),
                           ">": (lo > 0, hi <= 0), ">=": (lo >= 0, hi < 0),
                           "==": (lo == hi == 0, lo > 0 or hi < 0),
                           "!=": (lo > 0 or hi < 0, lo == hi == 0)}[op]
                if decided[0]:
                    return IntImm(1, "bool")
                if decided[1]:
                    return IntImm(0, "bool")
            return e
        if not _is_int(e.dtype):
            return e
        if op in ("min", "max"):
            a, b = self.bounds(e.a), self.bounds(e.b)
            if a is not None and b is not None:
                if a[1] <= b[0]:
                    return e.a if op == "min" else e.b
                if b[1] <= a[0]:
                    return e.b if op == "min" else e.a
            return e
        if (op == "//" and isinstance(e.b, IntImm) and e.b.value > 0 and isinstance(e.a, Binary)
                and e.a.op == "//" and isinstance(e.a.b, IntImm) and e.a.b.value > 0):
            # floor(floor(x / a) / b) == floor(x / (a * b)) for positive a and b
            return self._binary(Binary("//", e.a.a, IntImm(e.a.b.value * e.b.value, e.dtype),
                                       e.dtype))
        if op in ("//", "%") and isinstance(e.b, IntImm) and e.b.value > 0:
            c = e.b.value
            form = self.linear(e.a)
            terms, const = form
            quotient = {k: [n, co // c] for k, (n, co) in terms.items() if co % c == 0}
            rest = ({k: [n, co] for k, (n, co) in terms.items() if co % c}, const)
            rb = self.form_bounds(rest)
            if not _exact(self.form_bounds(form), e.dtype):
                rb = None  # the dividend may wrap: the terms cannot be split off
            if rb is not None and rb[0] // c == rb[1] // c:
                k = rb[0] // c
                if op == "//":
                    return self.rebuild((quotient, k), e.dtype)
                return self.rebuild((rest[0], const - k * c), e.dtype)
            if op == "%" and quotient and rb is None:
                return e
            if quotient and op == "%":
                # (q*c + r) % c == r % c
                return Binary("%", self.rebuild(rest, e.dtype), e.b, e.dtype)
            return e
        if op in ("+", "-", "*"):
            form = self.linear(e)
            if form is not None:
                return self.rebuild(self.merge_div_mod(form), e.dtype)
        return e

    def merge_div_mod(self, form):
        """``form`` with each pair of terms ``(y // c) * (c * k) + (y % c) * k`` replaced by
        ``y * k`` (floor division and modulo by ``c > 0``: always equal), until none is left;
        where ``y`` is ``x // d``, ``y // c`` may be written ``x // (c * d)``.
        A fused loop's index split back into a tensor's axes and flattened again comes back to
        the fused index: ``((i // 6) * 6 + i % 6) * 4`` is ``i * 4``."""
        terms, const = form
        while True:
            # y % c pairs with y // c, and, where y is x // d, with x // (c * d) (the form
            # that the rule for // of // gives)
            mods = {}
            for key, (node, coef) in terms.items():
                if (isinstance(node, Binary) and node.op == "%" and isinstance(node.b, IntImm)
                        and node.b.value > 0):
                    y, c = node.a, node.b.value
                    mods[(L.to_text(y), c)] = key, y, c
                    if (isinstance(y, Binary) and y.op == "//" and isinstance(y.b, IntImm)
                            and y.b.value > 0):
                        mods[(L.to_text(y.a), c * y.b.value)] = key, y, c
            if not mods:
                return terms, const
            merged = None
            for key, (node, coef) in terms.items():
                if (isinstance(node, Binary) and node.op == "//" and isinstance(node.b, IntImm)
                        and node.b.value > 0):
                    found = mods.get((L.to_text(node.a), node.b.value))
                    if found is not None and coef == found[2] * terms[found[0]][1]:
                        merged = key, found[0], found[1], terms[found[0]][1]
                        break
            if merged is None:
                return terms, const
            key, mod_key, x, k = merged
            inner = self.linear(x)
            if inner is None:
                return terms, const
            terms = {t: [n, c] for t, (n, c) in terms.items() if t not in (key, mod_key)}
            for t, (n, c) in inner[0].items():
                if t in terms:
                    terms[t][1] += c * k
                else:
                    terms[t] = [n, c * k]
            terms = {t: v for t, v in terms.items() if v[1]}
            const += inner[1] * k

    # ------------------------------------------------------------------ statements
    def stmt(self, s):
        stack_result = None
        if isinstance(s, For):
            begin, extent = self.expr(s.begin), self.expr(s.extent)
            if isinstance(begin, IntImm) and isinstance(extent, IntImm):
                if extent.value == 1:
                    body = L.substitute(s.body, {s.var: begin})
                    self.memo.clear()
                    return self.stmt(body)
                saved = self.ranges.get(s.var)
                self.ranges[s.var] = (begin.value, begin.value + extent.value - 1)
                self.memo.clear()
                cuts = self.cuts(s, s.body, begin.value, begin.value + extent.value) \
                    if self.partition and s.kind == "serial" and extent.value > 2 else []
                split, canonical = None, s.body
                if self.partition and s.kind == "parallel":
                    # the body simplified first: a term reads the same everywhere (the tile
                    # ``f // 2 % 8`` of a fused loop is ``f // 2`` in one place and not yet in
                    # another), so that every read of it is replaced
                    self.partition = False
                    canonical = self.stmt(s.body)
                    self.partition = True
                    self.memo.clear()
                    split = self.term_split(s, canonical)
                if split is not None:
                    body = self.split_body(canonical, *split)
                elif cuts:
                    # the widest segment (the interior) has its inner loops partitioned too; the
                    # edges keep their guards: partitioning them again would multiply the copies
                    # of the body for a few iterations
                    bounds = list(zip([begin.value] + cuts, cuts + [begin.value + extent.value]))
                    middle = (len(bounds) - 1) / 2
                    widest = max(range(len(bounds)), key=lambda k: (bounds[k][1] - bounds[k][0],
                                                                    -abs(k - middle)))
                    parts = []
                    for k, (lo, hi) in enumerate(bounds):
                        self.ranges[s.var] = (lo, hi - 1)
                        self.memo.clear()
                        self.partition = k == widest
                        parts.append(self.stmt(For(s.var, IntImm(lo, begin.dtype),
                                                   IntImm(hi - lo, extent.dtype), s.kind,
                                                   s.body)))
                    self.partition = True
                    body = None
                else:
                    body = self.stmt(s.body)
                if saved is None:
                    self.ranges.pop(s.var, None)
                else:
                    self.ranges[s.var] = saved
                self.memo.clear()
                if body is None:
                    return L.seq(*parts)
            else:
                body = self.stmt(s.body)
            return For(s.var, begin, extent, s.kind, body)
        if isinstance(s, IfThenElse):
            cond = self.expr(s.cond)
            if isinstance(cond, IntImm):
                if cond.value:
                    return self.stmt(s.then_case)
                return self.stmt(s.else_case) if s.else_case is not None else SeqStmt(())
            return IfThenElse(cond, self.stmt(s.then_case),
                              self.stmt(s.else_case) if s.else_case is not None else None)
        if isinstance(s, SeqStmt):
            parts = [self.stmt(x) for x in s.stmts]
            return L.seq(*[p for p in parts if not (isinstance(p, SeqStmt) and not p.stmts)])
        if isinstance(s, LetStmt):
            value = self.expr(s.value)
            b = self.bounds(value) if _is_int(value.dtype) else None
            if b is not None:
                self.ranges[s.var] = b
            body = self.stmt(s.body)
            self.ranges.pop(s.var, None)
            self.memo.clear()
            return LetStmt(s.var, value, body)
        if isinstance(s, Allocate):
            return Allocate(s.buffer, self.stmt(s.body))
        return stack_result if stack_result is not None else L.map_children(s, self.expr)


def simplify(expr: Expr, ranges: dict | None = None) -> Expr:
    """``expr`` simplified, ``ranges`` giving each variable's inclusive ``(low, high)``."""
    return _Simplifier(ranges or {}).expr(L.convert(expr))


def bounds(expr: Expr, ranges: dict | None = None):
    """The inclusive ``(low, high)`` of an integer expression over ``ranges``, or None."""
    return _Simplifier(ranges or {}).bounds(L.convert(expr))


def simplify_stmt(stmt, ranges: dict | None = None, partition: bool = False):
    """``stmt`` with its expressions simplified (see the module); with ``partition``, serial
    loops are also split where a condition over their variable turns (see
    :func:`simplify_func`)."""
    return _Simplifier(ranges or {}, partition).stmt(stmt)


def simplify_func(func: PrimFunc, partition: bool = False) -> PrimFunc:
    """``func`` with its body simplified. With ``partition``, a serial loop whose body holds a
    condition over the loop's variable (a padding guard) is split into consecutive loops where
    the condition does not change, each simplified with its own range: the guard and the index
    clamps under it disappear from the interior loop, and the edges keep only what holds there.
    A parallel loop's body branches instead, on the term of its variable the guards read.

    >>> from relaybench.te import loop_ir as L
    >>> A, P = L.Buffer("A", (4,), "float32"), L.Buffer("P", (6,), "float32")
    >>> x = L.Var("x")
    >>> inside = L.logical_and(x - 1 >= 0, x - 1 < 4)
    >>> clamp = L.min_expr(L.max_expr(x - 1, 0), 3)
    >>> body = L.Store(P, (x,), L.select(inside, L.Load(A, (clamp,)), 0.0))
    >>> print(simplify_func(L.PrimFunc("pad", [A, P], L.For(x, 0, 6, "serial", body)),
    ...                     partition=True).body)
    P[0] = 0.0
    for x in serial(1, 5):
        P[x] = A[x - 1]
    P[5] = 0.0
    """
    return PrimFunc(func.name, func.params, simplify_stmt(func.body, partition=partition))
