"""Import every shipped policy module so each registers itself."""
from . import fcfs  # noqa: F401
