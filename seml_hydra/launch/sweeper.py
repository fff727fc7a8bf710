"""Hydra's basic sweeper without its second composition of every point, and its adoption.

Hydra's ``BasicSweeper`` composes each point once to validate it (``validate_batch_is_legal``,
~50 ms a point) before the launcher composes it again. :class:`LauncherValidates` makes it the
same sweeper (same grid, order, ``params``, ``max_batch_size`` batches, returns) whose
validation is left to the seml-hydra launcher, which composes and resolves every point before
it stages anything and raises Hydra's own error for a point that does not compose; with another
launcher it validates through ``launch.compose.iter_point_chunks`` (one Hydra composition per
combination of config-group choices where it can), which raises the same errors.

``hydra/sweeper=seml`` (``hydra_plugins.seml_launcher.seml_sweeper.SemlSweeper``) is a basic
sweeper with it; :func:`adopt_driving_basic_sweeper` gives it to the plain ``BasicSweeper`` a
user gets by default when that drives a seml-hydra launcher. Imported when Hydra scans its
plugins (by the ``hydra/sweeper=seml`` shim): Hydra only.
"""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Sequence
from typing import Any

#: the module of Hydra's basic sweeper. Hydra's plugin scan executes it again, which makes a new
#: ``BasicSweeper`` class: it is looked up when needed, never kept from an earlier import
BASIC_SWEEPER_MODULE = "hydra._internal.core_plugins.basic_sweeper"
#: the class attribute, true on a launcher that composes and validates every point of a batch
#: before it stages or runs any (``SemlLauncher``)
VALIDATES_POINTS = "validates_points"
#: how many frames above the launcher's ``setup`` the sweeper's ``setup`` may be: Hydra 1.3 has
#: one between them (``Plugins.instantiate_launcher``)
SEARCH_DEPTH = 6
#: how far up the stack a sweeper that was not adopted is looked for, to say why
REASON_DEPTH = 50

log = logging.getLogger(__name__)


class LauncherValidates:
    """Mixin for a ``BasicSweeper`` (first base): batch validation without composing every
    point in full."""

    launcher: Any
    hydra_context: Any
    config: Any

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Nothing with a launcher that validates the points itself (:data:`VALIDATES_POINTS`:
        seml-hydra's, which composes and validates every point before staging); else every point of ``batch`` composed through ``iter_point_chunks``.
        Raises Hydra's composition errors (``ConfigCompositionException``...)."""
        if getattr(self.launcher, VALIDATES_POINTS, False):
            return  # the launcher composes, validates and raises before staging anything
        from seml_hydra.launch.compose import iter_point_chunks

        assert self.hydra_context is not None and self.config is not None
        chunks = iter_point_chunks(self.hydra_context.config_loader, self.config, batch, 0, 1000)
        for _ in chunks:  # each chunk is dropped once composed: only the errors matter
            pass


def basic_sweeper_class() -> Any:
    """Hydra's ``BasicSweeper`` class as its module holds it now (after any plugin scan)."""
    __import__(BASIC_SWEEPER_MODULE)
    return sys.modules[BASIC_SWEEPER_MODULE].BasicSweeper


def driving_basic_sweeper(frame: types.FrameType | None) -> Any:
    """The plain ``BasicSweeper`` (exactly that class, not a subclass) whose ``setup`` is on
    the call stack within :data:`SEARCH_DEPTH` frames of ``frame`` (``frame`` included):
    Hydra's sweeper instantiating the launcher being set up. None when no such sweeper is there
    (another sweeper, a subclass, Hydra's compose API or a test calling ``setup`` directly)."""
    cls = basic_sweeper_class()
    code = cls.setup.__code__
    for _ in range(SEARCH_DEPTH):
        if frame is None:
            return None
        if frame.f_code is code:
            sweeper = frame.f_locals.get("self")
            return sweeper if type(sweeper) is cls else None
        frame = frame.f_back
    return None


_adopted: dict[type, type] = {}  # BasicSweeper class -> its adopted subclass


def adopt_driving_basic_sweeper() -> bool:
    """Give the plain ``BasicSweeper`` setting up the caller (:func:`driving_basic_sweeper`,
    searched from the caller's caller) the validation of :class:`LauncherValidates`, in place:
    its class becomes a direct subclass of its own with that method (a class with the mixin as
    a second base would not do: Python refuses such a ``__class__`` assignment); its state
    (overrides, batches, ``max_batch_size``, ``params``) is untouched, only its validation pass
    goes. Returns whether it did; when it did not, logs why (:func:`not_adopted_reason`: a
    warning when Hydra's basic sweeper is there but out of reach, as it then composes every
    point once more; a debug line in the usual cases). Call it from the launcher's ``setup``
    only."""
    frame = sys._getframe(2)
    sweeper = driving_basic_sweeper(frame)
    if sweeper is None:
        level, why = not_adopted_reason(frame)
        log.log(level, "Hydra's basic sweeper not adopted: %s", why)
        return False
    cls = type(sweeper)
    if cls not in _adopted:
        method = LauncherValidates.validate_batch_is_legal
        _adopted[cls] = type(
            cls.__name__, (cls,), {"validate_batch_is_legal": method, "__module__": __name__}
        )
    sweeper.__class__ = _adopted[cls]
    return True


def not_adopted_reason(frame: types.FrameType | None) -> tuple[int, str]:
    """Why :func:`driving_basic_sweeper` found no sweeper from ``frame``, and how loud to say
    it (a ``logging`` level): Hydra's ``BasicSweeper.setup`` further up than
    :data:`SEARCH_DEPTH` frames (a Hydra whose call path changed: a warning, as the sweeper
    then composes every point once more to validate it); a subclass of it (its own validation
    is kept: debug); none within :data:`REASON_DEPTH` frames (another sweeper, Hydra's compose
    API, a direct ``setup``: debug)."""
    cls = basic_sweeper_class()
    code = cls.setup.__code__
    for depth in range(REASON_DEPTH):
        if frame is None:
            break
        if frame.f_code is code:
            sweeper = frame.f_locals.get("self")
            if type(sweeper) is not cls:
                return (
                    logging.DEBUG,
                    f"{type(sweeper).__qualname__} is a subclass of it, left as is",
                )
            return logging.WARNING, (
                f"its setup is {depth + 1} frames above the launcher's, beyond the "
                f"{SEARCH_DEPTH} searched (another Hydra version?), so it composes every point "
                "once more to validate it (slower, same points)"
            )
        frame = frame.f_back
    return logging.DEBUG, "none sets this launcher up (another sweeper, or no sweeper)"
