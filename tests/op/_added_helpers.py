"""Shared checks of the tests of the operators added for Relay parity: a program through the
text format, the interpreter and the compiled graph executor at opt_level 0 and 3."""

import re

import numpy as np
import pytest

import relaybench as rb
from relaybench.errors import TypeInferenceError
from relaybench.ir.printer import astext
from relaybench.ir.structural import assert_structural_equal


def raises(message):
    """pytest.raises for a TypeInferenceError whose text starts with ``message``."""
    return pytest.raises(TypeInferenceError, match="^" + re.escape(message))


def module(params: str, body: str):
    return rb.parse(f'#[version = "0.0.5"]\ndef @main({params}) {{\n  {body}\n}}')


def flat(value) -> list:
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in flat(v)]
    return [np.asarray(value)]


def check(mod, *arrays, rtol=0.0, atol=0.0):
    """The interpreter's result of ``@main(*arrays)``, after checking that the program prints
    and parses back to itself and that rb.build at opt_level 0 and 3 gives the same values
    (exactly, unless a tolerance is given)."""
    text = astext(mod)
    back = rb.parse(text)
    assert_structural_equal(back, mod)
    assert astext(back) == text
    ref = rb.create_executor("interpreter", mod=mod).evaluate()(*arrays)
    names = [p.name_hint for p in mod["main"].params]
    for level in (0, 3):
        out = rb.build(mod, target="llvm", opt_level=level).run(**dict(zip(names, arrays)))
        for want, got in zip(flat(ref), flat(out)):
            assert got.shape == want.shape and got.dtype == want.dtype, (level, got.shape, want.shape)
            if rtol or atol:
                np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"opt_level={level}")
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"opt_level={level}")
    return ref
