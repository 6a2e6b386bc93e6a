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


@pytest.fixture(scope="session")
def small_resnet18():
    """ResNet-18 on 16 x 16 images (10 classes), a seeded input and the interpreter's output:
    ``(mod, params, input name, input, expected)``."""
    import numpy as np

    import relaybench as rb
    mod, params = rb.models.get("resnet18", image_shape=(3, 16, 16), num_classes=10)
    main = mod["main"]
    data = main.params[0]
    x = np.random.default_rng(0).uniform(
        0, 1, tuple(int(d) for d in data.type_annotation.shape)).astype("float32")
    expected = rb.create_executor("interpreter", mod=mod).evaluate()(
        x, *[params[p.name_hint] for p in main.params[1:]])
    return mod, params, data.name_hint, x, np.asarray(expected)

