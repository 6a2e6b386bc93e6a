"""Helpers of the VM's tests: run a module on the interpreter and on the VM, compare the values."""

import numpy as np

import relaybench as rb
from relaybench.backends.interpreter import ConstructorValue, RefValue


def assert_same_value(got, want, rtol=1e-5, atol=1e-6, where="result"):
    """``got`` (the VM's) equals ``want`` (the interpreter's): arrays within tolerance (equal
    for integers and bools), tuples and ADT objects field by field, references by content."""
    stack = [(got, want, where)]
    while stack:
        g, w, path = stack.pop()
        if isinstance(w, tuple):
            assert isinstance(g, tuple) and len(g) == len(w), f"{path}: {g!r} vs {w!r}"
            stack.extend((a, b, f"{path}.{i}") for i, (a, b) in enumerate(zip(g, w)))
        elif isinstance(w, ConstructorValue):
            assert isinstance(g, ConstructorValue) and g.name == w.name and g.tag == w.tag, \
                f"{path}: {g!r:.80} vs {w!r:.80}"
            stack.extend((a, b, f"{path}.{w.name}[{i}]") for i, (a, b) in
                         enumerate(zip(g.fields, w.fields)))
        elif isinstance(w, RefValue):
            assert isinstance(g, RefValue), f"{path}: {g!r} vs {w!r}"
            stack.append((g.value, w.value, f"{path}.value"))
        else:
            g, w = np.asarray(g), np.asarray(w)
            assert g.shape == w.shape and g.dtype == w.dtype, \
                f"{path}: {g.dtype}{list(g.shape)} vs {w.dtype}{list(w.shape)}"
            if w.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=path)
            else:
                np.testing.assert_array_equal(g, w, err_msg=path)


def run_both(mod, args=(), kwargs=None, entry="main", opt_levels=(0, 3), params=None, **tol):
    """The interpreter's value of ``@entry(*args)``, checked equal to the VM's at each
    opt_level; returns the interpreter's value."""
    from relaybench.passes.bind_params import bind_params
    kwargs = kwargs or {}
    ref_mod = bind_params(mod, params) if params else mod
    ex = rb.create_executor("interpreter", mod=ref_mod)
    want = ex.evaluate(ref_mod.get_global_var(entry))(*args, **kwargs)
    for opt_level in opt_levels:
        exe = rb.vm.compile(mod, params=params, opt_level=opt_level)
        got = rb.vm.VirtualMachine(exe).invoke(entry, *args, **kwargs)
        assert_same_value(got, want, where=f"opt_level={opt_level}", **tol)
    return want
