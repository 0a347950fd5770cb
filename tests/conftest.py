"""Settings for the whole test suite."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

from tests.kit.interrupt import tear_down_on_sigterm

# Every `serve` a test starts stops at once on SIGTERM (no 5 s drain: nothing routes to it
# through a Service). The drain's own tests pass --drain-seconds, which wins over this.
os.environ.setdefault("LAYER_LOCALITY_DRAIN_SECONDS", "0")

# `make mutation` (docs/testing.md) runs the unit tests once per mutant with
# --hypothesis-profile=mutation: a failing example is a kill as found, not shrunk (shrinking
# takes seconds a mutant and changes no verdict), and no verdict rests on timing.
settings.register_profile(
    "mutation",
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def pytest_configure() -> None:
    # A run stopped from outside still tears its fixtures down (tests/kit/interrupt.py).
    tear_down_on_sigterm()
