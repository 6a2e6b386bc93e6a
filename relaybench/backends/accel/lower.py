"""Lowering a packed int8 convolution group to the accelerator's instruction stream.

A fused group runs on the accelerator when it is a packed convolution with an epilogue the
tensor ALU can compute (what :func:`relaybench.passes.graph_pack` and FuseOps leave of a quantized
network): ``nn.conv2d`` of int8 data in ``NCHW{b}n{c}c`` and int8 constant weights in
``OIHW{c}o{c}i`` into int32 (``b`` the design's batch, ``c`` its block), one group, no dilation,
followed by a chain of

* ``add`` / ``subtract`` of a per-channel constant (the bias, ``(1, C/c, 1, 1, 1, c)``): ALU ADD
  of the bias, loaded into the accumulator; of a scalar constant: ADD immediate;
* ``multiply`` by a scalar: MUL immediate; ``right_shift`` / ``left_shift`` by a scalar: SHR
  immediate (a left shift is a negative amount);
* ``nn.relu``, ``clip`` with integer bounds, ``maximum`` / ``minimum`` with a scalar: MAX / MIN
  immediate;
* ``cast`` to int32 (nothing to do) and, last, ``cast`` to int8: the STORE's narrowing (the low
  8 bits, as the CPU's cast wraps).

:func:`plan_group` says whether a group qualifies (:class:`ConvPlan`) or why not (a string).
:func:`lower_conv` makes the program, by VTA's schedule for ``conv2d_packed``:

* **tiles.** The output is cut into tiles of ``TOC`` output-channel blocks by ``TH`` rows (whole
  rows: ``TH`` divides the output height), for each batch block. A tile's input is every input
  channel block's rows that its output rows read, padded by the LOAD itself (``y_pad``/``x_pad``
  at the borders); its weights, the ``TOC`` blocks' ``C/c x kh x kw`` tiles of ``c x c``, are
  loaded when the channel tile changes (the loop over channel tiles is outermost, so each weight
  is loaded once).
* **double buffering** (VTA's virtual threads): every buffer is split in two halves; tile ``t``
  uses half ``t % 2`` of the input and accumulator buffers and half ``k % 2`` of the weight
  buffer for channel tile ``k``. The load module loads tile ``t + 1`` while the compute module
  works on tile ``t`` and the store module writes tile ``t - 1`` out. The dependence tokens:
  the last LOAD of a tile pushes to compute (data ready); the first compute instruction of the
  tile pops it, and from tile 2 on also pops the store's token of tile ``t - 2`` (its
  accumulator half is free); the last compute instruction pushes to load (input half free: the
  first LOAD of tile ``t + 2`` pops it) and to store (results ready); the last STORE of the tile
  pushes to compute.
* **compute** per tile: LOAD ACC of the bias (when there is a per-channel one), a GEMM that
  resets the tile's accumulators, the GEMM proper — micro-ops over (row, input channel block,
  kernel row, kernel column), ``iter_out`` over the tile's channel blocks, ``iter_in`` over the
  output columns (``src`` stepping by the stride) — then one ALU instruction per epilogue step.
  Every micro-op table (one per combination of halves) is loaded once, at the start.

The GEMM runs one ``(b x c) . (c x c)`` product per cycle; the cycle counts are the simulator's
(:mod:`.simulator`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ...ir.expr import Call, Constant, Function, Op, Var
from ...ir.types import TensorType
from .config import AccelConfig
from .isa import AluOp, MemType, Program, Uop, alu, finish, gemm, load, store

__all__ = ["ConvPlan", "Tiling", "plan_group", "choose_tiling", "lower_conv", "LoweredConv"]

_PACKED_DATA = re.compile(r"^NCHW(\d+)n(\d+)c$")
_PACKED_KERNEL = re.compile(r"^OIHW(\d+)o(\d+)i$")

_IMM_MIN, _IMM_MAX = -(1 << 15), (1 << 15) - 1


@dataclass
class ConvPlan:
    """What one group computes, in the accelerator's terms. The weights and the bias come from
    the group's parameters (``*_param``: their index; the graph passes the constants it holds) or
    from constants inside the group (``weight`` / ``bias`` set)."""

    data_shape: tuple            # (N/b, C/c, H, W, b, c)
    out_shape: tuple             # (N/b, O/c, OH, OW, b, c)
    weight_shape: tuple          # (O/c, C/c, kh, kw, c, c)
    strides: tuple
    padding: tuple               # top, left, bottom, right
    data_param: int = 0
    weight_param: Optional[int] = None
    weight: Optional[np.ndarray] = None
    has_bias: bool = False
    bias_param: Optional[int] = None
    bias: Optional[np.ndarray] = None
    bias_sign: int = 1
    steps: list = field(default_factory=list)   # [(AluOp, imm)] after the bias; imm None: + residual
    residual_param: Optional[int] = None         # a tensor added in the accumulator (a shortcut)
    residual_dtype: str = "int8"
    residual_steps: list = field(default_factory=list)   # [(AluOp, imm)] on it before the add

    @property
    def kernel(self) -> tuple:
        return tuple(self.weight_shape[2:4])

    @property
    def macs(self) -> int:
        n, o, oh, ow, b, c = self.out_shape
        return n * b * o * c * oh * ow * self.weight_shape[1] * c * self.kernel[0] * self.kernel[1]

    def bias_values(self, raw) -> np.ndarray:
        """The bias as ``(O/c, c)`` int32 with its sign applied; an error when it leaves int32."""
        value = self.bias_sign * np.asarray(raw).astype(np.int64).reshape(self.out_shape[1], -1)
        if value.size and (value.min() < -(1 << 31) or value.max() >= 1 << 31):
            raise ValueError("the bias leaves int32 once negated")
        return value.astype(np.int32)


def _const(expr) -> Optional[np.ndarray]:
    return expr.data if isinstance(expr, Constant) else None


def _scalar(expr) -> Optional[int]:
    value = _const(expr)
    if value is None or value.size != 1:
        return None
    v = value.reshape(()).item()
    if float(v) != int(v):
        return None
    return int(v)


def _imm(value: int, what: str):
    if not _IMM_MIN <= value <= _IMM_MAX:
        return f"{what} {value} does not fit the ALU's 16-bit immediate"
    return None


def _residual(expr, params: list, shape: tuple):
    """``(param index, dtype, steps)`` when ``expr`` is an elementwise chain of scalar
    operations on a parameter of the output's shape (a residual shortcut, as quantization
    leaves it: ``left_shift(cast(%p, int32), k)``), else a string saying why not."""
    steps = []
    while isinstance(expr, Call) and isinstance(expr.op, Op):
        name, args = expr.op.name, expr.args
        if name == "cast":
            if str(expr.attrs.dtype) != "int32" or str(args[0].checked_type.dtype) not in ("int8", "int32"):
                return f"a residual cast to {expr.attrs.dtype}"
        elif name == "nn.relu":
            steps.append((AluOp.MAX, 0))
        elif name == "clip":
            lo, hi = float(expr.attrs.a_min), float(expr.attrs.a_max)
            if lo != int(lo) or hi != int(hi):
                return "a residual clip with bounds that are not integers"
            steps += [(AluOp.MIN, min(int(hi), _IMM_MAX)), (AluOp.MAX, max(int(lo), _IMM_MIN))]
        else:
            scalar = _scalar(args[1]) if len(args) == 2 else None
            table = {"left_shift": (AluOp.SHR, -1), "right_shift": (AluOp.SHR, 1),
                     "add": (AluOp.ADD, 1), "subtract": (AluOp.ADD, -1),
                     "multiply": (AluOp.MUL, 1), "maximum": (AluOp.MAX, 1),
                     "minimum": (AluOp.MIN, 1)}
            if scalar is None or name not in table:
                return f"a residual computed by {name}"
            op, sign = table[name]
            bad = _imm(sign * scalar, name)
            if bad:
                return bad
            steps.append((op, sign * scalar))
        expr = args[0]
    if not (isinstance(expr, Var) and expr in params):
        return "a residual computed inside the group"
    t = expr.checked_type
    if tuple(int(d) for d in t.shape) != shape or str(t.dtype) not in ("int8", "int32"):
        return f"a residual of type {t}"
    steps.reverse()
    return params.index(expr), str(t.dtype), steps


def plan_group(func: Function, config: AccelConfig):
    """A :class:`ConvPlan` when the Primitive function ``func`` runs on the accelerator, else a
    string saying why it stays on the CPU."""
    body = func.body
    chain = []
    node = body
    while isinstance(node, Call) and isinstance(node.op, Op) and node.op.name != "nn.conv2d":
        chain.append(node)
        if not node.args:
            return "not a convolution group"
        node = node.args[0]
    if not (isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == "nn.conv2d"):
        return "no nn.conv2d"
    conv = node
    a = conv.attrs
    data_m, kernel_m = _PACKED_DATA.match(a.data_layout or ""), _PACKED_KERNEL.match(a.kernel_layout or "")
    if not data_m or not kernel_m:
        return f"conv2d layouts {a.data_layout}/{a.kernel_layout} are not packed"
    b, c = int(data_m.group(1)), int(data_m.group(2))
    if (b, c) != (config.batch, config.block_in) or config.block_in != config.block_out:
        return (f"packed for batch {b} x block {c}; the design computes batch {config.batch} x "
                f"block {config.block_in}->{config.block_out}")
    if (a.out_layout or a.data_layout) != a.data_layout or a.groups != 1 \
            or tuple(a.dilation) != (1, 1):
        return "grouped, dilated or re-laid-out convolution"
    params = list(func.params)
    data, weight = conv.args
    if not isinstance(data, Var) or data not in params:
        return "the convolution's data is computed inside the group"
    dtype = lambda e: str(e.checked_type.dtype)  # noqa: E731
    if dtype(data) != "int8" or dtype(weight) != "int8" or dtype(conv) != "int32":
        return "not int8 data x int8 weights into int32"
    if isinstance(weight, Var) and weight in params:
        weight_param, weight_value = params.index(weight), None
    elif isinstance(weight, Constant):
        weight_param, weight_value = None, weight.data
    else:
        return "the weights are computed inside the group"
    plan = ConvPlan(tuple(int(d) for d in data.checked_type.shape),
                    tuple(int(d) for d in body.checked_type.shape),
                    tuple(int(d) for d in weight.checked_type.shape),
                    tuple(int(s) for s in a.strides), tuple(int(p) for p in a.padding),
                    data_param=params.index(data), weight_param=weight_param, weight=weight_value)
    chain.reverse()
    for k, call in enumerate(chain):
        name, args = call.op.name, call.args
        last = k == len(chain) - 1
        if name == "cast":
            to = str(call.attrs.dtype)
            if to == "int32" and dtype(args[0]) == "int32":
                continue
            if to == "int8" and last:
                continue
            return f"cast to {to} inside the epilogue"
        if dtype(call) != "int32":
            return f"{name} computes {dtype(call)}, not int32"
        if name == "nn.relu":
            plan.steps.append((AluOp.MAX, 0))
            continue
        if name == "clip":
            lo, hi = float(call.attrs.a_min), float(call.attrs.a_max)
            if lo != int(lo) or hi != int(hi):
                return "clip with bounds that are not integers"
            plan.steps += [(AluOp.MAX, max(int(lo), _IMM_MIN)), (AluOp.MIN, min(int(hi), _IMM_MAX))]
            continue
        if len(args) != 2 or args[1] is args[0]:
            return f"{name} is not an operation with a constant"
        other = args[1]
        scalar = _scalar(other)
        if name in ("add", "subtract"):
            sign = 1 if name == "add" else -1
            if scalar is not None:
                bad = _imm(sign * scalar, name)
                if bad:
                    return bad
                plan.steps.append((AluOp.ADD, sign * scalar))
                continue
            o, c = plan.out_shape[1], plan.out_shape[5]
            shape = tuple(int(d) for d in other.checked_type.shape)
            leading_bias = (not plan.has_bias and not plan.steps and dtype(other) == "int32"
                            and shape in ((1, o, 1, 1, 1, c), (o, 1, 1, 1, c))
                            and (isinstance(other, Constant) or other in params))
            if (shape == plan.out_shape and name == "add" and not isinstance(other, Constant)
                    and not leading_bias):
                if plan.residual_param is not None:
                    return "more than one tensor added in the epilogue"
                found = _residual(other, params, plan.out_shape)
                if isinstance(found, str):
                    return found
                plan.residual_param, plan.residual_dtype, plan.residual_steps = found
                plan.steps.append((AluOp.ADD, None))
                continue
            if plan.has_bias or plan.steps or dtype(other) != "int32" \
                    or shape not in ((1, o, 1, 1, 1, c), (o, 1, 1, 1, c)):
                return f"{name} of something other than a scalar or a leading per-channel bias"
            plan.has_bias, plan.bias_sign = True, sign
            if isinstance(other, Var) and other in params:
                plan.bias_param = params.index(other)
            elif isinstance(other, Constant):
                plan.bias = other.data
            else:
                return f"{name} of a bias computed inside the group"
            continue
        if scalar is None:
            return f"{name} by something other than a scalar constant"
        if name == "multiply":
            op, imm = AluOp.MUL, scalar
        elif name == "right_shift":
            op, imm = AluOp.SHR, scalar
        elif name == "left_shift":
            op, imm = AluOp.SHR, -scalar
        elif name == "maximum":
            op, imm = AluOp.MAX, scalar
        elif name == "minimum":
            op, imm = AluOp.MIN, scalar
        else:
            return f"{name} has no ALU instruction"
        bad = _imm(imm, name)
        if bad:
            return bad
        plan.steps.append((op, imm))
    if dtype(body) != "int8":
        return f"the group's result is {dtype(body)}; the accelerator stores int8"
    return plan


@dataclass(frozen=True)
class Tiling:
    """``toc`` output-channel blocks by ``th`` output rows per tile, the input channel blocks in
    chunks of ``tic`` (all of them when they fit: the weights of a channel tile are then loaded
    once); the buffer halves' sizes."""

    toc: int
    th: int
    tic: int
    rows: int        # input rows a tile reads (padding included)
    inp_half: int
    wgt_half: int
    acc_half: int

    def chunks(self, icb: int) -> int:
        return icb // self.tic


