"""ConvertLayout: the convolutions in the data layouts asked for (Relay's ``convert_layout.cc``).

The same machinery as AlterOpLayout (:mod:`relaybench.passes._layout_rules`), with the layouts
chosen by the user instead of the target: each operator named in ``desired_layouts`` is converted
by its ``FTVMConvertOpLayout`` attribute, the following operators adopt the new layout through
their layout rules, and ``layout_transform`` is inserted only where two layouts meet (at the
entry, the exit and around operators that need the original order). A typical use is a model
written in one layout (an ONNX export in NCHW) run on kernels written for another (NHWC).

**The registry.** ``FTVMConvertOpLayout`` is called as in Relay::

    fn(attrs, inputs, tinfos, desired_layouts) -> None | dict | Call

with the call's attributes, arguments and their types, and the layouts asked for that operator
(a list, ``[data_layout, kernel_layout]`` for a convolution, its ``"default"`` resolved); it
returns ``None`` to keep the call, a dict of attributes to change, or a new call built on
``inputs`` (see :mod:`relaybench.passes._layout_rules` for what the rewriter does with it).
The built-in conversions of ``nn.conv2d`` and ``nn.conv2d_transpose``
(:func:`convert_conv_layout`) are their level-0 registrations; a user registers another at a
higher level (:func:`relaybench.op.register_convert_op_layout`), for these operators or any other,
which ``desired_layouts`` may then name (its layouts passed as given).

**The option.** ``desired_layouts`` maps an operator to ``[data_layout, kernel_layout]``; the
kernel layout may be ``"default"``. It is a string option, read by :func:`parse_desired_layouts`,
which takes three forms:

* a dict, from Python, positionally as in Relay or by keyword:
  ``ConvertLayout({"nn.conv2d": ["NHWC", "default"]})``,
  ``ConvertLayout(desired_layouts={"nn.conv2d": ["NHWC", "default"]})``;
* the compact string ``op:data_layout[:kernel_layout]``, with ``;`` between operators:
  ``"nn.conv2d:NHWC:HWIO;nn.conv2d_transpose:NHWC"``; in a pipeline string it is quoted (a bare
  value there cannot hold ``:``): ``convert-layout{desired_layouts="nn.conv2d:NHWC:HWIO"}``;
* the dict written in a pipeline string: ``convert-layout{desired_layouts={nn.conv2d: [NHWC, HWIO]}}``.

A missing kernel layout means ``default``. The option's default, ``"nn.conv2d:NHWC:default"``,
converts ``nn.conv2d`` to NHWC with the default kernel layout. (Relay requires the dict; NHWC is
this pass's default.)

**Default kernel layouts.** ``nn.conv2d``: ``OIHW`` for NCHW data, ``HWIO`` for NHWC (depthwise
convolutions too: the kernel's ``I`` is then 1), ``OIHW{x}i{x}o`` for ``NCHW{x}c``.
``nn.conv2d_transpose``: ``IOHW`` for NCHW, ``HWIO`` for NHWC. A convolution whose channels the
asked blocks do not divide is left as it is.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], %b: Tensor[(4), float32]) {
...   %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
...   %1 = nn.bias_add(%0, %b);
...   nn.relu(%1)
... }''')
>>> with rb.PassContext(opt_level=3):
...     out = ConvertLayout(desired_layouts="nn.conv2d:NHWC:HWIO")(mod)
>>> print(out["main"].astext(show_types=False))
fn (%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], %b: Tensor[(4), float32]) -> Tensor[(1, 4, 8, 8), float32] {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NHWC");
  %1 = layout_transform(%w, src_layout="OIHW", dst_layout="HWIO");
  %2 = nn.conv2d(%0, %1, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3], data_layout="NHWC", kernel_layout="HWIO");
  %3 = nn.bias_add(%2, %b, axis=3);
  %4 = nn.relu(%3);
  layout_transform(%4, src_layout="NHWC", dst_layout="NCHW")
}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Optional

from ..ir.layout import Layout
from ..op._layout import _splits_evenly, extents_of
from ..op.registry import get_op_attr, get_opdef, register_convert_op_layout
from ._layout_rules import rewrite_layouts
from .infra import module_pass

__all__ = ["ConvertLayout", "parse_desired_layouts", "convert_conv_layout"]

# the operators whose layouts can be asked for -> {data layout: its default kernel layout}
_CONVERTIBLE = {
    "nn.conv2d": {"NCHW": "OIHW", "NHWC": "HWIO"},
    "nn.conv2d_transpose": {"NCHW": "IOHW", "NHWC": "HWIO"},
}


def _default_kernel(op_name: str, data: Layout) -> str:
    table = _CONVERTIBLE[op_name]
    if data.name in table:
        return table[data.name]
    block = data.factor_of("C")
    if op_name == "nn.conv2d" and data.primal == "NCHW" and block is not None and data.ndim == 5:
        return f"OIHW{block}i{block}o"
    raise ValueError(f"ConvertLayout: no default kernel layout for {op_name} with data layout "
                     f"{data.name}; give one (like {op_name}:{data.name}:{table['NHWC']})")


_DICT_ITEM = re.compile(r"\s*['\"]?([\w.]+)['\"]?\s*:\s*(\[[^\]]*\]|['\"]?[\w]+['\"]?)\s*[,;]?")


def _dict_text(text: str) -> dict:
    """``{nn.conv2d: [NHWC, default]}`` (the dict form of a pipeline string) as a dict."""
    body = text.strip()
    if not body.endswith("}"):
        raise ValueError(f"ConvertLayout: cannot read desired_layouts {text!r}: missing '}}'")
    body, pos, out = body[1:-1], 0, {}
    while body[pos:].strip():
        m = _DICT_ITEM.match(body, pos)
        if not m:
            raise ValueError(f"ConvertLayout: cannot read desired_layouts {text!r} at {body[pos:].strip()!r}; "
                             f"write {{op: [data_layout, kernel_layout], ...}}")
        layouts = m.group(2).strip("[]")
        out[m.group(1)] = [v.strip().strip("'\"") for v in re.split(r"[,;]", layouts) if v.strip()]
        pos = m.end()
    return out


def parse_desired_layouts(value) -> dict:
    """``desired_layouts`` (a dict or the compact string) as ``{op: (data_layout, kernel_layout)}``
    with default kernel layouts resolved (for an operator converted by a user's registration,
    ``{op: (layouts as given)}``).

    >>> parse_desired_layouts("nn.conv2d:NHWC")
    {'nn.conv2d': ('NHWC', 'HWIO')}
    >>> parse_desired_layouts({"nn.conv2d": ["NCHW16c", "default"]})
    {'nn.conv2d': ('NCHW16c', 'OIHW16i16o')}
    """
    if isinstance(value, str) and value.strip().startswith("{"):
        value = _dict_text(value)
    if isinstance(value, str):
        entries = {}
        for item in value.split(";"):
            item = item.strip()
            if not item:
                continue
            parts = [p.strip() for p in item.split(":")]
            if len(parts) not in (2, 3) or not all(parts):
                raise ValueError(f"ConvertLayout: cannot read desired_layouts entry {item!r}; write "
                                 f"op:data_layout[:kernel_layout], entries separated by ';'")
            entries[parts[0]] = parts[1:]
        value = entries
    if not isinstance(value, Mapping):
        raise TypeError(f"ConvertLayout: desired_layouts must be a dict or a string, got {value!r}")
    out = {}
    for op_name, layouts in value.items():
        if op_name not in _CONVERTIBLE:
            if get_op_attr(op_name, "FTVMConvertOpLayout") is None:
                raise ValueError(f"ConvertLayout: cannot convert the layout of {op_name!r} (it converts "
                                 f"{', '.join(_CONVERTIBLE)} and the operators with an "
                                 f"FTVMConvertOpLayout registration; the others follow their inputs)")
            out[op_name] = tuple([layouts] if isinstance(layouts, str) else layouts)
            continue
        if isinstance(layouts, str):
            layouts = [layouts]
        layouts = list(layouts)
        if not 1 <= len(layouts) <= 2:
            raise ValueError(f"ConvertLayout: {op_name} wants [data_layout, kernel_layout], got {layouts!r}")
        try:
            data = Layout(layouts[0])
        except ValueError as err:
            raise ValueError(f"ConvertLayout: {op_name}: {err}") from None
        if sorted(data.primal) != sorted("NCHW"):
            raise ValueError(f"ConvertLayout: {op_name}: data layout {data.name} must have the axes N, C, H, W")
        kernel = layouts[1] if len(layouts) == 2 else "default"
        if kernel == "default":
            kernel = _default_kernel(op_name, data)
        try:
            kl = Layout(kernel)
        except ValueError as err:
            raise ValueError(f"ConvertLayout: {op_name}: {err}") from None
        if sorted(kl.primal) != sorted("OIHW"):
            raise ValueError(f"ConvertLayout: {op_name}: kernel layout {kernel} must have the axes O, I, H, W")
        out[op_name] = (data.name, kl.name)
    return out


def _out_type(op_name: str, tinfos, attrs):
    """The type of a call of ``op_name`` on inputs of these types, by its type relation."""
    try:
        out = get_opdef(op_name).type_rel(list(tinfos), attrs)
    except Exception:         # a relation that cannot say: the conversion is not made
        return None
    return out[-1] if isinstance(out, list) else out


def convert_conv_layout(op_name: str):
    """The built-in ``FTVMConvertOpLayout`` of a convolution (``nn.conv2d``,
    ``nn.conv2d_transpose``): the attributes that put it in ``desired_layouts``
    (``[data_layout, kernel_layout]``), or None when it already is, or when a channel block asked
    for does not divide its channels."""
    def convert(attrs, inputs, tinfos, desired_layouts) -> Optional[dict]:
        data_layout, kernel_layout = desired_layouts
        if attrs["data_layout"] == data_layout and attrs["kernel_layout"] == kernel_layout:
            return None
        data_l, kernel_l = Layout(data_layout), Layout(kernel_layout)
        data_ext = extents_of(tinfos[0], Layout(attrs["data_layout"]))
        kernel_ext = extents_of(tinfos[1], Layout(attrs["kernel_layout"]))
        # a convolution reads and writes whole channel blocks: a block must divide the channels
        # (one channel is not a block of any size, as it would be for a broadcast operand)
        if not (_splits_evenly(data_l, data_ext) and _splits_evenly(kernel_l, kernel_ext)):
            return None
        out_ext = extents_of(_out_type(op_name, tinfos, attrs),
                             Layout(attrs["out_layout"] or attrs["data_layout"]))
        if not _splits_evenly(data_l, out_ext):
            return None
        if any(data_l.factor_of(p) and not isinstance(e, int) for p, e in (data_ext or {}).items()):
            return None
        return {"data_layout": data_layout, "kernel_layout": kernel_layout, "out_layout": ""}
    convert.__name__ = convert.__qualname__ = f"convert_{op_name.replace('.', '_')}_layout"
    return convert


# the built-in conversions: level 0, the library's own
for _name in _CONVERTIBLE:
    register_convert_op_layout(_name, convert_conv_layout(_name), level=0)


def _hook(fn, desired: list):
    """The rewriter's hook calling a registered ``FTVMConvertOpLayout`` with Relay's arguments."""
    def hook(call, types, layouts):
        return fn(call.attrs, list(call.args), [a.checked_type for a in call.args], list(desired))
    return hook


@module_pass(opt_level=3)
def ConvertLayout(mod, ctx, desired_layouts: str = "nn.conv2d:NHWC:default"):
    """Convert the convolutions to the layouts asked for (by default ``nn.conv2d`` to NHWC/HWIO).

    ``desired_layouts`` maps an operator to ``[data_layout, kernel_layout]`` (a dict, or the
    string ``op:data[:kernel];op:...``); the other operators follow through their layout rules
    and ``layout_transform`` is inserted only where layouts disagree.
    """
    wanted = parse_desired_layouts(desired_layouts)
    hooks = {name: _hook(get_op_attr(name, "FTVMConvertOpLayout"), layouts) for name, layouts in wanted.items()}
    return rewrite_layouts(mod, hooks)
