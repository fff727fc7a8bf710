"""The heartbeat benchmark's printing task, shared by ``chatty.py`` (Hydra) and
``sacred_chatty.py`` (plain Sacred)."""

import time


def chatter(kb_per_s: float, seconds: float) -> int:
    """Print ``kb_per_s`` * 1000 characters a second (lines of 100 characters, 10 writes a
    second, paced by the clock) for ``seconds`` s; returns the number of characters printed."""
    lines_per_tick = max(1, round(kb_per_s * 1000 / 100 / 10))
    start, printed, tick = time.monotonic(), 0, 0
    while tick < seconds * 10:
        text = "".join(f"{tick:08d}.{i:02d} " + "x" * 87 + "\n" for i in range(lines_per_tick))
        print(text, end="", flush=True)
        printed += len(text)
        tick += 1
        time.sleep(max(0.0, start + tick / 10 - time.monotonic()))
    return printed
