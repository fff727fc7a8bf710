"""A SEML 0.5 experiment script (run by SEML 0.5.7 itself in tests/service/test_seml_interop.py).

It fails for ``x == fail_on``, prints a line per run and returns ``{"value": 10 * x}``.
"""

import time

from seml import Experiment

ex = Experiment()


@ex.automain
def run(x: int, fail_on: int = 2, sleep_s: float = 0.0):
    print(f"running x={x}")
    time.sleep(sleep_s)
    if x == fail_on:
        raise ValueError(f"x == {x}")
    return {"value": x * 10}
