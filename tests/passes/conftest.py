"""Shared fixtures of the pass tests."""

import pytest


@pytest.fixture
def scratch_registry():
    """Passes a test registers (with the decorators) are removed from the registry afterwards;
    a registered pass the test replaced is put back."""
    from relaybench.passes import infra
    infra.list_passes()  # every real pass is registered before the snapshot
    saved = dict(infra._REGISTRY)
    yield infra
    infra._REGISTRY.clear()
    infra._REGISTRY.update(saved)