def choose_tiling(plan: ConvPlan, config: AccelConfig):
    """The largest tiles whose data fit half of each buffer (double buffering), as a
    :class:`Tiling`, or a string saying what does not fit. Whole input channels are preferred;
    when one output row's input over every channel does not fit, the reduction is split into
    chunks of input channel blocks, accumulated one after another."""
    _, icb, h, w, _, _ = plan.data_shape
    _, ocb, oh, ow, _, _ = plan.out_shape
    kh, kw = plan.kernel
    sh, sw = plan.strides
    pt, pl, pb, pr = plan.padding
    wp = w + pl + pr
    inp_half, wgt_half = config.inp_depth // 2, config.wgt_depth // 2
    acc_half = config.acc_depth // 2
    factor = 2 if plan.residual_param is not None else 1
    for tic in [d for d in range(icb, 0, -1) if icb % d == 0]:
        per_block = tic * kh * kw
        for toc in [t for t in range(ocb, 0, -1) if ocb % t == 0 and t * per_block <= wgt_half]:
            for th in [d for d in range(oh, 0, -1) if oh % d == 0]:
                rows = (th - 1) * sh + kh
                tile_acc = toc * th * ow
                if (tic * rows * wp <= inp_half and factor * tile_acc + toc <= acc_half
                        and 8 * th * per_block + 12 <= config.uop_depth and ow < 1 << 14
                        and toc * th < 1 << 14 and tile_acc < 1 << 14):
                    return Tiling(toc, th, tic, rows, inp_half, wgt_half, acc_half)
    return (f"not even one output row of {ow} columns over one input channel block fits: "
            f"{kh} rows x {wp} columns against half the input buffer ({inp_half}), or "
            f"{kh * kw} weight tiles against half the weight buffer ({wgt_half})")


