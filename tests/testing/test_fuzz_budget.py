"""A fixed-seed fuzz run that the test suite makes: every program agrees on every
configuration. A failure names the seeds; ``relaybench fuzz --seed S --n 1 --out DIR
--minimize`` shrinks one."""

import pytest

from relaybench.testing.fuzz import check_seed

FIRST_SEED = 50_000
CHUNKS = 4
PER_CHUNK = 9        # 36 programs (`make fuzz` runs a larger budget)
DEVICE_EVERY = 6
"""The OpenCL configuration runs every sixth program: each program is a new OpenCL build,
about a second of PoCL's compiler on a cold cache, where the CPU configurations' kernels come
from the kernel cache or compile in milliseconds (``make fuzz`` runs every program on every
configuration)."""


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_fuzz_budget(chunk):
    failures = []
    for seed in range(FIRST_SEED + chunk * PER_CHUNK, FIRST_SEED + (chunk + 1) * PER_CHUNK):
        result = check_seed(seed, _configs(seed))
        failures += [f"seed {seed}: {o}"[:400] for o in result.failures]
    assert not failures, "\n".join(failures)


def _configs(seed):
    from relaybench.testing import CONFIGS
    return [c for c in CONFIGS if not c.startswith("opencl") or seed % DEVICE_EVERY == 0]
