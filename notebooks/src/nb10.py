"""The source of a tutorial notebook: run notebooks/src/build.py to write and execute it."""

import pathlib

import nbformat as nbf
cells = []
def md(s): cells.append(nbf.v4.new_markdown_cell(s.strip()))
def code(s, check=False):
    s = s.strip()
    if check:
        s = "# NBVAL_CHECK_OUTPUT\n" + s
    cells.append(nbf.v4.new_code_cell(s))

md("""
# 10. Quantization

Relay quantizes a float32 network to 8-bit integers with three passes over the same IR that every
other pass works on, which is the paper's point: quantization is not a separate tool but a
program transformation, and the integer program it produces is compiled like any other.

1. **QuantizeAnnotate** places a `simulated_quantize` call on each value that should become an
   integer, by per-operator rules: the data and the weight of a convolution, the operands of the
   `add` after it, and so on. Each call has a *kind*: INPUT (8-bit), WEIGHT (8-bit) or
   ACTIVATION (the accumulator: 32 bits, or 16).
2. **QuantizeCalibrate** chooses the scale of each call: from one global number, or from the
   values the float program takes on a few inputs (`max`, `percentile`, `kl_divergence`).
3. **QuantizeRealize** replaces every `simulated_quantize` by integer arithmetic: `int8`
   convolutions accumulating in `int32`, shifts to change scales, casts.

Everything here is `rb.quantize` (Relay's `relay.quantize`) under Relay's default `qconfig`: the
first convolution and the dense layers stay in float32 (`skip_conv_layers=[0]`,
`skip_dense_layer=True`), weights get power-of-two scales.
""")
code("""
import numpy as np
import relaybench as rb
from relaybench.experiments.quantization import (QuantizationResult, digits_accuracy_table,
                                                 sqnr_db, top1_agreement)
from relaybench.ir.functor import post_order
from relaybench.quantize import (qconfig, QuantizeAnnotate, QuantizeCalibrate, QuantizeRealize,
                                 prerequisite_optimize)
from relaybench.quantize.annotate import SIMULATED_QUANTIZE


def around(mod, op_name, nth=0, before=2, after=1):
    \"\"\"The lines of ``mod``'s text around the ``nth`` line that calls ``op_name``.\"\"\"
    lines = mod["main"].astext(show_types=False).splitlines()
    hits = [i for i, line in enumerate(lines) if f"{op_name}(" in line]
    i = hits[nth]
    return "\\n".join(lines[max(0, i - before):i + after + 1])


def quantize_calls(mod):
    \"\"\"The simulated_quantize calls of ``@main``, in the order the program computes them.\"\"\"
    return [n for n in post_order(mod["main"].body)
            if getattr(getattr(n, "op", None), "name", None) == SIMULATED_QUANTIZE]
""")
md("""
## The digits CNN, trained

The zoo's `digits_cnn` carries weights trained on scikit-learn's handwritten digits (8x8 grey
images), so quantization can be judged by accuracy on real data: 360 test images the training
never saw. Three convolutions and a dense layer; the whole test split runs as one batch.
""")
code("""
split = rb.models.load_digits_split()
mod, params = rb.models.digits_cnn(batch_size=len(split.x_test), softmax=False)
calibration = [{"data": split.x_train[i:i + 360]} for i in (0, 360)]   # 720 training images

fp32 = rb.build(mod, target="llvm", params=params, opt_level=3)
fp32_pred = np.argmax(fp32.run(data=split.x_test), axis=-1)
print(f"float32 accuracy: {100 * np.mean(fp32_pred == split.y_test):.2f}%")
""", check=True)
md("""
Quantization starts from the program with its weights bound and folded (`prerequisite_optimize`:
SimplifyInference, FoldConstant, FoldScaleAxis, CanonicalizeOps); the second convolution, with its
bias and ReLU:
""")
code("""
optimized = prerequisite_optimize(mod, params)
print(around(optimized, "nn.conv2d", nth=1))
""", check=True)
md("""
## Step 1: annotate

The first convolution is skipped (`skip_conv_layers=[0]`), so the second is the first to be
annotated: its input gets a `simulated_quantize` of kind 1 (INPUT), its weight one of kind 2
(WEIGHT); the `add` of the bias after it attaches the bias as WEIGHT, and the sum is an
ACTIVATION value (the accumulator), which gets a call of its own only where a later operator
needs it as an INPUT (here the max pool). The scale and the clip bounds of each call are still
free variables, new parameters of `@main`.
""")
code("""
with qconfig(calibrate_mode="max"):
    annotated = QuantizeAnnotate()(optimized)
print(around(annotated, "nn.conv2d", nth=1, before=3, after=3))
""", check=True)
code("""
from collections import Counter
kinds = {1: "INPUT", 2: "WEIGHT", 3: "ACTIVATION"}
print(Counter(kinds[int(c.attrs.kind)] for c in quantize_calls(annotated)))
names = [p.name_hint for p in annotated["main"].params]
print(len(names), "parameters:", names[:5], "...")
""", check=True)
md("""
## Step 2: calibrate

`calibrate_mode="max"` runs the float program (each `simulated_quantize` made the identity) on the
720 calibration images in the reference interpreter and takes the largest magnitude each value
reaches. A value of `nbit` bits and scale `s` is stored as an integer in
`[-(2**(nbit-1) - 1), 2**(nbit-1) - 1]` times `dom_scale = s / 2**(nbit-1)`: the scalars become
constants.
""")
code("""
with qconfig(calibrate_mode="max"):
    calibrated = QuantizeCalibrate(calibration)(annotated)
print(around(calibrated, "nn.conv2d", nth=1, before=3, after=3))
""", check=True)
code("""
rows = []
for call in quantize_calls(calibrated):
    dom_scale, clip_min, clip_max = (float(a.data) for a in call.args[1:])
    rows.append({"kind": kinds[int(call.attrs.kind)], "dom_scale": f"{dom_scale:.4g}",
                 "clip": f"[{clip_min:g}, {clip_max:g}]",
                 "scale (largest |value|)": f"{dom_scale * (clip_max + 1):.4g}"})
rb.viz.Table(rows)
""", check=True)
md("""
## Step 3: realize

QuantizeRealize turns each `simulated_quantize` into arithmetic: the input is multiplied by
`1/dom_scale`, rounded, clipped and cast to `int8`; the convolution takes `int8` operands and
accumulates in `int32` (`out_dtype="int32"`); the bias, quantized at the product of the two
scales, is added in `int32`; a fixed-point multiplication (in `int64`: multiply, add half,
right shift) brings the sum to the next layer's scale. FoldConstant then quantizes the weights
once, at compile time.
""")
code("""
with qconfig(calibrate_mode="max"):
    realized = rb.passes.FoldConstant()(QuantizeRealize()(rb.passes.InferType()(calibrated)))
print(around(realized, "nn.conv2d", nth=1, before=4, after=5))
""", check=True)
md("""
`rb.quantize.quantize(mod, params, dataset)` is the same three steps in one call:
""")
code("""
with qconfig(calibrate_mode="max"):
    quantized = rb.quantize.quantize(mod, params, dataset=calibration)
rb.ir.structural_equal(quantized, realized)
""", check=True)
md("""
## The simulated program and the integer program agree

The calibrated program still computes in float32, rounding and clipping each value to the grid
it will have as an integer: it *simulates* the quantization. The realized program computes with
integers. Run both in the reference interpreter on the test split:
""")
code("""
interpret = lambda m: rb.create_executor("interpreter", mod=m).evaluate()(split.x_test)
simulated_out = interpret(calibrated)
realized_out = interpret(realized)
print(f"simulated: {100 * np.mean(np.argmax(simulated_out, -1) == split.y_test):.2f}%, "
      f"realized: {100 * np.mean(np.argmax(realized_out, -1) == split.y_test):.2f}%")
print(f"same predictions: {top1_agreement(simulated_out, realized_out):.1f}%, "
      f"SQNR of the realized against the simulated logits > 40 dB: "
      f"{sqnr_db(simulated_out, realized_out) > 40}")
""", check=True)
md("""
And compiled: the graph executor's int8 program gives the interpreter's logits.
""")
code("""
int8 = rb.build(realized, target="llvm", opt_level=3)
int8_out = int8.run(data=split.x_test)
print(np.allclose(int8_out, realized_out, rtol=1e-5, atol=1e-5),
      f"{100 * np.mean(np.argmax(int8_out, -1) == split.y_test):.2f}%")
""", check=True)
md("""
## The realized program, drawn

Each edge carries the type of its value: `int8` into the convolutions, `int32` out of them,
`float32` around the first convolution and the dense layer, which stay in float.
""")
code("""
rb.viz.to_dot(realized)
""")
code("""
body = rb.passes.InferType()(realized)["main"].body
dtypes = Counter(str(node.checked_type.dtype) for node in post_order(body)
                 if hasattr(getattr(node, "checked_type", None), "dtype"))
sorted(dtypes.items())
""", check=True)
md("""
## Accuracy: every calibrate mode, 8/32 and 8/16

`digits_accuracy_table` repeats the above for each calibrate mode and two precisions: **8/32**
(8-bit inputs and weights, 32-bit accumulators, Relay's default) and **8/16** (16-bit
accumulators: `nbit_activation=16`, `dtype_activation="int16"`), each compiled for llvm.
""")
code("""
result = QuantizationResult(accuracy=digits_accuracy_table(progress=False),
                            settings={"test_images": 360, "calibration_images": 720})
result.table("accuracy")
""", check=True)
md("""
Beside the paper's figures for ResNet-18 on ImageNet (its float32 and 8/32 top-1 accuracy; 8/16
is not reported there):
""")
code("""
result.paper_table()
""", check=True)
md("""
8/32 loses nothing on the digits (the paper's ResNet-18 lost 1.3 points on ImageNet, a far
harder task). 8/16 keeps the accuracy with the `global_scale` and `max` scales; with the
`percentile` and `kl_divergence` ones, which choose ranges below the largest value and clip the
tail on purpose, the narrower 16-bit accumulators leave less room, and it loses 0.6 and 0.8
points (two and three of the 360 images).

## ResNet-18: speed

The zoo's ResNet-18 carries random weights, so accuracy means nothing for it; what matters is
speed, and how closely the int8 program follows the float one. Quantize it, calibrated (`max`)
on one random image, and build both for llvm:
""")
code("""
resnet, resnet_params = rb.models.resnet18()
rng = np.random.default_rng(0)
image, calibration_image = (rng.standard_normal((1, 3, 224, 224)).astype("float32")
                             for _ in range(2))
with qconfig(calibrate_mode="max"):
    resnet_q = rb.quantize.quantize(resnet, resnet_params, dataset=[{"data": calibration_image}])
resnet_fp32 = rb.build(resnet, target="llvm", params=resnet_params, opt_level=3)
resnet_int8 = rb.build(resnet_q, target="llvm", opt_level=3)
reference, quantized_out = resnet_fp32.run(data=image), resnet_int8.run(data=image)
print("same class:", top1_agreement(reference, quantized_out) == 100.0,
      "| SQNR above 15 dB:", sqnr_db(reference, quantized_out) > 15)
""", check=True)
md("""
Timings depend on the machine, so they are shown and not checked:
""")
code("""
for name, graph in (("float32", resnet_fp32), ("int8", resnet_int8)):
    graph.set_input(data=image)
    print(name, graph.benchmark(number=3, repeat=3))
""")
md("""
The profile of the int8 program: the convolutions (`int8` in, `int32` accumulated) with the
requantization fused into them.
""")
code("""
resnet_int8.profile(number=3)
""")
md("""
On a CPU with AVX-512 VNNI the int8 convolutions compute four `u8 x s8` products per `int32` lane
with one instruction, `vpdpbusd` (`RB_X86_INT8` chooses the path; without VNNI it is
`vpmaddwd` on widened pairs). What this host has, and the instruction in the first convolution
that uses it:
""")
code("""
from relaybench.backends.llvm.jit import host_target, int8_path
print("host:", host_target().cpu, "| int8 path:", int8_path())
for index, kernel in enumerate(resnet_int8.kernels):
    asm = resnet_int8.source("asm", group=index)
    if "vpdpbusd" in asm:
        lines = asm.splitlines()
        at = next(i for i, line in enumerate(lines) if "vpdpbusd" in line)
        print(kernel.name)
        print("\\n".join(lines[max(0, at - 3):at + 3]))
        break
else:
    print("no vpdpbusd: this host's int8 path is", int8_path())
""")
md("""
## The full experiment

`relaybench reproduce quantization --out results/` writes three tables (markdown, CSV, JSON):
the digits accuracy above; the agreement of int8 with float32 (top-1 agreement and SQNR over 16
random inputs) on ResNet-18, MobileNet V2, VGG-16 and the DQN for each calibrate mode; and the
speed of float32 against int8 on ResNet-18 and MobileNet V2 with 1 and 2 threads.
`--quick` runs a small version of it in well under a minute.
""")
nb = nbf.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, str(pathlib.Path(__file__).resolve().parents[1] / "10_quantization.ipynb"))
