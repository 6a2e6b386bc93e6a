"""Legalize: the registered FTVMLegalize rewrites, checked against the interpreter of the original
program, in the pass alone and through rb.build's pipeline; the target chooses the registrations;
nothing registered leaves the module untouched."""

import doctest
import pathlib

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.ir import op_histogram
from relaybench.op import attr_scope, register_legalize
from relaybench.passes import legalize as legalize_module
from relaybench.passes.legalize import Legalize, current_target

CORPUS = pathlib.Path(__file__).parents[1] / "testing" / "corpus"
ODD_CONV = (CORPUS / "legalize_odd_channel_conv2d.rly").read_text()


def even_channels(attrs, inputs, types):
    """nn.conv2d with an odd number of output channels -> pad the weight's output channels to an
    even count, convolve, slice the extra channel off (NCHW / OIHW only)."""
    data, weight = inputs
    out_channels = types[1].shape[0]
    if out_channels % 2 == 0 or attrs["data_layout"] != "NCHW" or attrs["kernel_layout"] != "OIHW":
        return None
    weight = op.nn.pad(weight, pad_width=((0, 1), (0, 0), (0, 0), (0, 0)))
    conv = op.nn.conv2d(data, weight, **dict(attrs, channels=out_channels + 1))
    out = types[2]
    return op.strided_slice(conv, begin=(0, 0, 0, 0), end=tuple(out.shape))


def _inputs(mod, seed=0):
    rng = np.random.default_rng(seed)
    return {p.name_hint: rng.standard_normal([int(d) for d in p.type_annotation.shape]).astype("float32")
            for p in mod["main"].params}


def _interpret(mod, inputs):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*inputs.values())


def test_docstring_examples():
    assert doctest.testmod(legalize_module).failed == 0


def test_pass_info_and_nothing_registered():
    p = Legalize()
    assert (p.info.name, p.info.opt_level, p.info.kebab) == ("Legalize", 1, "legalize")
    mod = rb.parse(ODD_CONV)
    assert Legalize()(mod) is mod


def test_odd_channel_conv_becomes_pad_conv_slice_with_the_same_values():
    mod = rb.parse(ODD_CONV)
    inputs = _inputs(mod)
    expected = _interpret(mod, inputs)
    with attr_scope():
        register_legalize("nn.conv2d", even_channels)
        out = Legalize()(mod)
    hist = op_histogram(out)
    assert hist["nn.pad"] == 2 and hist["strided_slice"] == 2 and hist["nn.conv2d"] == 2
    convs = [n for n in rb.ir.post_order(out["main"].body)
             if isinstance(n, rb.Call) and isinstance(n.op, rb.Op) and n.op.name == "nn.conv2d"]
    assert sorted(c.attrs["channels"] for c in convs) == [4, 6]     # 3 -> 4, 5 -> 6
    assert rb.structural_equal(out["main"].checked_type, rb.passes.InferType()(mod)["main"].checked_type)
    np.testing.assert_allclose(_interpret(out, inputs), expected, rtol=1e-5, atol=1e-5)
    # a numpy formula too: the convolutions are 1x1, so each is a matrix product over channels
    x, w1, w2 = inputs["x"], inputs["w1"], inputs["w2"]
    h = np.maximum(np.einsum("oc,nchw->nohw", w1[:, :, 0, 0], x), 0)
    np.testing.assert_allclose(expected, np.einsum("oc,nchw->nohw", w2[:, :, 0, 0], h), rtol=1e-4, atol=1e-5)


def test_rb_build_runs_legalize_first():
    mod = rb.parse(ODD_CONV)
    inputs = _inputs(mod, seed=1)
    expected = _interpret(mod, inputs)
    with attr_scope():
        register_legalize("nn.conv2d", even_channels)
        snapshots = rb.passes.Snapshots()
        lib = rb.build(mod, target="llvm", opt_level=3, instruments=[snapshots])
        ran = [r.name for r in snapshots.ran() if r.depth == 1]
        assert ran[0] == "Legalize" and snapshots["Legalize"].changed
        np.testing.assert_allclose(lib.run(**inputs), expected, rtol=1e-4, atol=1e-5)


def test_the_target_chooses_the_registration():
    mod = rb.parse(ODD_CONV)
    with attr_scope():
        register_legalize("nn.conv2d", even_channels, target="toy")
        assert current_target() == "llvm"
        assert Legalize()(mod) is mod                          # not registered for llvm
        with rb.PassContext(config={"relay.target": "toy -lanes=2"}):
            assert current_target() == "toy"
            assert op_histogram(Legalize()(mod))["strided_slice"] == 2


def test_a_replacement_of_another_type_is_an_error_naming_the_op():
    mod = rb.parse(ODD_CONV)

    def wrong(attrs, inputs, types):
        return inputs[1]              # the weight is not the convolution's result

    with attr_scope():
        register_legalize("nn.conv2d", wrong)
        with pytest.raises(ValueError, match=r"FTVMLegalize of nn.conv2d replaced a call of type "
                                             r"Tensor\[\(1, 3, 4, 4\), float32\]"):
            Legalize()(mod)


def test_the_corpus_program_parses():
    assert rb.parse(ODD_CONV)["main"] is not None
