"""Shared test settings: hypothesis profiles sized for a 2-core CI machine.

``ci`` (default) keeps the suite fast; ``ROPE_REF_HYPOTHESIS_PROFILE=stress pytest`` draws 10x more examples
per property when hunting for rare counterexamples locally.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "stress", max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("ROPE_REF_HYPOTHESIS_PROFILE", "ci"))
