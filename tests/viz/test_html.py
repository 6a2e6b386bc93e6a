"""relaybench.viz.html: the rich notebook views of IR, passes, compiled modules and results."""

import html as std_html
import re
from collections import Counter

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.backends.graph_executor import BenchmarkResult, GraphModule, Profile
from relaybench.backends.llvm.codegen import CompiledKernel
from relaybench.backends.lowering import LoweredFunc
from relaybench.ir.expr import Call, Op
from relaybench.ir.functor import post_order
from relaybench.ir.module import IRModule
from relaybench.ir.types import TensorType, Type, TypeVar
from relaybench.passes.fuse_ops import fused_groups
from relaybench.passes.instruments import PassRecord, Snapshots
from relaybench.viz import Table
from relaybench.viz.html import asm_html, html, loops_html

_OP_SPAN = re.compile(r'<span class="rb-op" style="[^"]*">([^<]*)</span>')
_FUSED = re.compile(r'<details class="rb-fused"[^>]*><summary[^>]*>(.*?)</summary>')
_TAGS = re.compile(r"<[^>]+>")


def _plain(fragment: str) -> str:
    """The text a browser shows for an HTML fragment."""
    return std_html.unescape(_TAGS.sub("", fragment))


def _conv_model():
    """conv2d + bias + relu, then flatten and softmax, over an 8x8 image with 8 channels."""
    x = rb.var("x", shape=(1, 8, 8, 8))
    w = rb.var("w", shape=(8, 8, 3, 3))
    b = rb.var("b", shape=(8,))
    y = op.nn.relu(op.nn.bias_add(op.nn.conv2d(x, w, padding=(1, 1)), b))
    y = op.nn.softmax(op.nn.batch_flatten(y))
    return IRModule.from_expr(rb.Function([x, w, b], y))


def _op_calls(mod) -> Counter:
    """Operator calls per op name, counted on the IR (each node once, as the printer binds it)."""
    names = Counter()
    for func in mod.functions.values():
        for node in post_order(func):
            if isinstance(node, Call) and isinstance(node.op, Op):
                names[node.op.name] += 1
    return names


@pytest.fixture(scope="module")
def compiled():
    """A tiny compiled model: one conv group with a bias, an elementwise tail, a reduction."""
    x = rb.var("x", shape=(1, 4, 6, 6))
    w = rb.var("w", shape=(4, 4, 3, 3))
    y = op.nn.relu(op.nn.conv2d(x, w, padding=(1, 1)) + rb.const(np.ones((1, 4, 1, 1), "float32")))
    y = op.sum(op.tanh(y), axis=[2, 3])
    return rb.build(IRModule.from_expr(rb.Function([x, w], y)), opt_level=2)


# ---- Relay text ----------------------------------------------------------------------------------

def test_escapes_angle_brackets_and_ampersands_in_attrs_and_names():
    x = rb.var("x", shape=(2, 3))
    func = rb.Function([x], op.nn.relu(x), attrs={"Composite": "a<b&c"})
    page = html(func)
    assert "a<b" not in page and "b&c" not in page
    assert '<span class="rb-str" style="color:#c0504d">"a&lt;b&amp;c"</span>' in page
    assert 'Composite="a<b&c"' in _plain(page)         # what the reader sees is the text
    tv = html(TypeVar("T<&>"))
    assert "T<&>" not in tv and "&lt;&amp;&gt;" in tv
    table = html(Table([{"pass": "<drop & keep>"}]))
    assert "&lt;drop &amp; keep&gt;" in table and "<drop" not in table


def test_the_visible_text_is_the_printed_text():
    mod = rb.passes.optimize(_conv_model(), opt_level=2)
    page = html(mod, collapse_lines=10_000)
    code = re.findall(r'<div class="rb-code"[^>]*>(.*?)</div>', page, re.S)
    assert "\n".join(_plain(c) for c in code) == mod.astext(show_meta_data=False)


@pytest.mark.parametrize("opt_level", [0, 2, 3])
def test_every_operator_call_is_a_span_of_the_op_class(opt_level):
    mod = rb.passes.optimize(_conv_model(), opt_level=opt_level)
    page = html(mod)
    spans = Counter(_OP_SPAN.findall(page))
    assert spans == _op_calls(mod)
    assert spans["nn.conv2d"] == 1 and spans["nn.softmax"] == 1


def test_keywords_variables_types_and_numbers_have_their_classes():
    mod = rb.passes.optimize(_conv_model(), opt_level=2)
    page = html(mod)
    assert '<span class="rb-kw" style="color:#a35bc4;font-weight:bold">def</span>' in page
    assert '>fn</span>' in page
    assert '<span class="rb-gvar" style="color:#1f9a8a;font-weight:bold">@main</span>' in page
    assert '<span class="rb-var" style="color:#b8742a">%x</span>' in page
    assert re.search(r'<span class="rb-type" style="[^"]*">/\* ty=Tensor\[\(1, 512\), float32\] \*/</span>',
                     page)
    assert re.search(r'<span class="rb-attr" style="[^"]*">padding</span>=\[<span class="rb-num"', page)