@dataclass
class LoweredConv:
    """The program of one group and the DRAM regions it reads and writes."""

    program: Optional[Program]
    plan: ConvPlan
    tiling: Tiling
    tiles: int
    regions: dict          # role -> (name, MemType, count)


def lower_conv(plan: ConvPlan, config: AccelConfig, tiling: Optional[Tiling] = None,
               prefix: str = "") -> LoweredConv:
    """The regions a :class:`ConvPlan` needs and its tiling; :func:`emit` then makes the program
    once the regions have DRAM addresses."""
    if tiling is None:
        tiling = choose_tiling(plan, config)
        if isinstance(tiling, str):
            raise ValueError(tiling)
    nb, icb, h, w, b, c = plan.data_shape
    _, ocb, oh, ow, _, _ = plan.out_shape
    kh, kw = plan.kernel
    per_block = icb * kh * kw
    regions = {"data": (prefix + "data", MemType.INP, nb * icb * h * w),
               "weight": (prefix + "weight", MemType.WGT, ocb * per_block),
               "out": (prefix + "out", MemType.OUT, nb * ocb * oh * ow)}
    if plan.has_bias:
        regions["bias"] = (prefix + "bias", MemType.ACC, ocb)
    if plan.residual_param is not None:
        kind = MemType.ACC_8BIT if plan.residual_dtype == "int8" else MemType.ACC
        regions["residual"] = (prefix + "residual", kind, nb * ocb * oh * ow)
    return LoweredConv(None, plan, tiling, 0, regions)


