"""Import every shipped policy module so each registers itself."""
from . import edf, fcfs, timely  # noqa: F401