def test_each_fused_group_is_a_details_with_its_pattern_kind():
    mod = rb.passes.optimize(_conv_model(), opt_level=2)
    groups = fused_groups(mod)
    page = html(mod)
    summaries = [_plain(s) for s in _FUSED.findall(page)]
    assert len(summaries) == len(groups) == page.count('<details class="rb-fused"')
    shown = sorted((s.split()[1], s.split()[2]) for s in summaries)
    assert shown == sorted((g.name, g.pattern.name) for g in groups)
    conv = [s for s in summaries if "nn_conv2d" in s]
    # conv2d is OUT_ELEMWISE_FUSABLE; the group takes data, weight and bias
    assert len(conv) == 1 and "OUT_ELEMWISE_FUSABLE" in conv[0] and "(3 params, 3 ops)" in conv[0]


def test_global_functions_fold_and_big_programs_start_folded():
    mod = rb.passes.optimize(_conv_model(), opt_level=2)
    lines = len(mod.astext(show_meta_data=False).splitlines())
    small = html(mod, collapse_lines=lines + 1)
    big = html(mod, collapse_lines=lines - 1)
    assert small.count('<details class="rb-func" open>') == 1
    assert " open>" not in big and big.count('<details class="rb-func">') == 1
    header = _plain(re.search(r'<div class="rb-header"[^>]*>(.*?)</div>', big).group(1))
    n_groups = len(fused_groups(mod))
    # x, w, b: 1*8*8*8 + 8*8*3*3 + 8 floats
    assert header.startswith(f"1 function · {sum(_op_calls(mod).values())} ops · {n_groups} fused groups")
    assert f"@main: 3 parameters, {(512 + 576 + 8) * 4 / 1024:.1f} KiB" in header


def test_a_module_of_several_functions_and_a_deep_chain():
    mod = rb.parse("""#[version = "0.0.5"]
def @double(%a: Tensor[(2), float32]) -> Tensor[(2), float32] { add(%a, %a) }
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] { @double(nn.relu(%x)) }
""")
    page = html(mod)
    heads = re.findall(r'<details class="rb-func"[^>]*><summary[^>]*>(.*?)</summary>', page)
    funcs = [_plain(s) for s in heads]
    assert [f.split()[0] for f in funcs] == ["@double", "@main"]
    assert "(1 param, 1 op" in funcs[0]
    x = rb.var("x", shape=(4,))
    y = x
    for _ in range(20_000):
        y = op.tanh(y)
    deep = html(rb.Function([x], y))
    assert deep.count('class="rb-op"') == 20_000


def test_the_view_is_deterministic():
    a, b = (html(rb.passes.optimize(_conv_model(), opt_level=3)) for _ in range(2))
    assert a == b


def test_type_view_highlights_dims_and_dtype():
    page = html(TensorType((1, 3, 224, 224), "float16"))
    assert re.findall(r'<span class="rb-dim" style="[^"]*">(\d+)</span>', page) == ["1", "3", "224", "224"]
    assert re.search(r'<span class="rb-dtype" style="[^"]*">float16</span>', page)
    assert _plain(page) == "Tensor[(1, 3, 224, 224), float16]"


def test_resnet50_after_optimize_renders():
    mod, _ = rb.models.get("resnet50")
    opt = rb.passes.optimize(mod, opt_level=3)
    page = html(opt)
    assert len(page) < 5_000_000
    assert page.count('<details class="rb-fused"') == len(fused_groups(opt)) > 100
    assert " open>" not in page                       # a big program starts folded
    assert Counter(_OP_SPAN.findall(page)) == _op_calls(opt)


# ---- passes ----------------------------------------------------------------------------------

def test_snapshots_view_lists_every_pass_and_the_changed_ones():
    snaps = Snapshots()
    rb.passes.optimize(_conv_model(), opt_level=2, instruments=[snaps])
    page = html(snaps, max_modules=1)
    table = _plain(re.search(r"<table>.*?</table>", page, re.S).group())
    for rec in snaps:
        assert rec.label in table
    changed = snaps.changed()
    passes = re.findall(r'<details class="rb-pass"><summary[^>]*>(.*?)</summary>(.*?)</details>', page,
                        re.S)
    assert len(changed) >= 2 and len(passes) == len(changed)
    assert [_plain(s).split()[0] for s, _ in passes] == [r.label for r in changed]
    assert 'class="rb-view"' in passes[0][1]            # the first ones carry their module
    assert f"html(snapshots[{changed[-1].index}])" in _plain(passes[-1][1])
    assert snaps._repr_html_() == html(snaps)
    record = snaps["FuseOps"]
    rec_page = record._repr_html_()
    assert rec_page.count('<details class="rb-fused"') == len(fused_groups(record.after))
    assert '<span class="rb-add"' in rec_page and '<span class="rb-del"' in rec_page


