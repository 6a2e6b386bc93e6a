"""Shape functions (``FShapeFunc``): one for every operator that has a type relation, each
agreeing with its relation on static shapes and with numpy where the output shape has a formula."""

import numpy as np
import pytest

from relaybench.ir.expr import Call, Op
from relaybench.ir.functor import post_order
from relaybench.ir.types import TupleType
from relaybench.op.registry import (OpPattern, attr_scope, get_op_attr, get_opdef, list_ops,
                                   register_shape_func)
from relaybench.op.shape_funcs import shape_of_call
from relaybench.testing import random_program
from relaybench.testing.random_programs import OP_GENERATORS


def _shape(t):
    if isinstance(t, TupleType):
        return [tuple(int(d) for d in f.shape) for f in t.fields]
    return tuple(int(d) for d in t.shape)


def test_every_op_with_a_type_relation_has_a_shape_function():
    lacking = [name for name in list_ops()
               if get_opdef(name).type_rel is not None and get_op_attr(name, "FShapeFunc") is None]
    assert lacking == []
    assert get_op_attr("arange", "TShapeDataDependent") is True
    assert get_op_attr("add", "TShapeDataDependent") is False


def test_shape_functions_agree_with_the_type_relations_on_random_programs():
    # every call of 300 random well-typed programs: the relation's static output shapes against
    # the shape function run on the arguments' shapes; the programs reach every op but two
    seen, wrong = set(), {}
    for seed in range(300):
        for node in post_order(random_program(seed).mod["main"]):
            if not (isinstance(node, Call) and isinstance(node.op, Op)):
                continue
            name = node.op.name
            seen.add(name)
            want = _shape(node.checked_type)
            want = want if isinstance(want, list) else [want]
            got = shape_of_call(name, node.attrs, [_shape(a.checked_type) for a in node.args])
            if got != want:
                wrong.setdefault(name, (node.attrs, got, want))
    assert wrong == {}
    assert set(OP_GENERATORS) <= seen


@pytest.mark.parametrize("pattern, inputs", [
    (OpPattern.ELEMWISE, [((2, 3), "int32")]),
    (OpPattern.BROADCAST, [((2, 1, 3), "int32"), ((4, 3), "int32")]),
])
def test_ops_the_random_programs_leave_out_agree_with_their_relations(pattern, inputs):
    # the elementwise and broadcasting ops no generator makes yet (new families) on one call each
    from relaybench.ir import var
    from relaybench.ir.type_infer import infer_expr
    from relaybench.op.registry import OpCaller
    names = [n for n in list_ops() if n not in OP_GENERATORS and get_opdef(n).pattern == pattern
             and len(get_opdef(n).inputs) == len(inputs) and not get_opdef(n).attrs]
    checked = 0
    for name in names:
        for dtype in ("float32", "int32"):   # math ops take floats, bitwise ones ints
            args = [var(f"x{k}", shape=shape, dtype=dtype) for k, (shape, _) in enumerate(inputs)]
            try:
                want = _shape(infer_expr(OpCaller(get_opdef(name))(*args)))
            except Exception:
                continue
            call = OpCaller(get_opdef(name))(*args)
            assert shape_of_call(name, call.attrs, [s for s, _ in inputs]) == [want], name
            checked += 1
            break
    assert checked == len(names)


def test_einsum_against_numpy():
    if "einsum" not in list_ops():
        pytest.skip("no einsum operator")
    for equation, shapes in [("ij,jk->ik", [(2, 3), (3, 5)]), ("...ij,...jk", [(4, 1, 2, 3),
                                                                                (6, 3, 2)]),
                             ("ii->i", [(3, 3)]), ("bij,j", [(2, 3, 4), (4,)])]:
        want = np.einsum(equation, *[np.zeros(s) for s in shapes]).shape
        attrs = get_opdef("einsum").make_attrs({"equation": equation})
        assert shape_of_call("einsum", attrs, [shapes]) == [want], equation


@pytest.mark.parametrize("start, stop, step", [(0, 10, 3), (2.5, 3.0, 0.1), (5, 1, -2), (4, 4, 1),
                                               (3, 0, 1)])
def test_arange_reads_its_inputs_values(start, stop, step):
    attrs = get_opdef("arange").make_attrs({})
    values = [np.float32(start), np.float32(stop), np.float32(step)]
    (shape,) = shape_of_call("arange", attrs, values)
    assert shape == np.arange(*values, dtype="float32").shape


def test_shape_of_and_hand_computed_windows():
    assert shape_of_call("shape_of", get_opdef("shape_of").make_attrs({}), [(2, 3, 4)]) == [(3,)]
    conv = get_opdef("nn.conv2d").make_attrs({"strides": (2, 2), "padding": (3, 3),
                                              "data_layout": "NHWC", "kernel_layout": "HWIO"})
    # (224 + 6 - 7) // 2 + 1 = 112
    assert shape_of_call("nn.conv2d", conv, [(1, 224, 224, 3), (7, 7, 3, 64)]) == \
        [(1, 112, 112, 64)]
    pool = get_opdef("nn.max_pool2d").make_attrs({"pool_size": (2, 2), "strides": (3, 3),
                                                  "ceil_mode": True})
    # ceil((6 - 2) / 3) + 1 = 3
    assert shape_of_call("nn.max_pool2d", pool, [(1, 1, 6, 6)]) == [(1, 1, 3, 3)]
    split = get_opdef("split").make_attrs({"indices_or_sections": (2, 5), "axis": 1})
    assert shape_of_call("split", split, [(4, 9)]) == [(4, 2), (4, 3), (4, 4)]


def test_bad_inputs_name_the_op():
    attrs = get_opdef("reshape").make_attrs({"newshape": (5, -1)})
    with pytest.raises(ValueError, match="reshape"):
        shape_of_call("reshape", attrs, [(3, 4)])
    with pytest.raises(ValueError, match="add: .*do not broadcast"):
        shape_of_call("add", get_opdef("add").make_attrs({}), [(3,), (4,)])


def test_a_users_shape_function_overrides_the_librarys():
    with attr_scope():
        register_shape_func("nn.relu", False, lambda attrs, inputs: [(7,)])
        assert shape_of_call("nn.relu", get_opdef("nn.relu").make_attrs({}), [(2,)]) == [(7,)]
    assert shape_of_call("nn.relu", get_opdef("nn.relu").make_attrs({}), [(2,)]) == [(2,)]
