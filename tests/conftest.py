"""Settings for the whole suite."""

from hypothesis import HealthCheck, settings

# The suite runs on small shared machines: generation speed and per-example time vary with the
# load, so neither may fail a test. Examples are derived from each test (no random seed), so a
# failure shows up the same way on every run.
settings.register_profile(
    "tether",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.load_profile("tether")
