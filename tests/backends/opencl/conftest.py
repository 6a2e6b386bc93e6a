"""The OpenCL tests run on the first OpenCL device found (a GPU when there is one; here PoCL's
CPU device, which ``pyopencl[pocl]`` brings along). They are skipped, saying why, when pyopencl
or every device is missing. Programs are built once per session where tests share them."""

import pytest


def _device_or_reason():
    try:
        import pyopencl  # noqa: F401
    except ImportError:
        return None, "pyopencl is not installed (pip install 'relaybench[opencl]')"
    from relaybench.backends.opencl import devices_text, get_device
    from relaybench.errors import CompileError
    try:
        return get_device("opencl"), None
    except CompileError:
        return None, f"no OpenCL device: {devices_text()}"


_DEVICE, _REASON = _device_or_reason()


def pytest_collection_modifyitems(config, items):
    if _REASON is None:
        return
    skip = pytest.mark.skip(reason=_REASON)
    for item in items:
        if "backends/opencl" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def device():
    """The OpenCL device the tests run on."""
    return _DEVICE


@pytest.fixture(scope="session")
def target():
    """The target string naming that device's platform, as a user would write it."""
    return "opencl"