# ---- compiled code ---------------------------------------------------------------------------------

def test_graph_module_view_names_every_kernel(compiled):
    page = html(compiled)
    text = _plain(page)
    assert f"target {compiled.target}" in text and f"{compiled.num_threads} thread" in text
    kernels = re.findall(r'<details class="rb-kernel"><summary[^>]*>(.*?)</summary>(.*?)</details>', page,
                         re.S)
    assert [_plain(s).split()[0] for s, _ in kernels] == [k.name for k in compiled.kernels]
    for (summary, body), k in zip(kernels, compiled.kernels):
        assert k.pattern in _plain(summary) and k.rule in _plain(summary)
        assert _plain(body) == k.source("loops")
    calls = len(compiled.graph.nodes)
    assert f"{calls} calls of {len(compiled.kernels)} kernels" in text
    assert f"{compiled.memory_plan().storages} storages" in text
    assert compiled._repr_html_() == page


def test_kernel_view_has_loops_llvm_and_assembly(compiled):
    group = next(k for k in compiled.kernels if "nn.conv2d" in k.ops)
    page = html(group.compiled)
    assert group.compiled._repr_html_() == page
    assert '<details class="rb-llvm">' in page and '<details class="rb-asm">' in page
    code = re.findall(r'<div class="rb-code"[^>]*>(.*?)</div>', page, re.S)
    assert [_plain(c) for c in code] == [group.source("loops"), group.source("llvm"), group.source("asm")]
    lowered = html(group.lowered)
    assert group.lowered._repr_html_() == lowered
    assert group.name in lowered and group.lowered.pattern in lowered and group.lowered.rule in lowered
    assert "conv2d" in html(group)


def test_loop_kinds_allocate_and_avx512_are_marked():
    loops = loops_html('def k(a: Buffer((4, 16), "float32")):\n'
                       '    t = allocate((16,), "float32")\n'
                       "    for i in parallel(4):\n        for j in vectorized(16):\n"
                       "            for r in unrolled(2):\n                a[i, j] = 0.0")
    for kind, word in (("parallel", "parallel"), ("vectorized", "vectorized"),
                       ("unrolled", "unrolled"), ("alloc", "allocate")):
        assert re.search(rf'<span class="rb-{kind}" style="[^"]*">{word}</span>', loops)
    asm = asm_html(".LBB0_1:\n\tvfmadd231ps\t(%rdi,%rax,4), %zmm1, %zmm0\n\tvmovups\t%ymm2, (%rsi)")
    assert re.search(r'<span class="rb-fma" style="[^"]*">vfmadd231ps</span>', asm)
    assert re.findall(r'<span class="rb-zmm" style="[^"]*">(%zmm\d)</span>', asm) == ["%zmm1", "%zmm0"]
    assert re.search(r'<span class="rb-label" style="[^"]*">\.LBB0_1:</span>', asm)
    assert "%ymm2" in asm and 'rb-zmm" style="[^"]*">%ymm2' not in asm


def test_benchmark_result_is_one_line_and_a_profile_keeps_its_table():
    result = BenchmarkResult([1.0, 2.0, 4.0], number=5, repeat=3)
    page = html(result)
    assert "\n" not in page
    assert _plain(page) == "2.00 ms ± 1.25 (median of 3 x 5; min 1.00, max 4.00 ms)"
    profile = Profile([{"group": "fused_tanh", "ms": "0.1"}, {"group": "total", "ms": "0.1"}], 0.1, 10)
    assert html(profile) == profile._repr_html_() and "<table>" in html(profile)


def test_every_listed_class_has_a_rich_view():
    x = rb.var("x", shape=(2,))
    func = rb.Function([x], op.nn.relu(x))
    mod = IRModule.from_expr(func)
    for value in (mod, func, x, func.body):
        assert value._repr_html_() == html(value)
    for cls in (IRModule, rb.Function, Type, GraphModule, BenchmarkResult, CompiledKernel, LoweredFunc,
                Snapshots, PassRecord, Profile):
        assert callable(getattr(cls, "_repr_html_", None)), cls


def test_rb_viz_html_stays_the_function_once_its_module_is_imported():
    # a fresh interpreter: the module imported first (as a compiled module's _repr_html_ does),
    # the package attribute asked for after
    import subprocess
    import sys
    code = ("import sys, relaybench.viz.html, relaybench as rb\n"
            "print(callable(rb.viz.html), rb.viz.html is sys.modules['relaybench.viz.html'].html)\n"
            "print('<td' in rb.viz.html(rb.viz.Table([{'a': 1}])))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"]
