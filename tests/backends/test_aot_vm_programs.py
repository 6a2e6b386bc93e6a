"""The VM's differential tests, run on AoT: each test of tests/backends/vm/test_vm.py and
test_vm_models.py that compares with the reference interpreter (or with values computed by
hand) runs again with ``rb.vm.compile`` / ``rb.vm.VirtualMachine`` standing for
``rb.build(..., executor="aot")`` and its module. The prelude, ADTs, closures, references,
recursion (100,000-element lists, trees of depth 10,000), char_rnn, tree_lstm and the zoo's
models get the interpreter's answers from native code.

The tests are named in :data:`PROGRAMS`; left out are the tests of the VM's own artifacts
(bytecode listings, storage plans, the ``create_executor("vm")`` front, the other targets,
dynamic shapes) and those that pass the VM's closures back in, which AoT refuses as inputs."""

import sys
from pathlib import Path

import pytest

import relaybench as rb

sys.path.insert(0, str(Path(__file__).parent / "vm"))
import test_vm as vm_programs  # noqa: E402
import test_vm_models as vm_models  # noqa: E402

#: the VM's tests of a program's value, by name (the others test the VM's own artifacts:
#: bytecode listings, storage plans, the create_executor front, other targets, dynamic shapes,
#: or pass the VM's closures back in, which AoT does not take)
PROGRAMS = {
    "test_100k_element_list_folded", "test_arith_tuples_and_nested_tuples",
    "test_bad_inputs_are_named", "test_closures_capture_their_environment",
    "test_constructor_used_as_a_function_value", "test_deep_non_tail_recursion",
    "test_global_let_and_mutual_recursion", "test_if_with_references_takes_one_branch",
    "test_let_recursion_inside_a_closure_with_match_and_a_reference",
    "test_match_failure_names_the_match_and_its_position",
    "test_match_failure_on_a_long_list_prints_it_cut",
    "test_match_tuple_nested_and_wildcard_patterns",
    "test_nested_closures_stored_in_tuples_adts_and_references",
    "test_prelude_hd_of_empty_list_fails_in_the_prelude", "test_prelude_lists",
    "test_prelude_trees_and_nats", "test_references_created_read_and_written",
    "test_shared_node_with_an_effect_runs_once", "test_tree_of_depth_10k",
    "test_char_rnn", "test_recurrent_cells_in_both_forms", "test_tree_lstm", "test_vision_model",
}


def _aot_compile(mod, target="llvm", params=None, opt_level=3, **options):
    return rb.build(mod, target=target, params=params, opt_level=opt_level, executor="aot",
                    **options)


@pytest.fixture
def on_aot(monkeypatch):
    monkeypatch.setattr(rb.vm, "compile", _aot_compile)
    monkeypatch.setattr(rb.vm, "VirtualMachine", lambda lib, num_threads=None: lib)


#: the long one (vision models at two opt levels with the interpreter as reference), run with
#: ``-m slow``
SLOW = {"test_vision_model"}


def _tests(module):
    return [pytest.param(name, getattr(module, name), id=name,
                         marks=[pytest.mark.slow] if name in SLOW else [])
            for name in sorted(dir(module)) if name in PROGRAMS]


#: the vision models the AoT run takes (the VM's own test takes every one, and the AoT code
#: calls the same kernels): MobileNet V2's blocked, depthwise and residual convolutions, the
#: DQN's strided ones and dense layers, the digits CNN's pooling
AOT_VISION = {"mobilenet_v2", "dqn", "digits_cnn"}


def _call(request, test):
    import inspect
    kwargs = {}
    for name, param in inspect.signature(test).parameters.items():
        kwargs[name] = request.getfixturevalue(name) if name in ("prelude_mod",) else None
    marks = getattr(test, "pytestmark", [])
    params = [m for m in marks if m.name == "parametrize"]
    if not params:
        return test(**kwargs)
    for mark in params:   # one parametrize per test in these files
        argnames, values = mark.args[0], mark.args[1]
        for value in values:
            if test.__name__ == "test_vision_model" and value not in AOT_VISION:
                continue
            test(**{argnames: value})


@pytest.fixture(scope="module")
def prelude_mod():
    return vm_programs.prelude_mod.__wrapped__()


@pytest.mark.parametrize("name,test", _tests(vm_programs))
def test_vm_program_on_aot(on_aot, request, name, test):
    _call(request, test)


@pytest.mark.parametrize("name,test", _tests(vm_models))
def test_vm_model_on_aot(on_aot, request, name, test):
    _call(request, test)