def emit(lowered: LoweredConv, config: AccelConfig, bases: dict) -> LoweredConv:
    """Fill ``lowered.program`` given the DRAM base of each region (role -> element address)."""
    plan, tiling = lowered.plan, lowered.tiling
    nb, icb, h, w, b, c = plan.data_shape
    _, ocb, oh, ow, _, _ = plan.out_shape
    kh, kw = plan.kernel
    sh, sw = plan.strides
    pt, pl, pb, pr = plan.padding
    wp = w + pl + pr
    toc, th, tic, rows = tiling.toc, tiling.th, tiling.tic, tiling.rows
    chunks = tiling.chunks(icb)
    per_chunk = tic * kh * kw
    inp_base = (0, tiling.inp_half)
    wgt_base = (0, tiling.wgt_half)
    acc_base = (0, tiling.acc_half)
    tile_acc = toc * th * ow
    bias_at = tuple(base + tile_acc for base in acc_base)
    res_at = tuple(base + tile_acc + toc for base in acc_base)
    residual = plan.residual_param is not None

    # the micro-op tables: a GEMM table per (input half, weight half, accumulator half) used; a
    # reset and an ALU entry per accumulator half, and a bias, a residual and a residual-add one
    # when the group has them
    uops: list = []
    gemm_range: dict = {}

    def gemm_table(si, sw_, sa):
        key = (si, sw_, sa)
        if key not in gemm_range:
            start = len(uops)
            for r in range(th):
                for i in range(tic):
                    for y in range(kh):
                        for x in range(kw):
                            uops.append(Uop(acc_base[sa] + r * ow,
                                            inp_base[si] + (i * rows + r * sh + y) * wp + x,
                                            wgt_base[sw_] + (i * kh + y) * kw + x))
            gemm_range[key] = (start, len(uops))
        return gemm_range[key]

    def single(uop):
        uops.append(uop)
        return len(uops) - 1, len(uops)

    reset_range = {s: single(Uop(acc_base[s], 0, 0)) for s in (0, 1)}
    alu_range = {s: single(Uop(acc_base[s], acc_base[s], 0)) for s in (0, 1)}
    if plan.has_bias:
        bias_range = {s: single(Uop(acc_base[s], bias_at[s], 0)) for s in (0, 1)}
    if residual:   # only then is room kept for it (choose_tiling)
        res_range = {s: single(Uop(res_at[s], res_at[s], 0)) for s in (0, 1)}
        add_range = {s: single(Uop(acc_base[s], res_at[s], 0)) for s in (0, 1)}

    def with_deps(insn_list, first_deps: set, last_deps: set):
        """The instructions, with the dependence flags of the first and the last set."""
        out = []
        for j, (make, kwargs) in enumerate(insn_list):
            deps = set()
            if j == 0:
                deps |= first_deps
            if j == len(insn_list) - 1:
                deps |= last_deps
            out.append(make(**kwargs, deps=" ".join(sorted(deps)) or None))
        return out

    tiles = [(k, n, r0) for k in range(ocb // toc) for n in range(nb) for r0 in range(0, oh, th)]
    body = []
    u = 0                  # the load unit: one chunk of one tile
    for t, (k, n, r0) in enumerate(tiles):
        sa = t % 2
        for q in range(chunks):
            si = u % 2
            sw_ = k % 2 if chunks == 1 else u % 2
            # ---- load: the weights (once per channel tile when whole), the input rows
            part = []
            if chunks > 1 or t == 0 or tiles[t - 1][0] != k:
                part.append((load, dict(mem_type=MemType.WGT, sram_base=wgt_base[sw_],
                                        dram_base=bases["weight"] + (k * toc * icb + q * tic) * kh * kw,
                                        y_size=toc, x_size=per_chunk, x_stride=icb * kh * kw)))
            first_row = r0 * sh - pt
            y0, y1 = max(0, -first_row), max(0, first_row + rows - 1 - (h - 1))
            for i in range(tic):
                channel = q * tic + i
                part.append((load, dict(mem_type=MemType.INP, sram_base=inp_base[si] + i * rows * wp,
                                        dram_base=bases["data"] + ((n * icb + channel) * h
                                                                   + first_row + y0) * w,
                                        y_size=rows - y0 - y1, x_size=w, x_stride=w,
                                        pads=(y0, y1, pl, pr))))
            body += with_deps(part, {"pop_next"} if u >= 2 else set(), {"push_next"})
            # ---- compute
            part = []
            if q == 0:
                if plan.has_bias:
                    part.append((load, dict(mem_type=MemType.ACC, sram_base=bias_at[sa],
                                            dram_base=bases["bias"] + k * toc, y_size=1, x_size=toc)))
                if residual:
                    kind = MemType.ACC_8BIT if plan.residual_dtype == "int8" else MemType.ACC
                    for j in range(toc):
                        part.append((load, dict(
                            mem_type=kind, sram_base=res_at[sa] + j * th * ow,
                            dram_base=bases["residual"] + ((n * ocb + k * toc + j) * oh + r0) * ow,
                            y_size=th, x_size=ow, x_stride=ow)))
                lo, hi = reset_range[sa]
                part.append((gemm, dict(uop_bgn=lo, uop_end=hi, iter_out=toc * th, iter_in=ow,
                                        dst_factor_out=ow, dst_factor_in=1, reset=True)))
            lo, hi = gemm_table(si, sw_, sa)
            part.append((gemm, dict(uop_bgn=lo, uop_end=hi, iter_out=toc, iter_in=ow,
                                    dst_factor_out=th * ow, dst_factor_in=1,
                                    src_factor_out=0, src_factor_in=sw,
                                    wgt_factor_out=per_chunk, wgt_factor_in=0)))
            last = q == chunks - 1
            if last and plan.has_bias:
                lo, hi = bias_range[sa]
                part.append((alu, dict(alu_op=AluOp.ADD, uop_bgn=lo, uop_end=hi, iter_out=toc,
                                       iter_in=th * ow, dst_factor_out=th * ow, dst_factor_in=1,
                                       src_factor_out=1, src_factor_in=0)))
            if last:
                lo, hi = alu_range[sa]
                for op, imm in plan.steps:
                    if imm is None:     # the residual: its own steps, then added
                        rlo, rhi = res_range[sa]
                        for rop, rimm in plan.residual_steps:
                            part.append((alu, dict(alu_op=rop, uop_bgn=rlo, uop_end=rhi,
                                                   iter_out=tile_acc, dst_factor_out=1,
                                                   src_factor_out=1, imm=rimm)))
                        alo, ahi = add_range[sa]
                        part.append((alu, dict(alu_op=AluOp.ADD, uop_bgn=alo, uop_end=ahi,
                                               iter_out=tile_acc, dst_factor_out=1,
                                               src_factor_out=1)))
                        continue
                    part.append((alu, dict(alu_op=op, uop_bgn=lo, uop_end=hi, iter_out=tile_acc,
                                           dst_factor_out=1, src_factor_out=1, imm=imm)))
            first = {"pop_prev"} | ({"pop_next"} if q == 0 and t >= 2 else set())
            body += with_deps(part, first, {"push_prev"} | ({"push_next"} if last else set()))
            u += 1
        # ---- store: one STORE per channel block of the tile
        part = [(store, dict(sram_base=acc_base[sa] + j * th * ow,
                             dram_base=bases["out"] + ((n * ocb + k * toc + j) * oh + r0) * ow,
                             y_size=th, x_size=ow, x_stride=ow)) for j in range(toc)]
        body += with_deps(part, {"pop_prev"}, {"push_prev"})
    program = [load(MemType.UOP, 0, 0, 1, len(uops))] + body + [finish()]  # uops placed by run
    lowered.program = Program(program, uops, config)
    lowered.tiles = len(tiles)
    return lowered
