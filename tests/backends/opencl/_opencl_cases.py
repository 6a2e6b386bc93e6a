"""Helpers of the OpenCL kernel tests: cases built as one program, and run."""


def build_cases(cases: dict, target: str) -> dict:
    """``{name: kernel}`` for ``{name: (PrimFunc, inputs, expected)}``, every kernel built in one
    OpenCL program (one compiler run)."""
    from relaybench.backends.opencl import build_kernel, build_kernels
    built = {name: build_kernel(func, target, lazy=True) for name, (func, _, _) in cases.items()}
    build_kernels(list(built.values()))
    return built


def run_case(kernel, case) -> tuple:
    """Run one case's kernel on its inputs: ``(output, expected)``."""
    import numpy as np
    func, inputs, expected = case
    out = np.zeros(expected.shape, func.params[-1].dtype)
    kernel(*inputs, out)
    return out, expected
