"""Shared test settings: a quick default run and a full one, hypothesis profiles sized for a 2-core machine.

``pytest`` (the README's command) leaves out the tests marked ``slow`` (``torch.compile``, Triton's
interpreter, float64 gradchecks of every family, exhaustive tables, concurrent writers) and draws the
``quick`` hypothesis profile. ``pytest --full`` runs every test with the ``full`` profile;
``ROPE_REF_HYPOTHESIS_PROFILE=stress`` draws 10x more examples per property when hunting for rare
counterexamples.
"""

import os

from hypothesis import HealthCheck, settings

_PROFILES = {"quick": 20, "full": 60, "stress": 600}
for _name, _examples in _PROFILES.items():
    settings.register_profile(
        _name, max_examples=_examples, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
settings.register_profile("ci", parent=settings.get_profile("full"))  # the old name of "full"


def pytest_addoption(parser):
    parser.addoption(
        "--full",
        action="store_true",
        help="run every test, the slow ones included, with hypothesis' full example counts",
    )


def pytest_configure(config):
    default = "full" if config.getoption("--full") else "quick"
    settings.load_profile(os.environ.get("ROPE_REF_HYPOTHESIS_PROFILE", default))


def pytest_collection_modifyitems(config, items):
    if config.getoption("--full"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
