"""Import every shipped policy module so each registers itself."""
from . import edf, fcfs, timely  # noqa: F401
from . import rtlm, semantic, slice, timebill  # noqa: F401  (the other papers' schedulers)
