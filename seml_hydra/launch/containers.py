"""``OmegaConf.to_container`` typed by the node it converts: :func:`to_dict` for a mapping node,
:func:`to_list` for a list node. OmegaConf types the result as any container or scalar; these
check which one it is. ``omegaconf`` is imported inside them (the launcher module is imported
at every Hydra start)."""

from __future__ import annotations

from typing import Any, cast


def to_dict(node: Any, **options: Any) -> dict[str, Any]:
    """``OmegaConf.to_container(node, **options)`` of a mapping node (``DictConfig``): a plain
    dict (its keys as the node has them; a Hydra config's are strings). Raises ``TypeError``
    for a list node, ``ValueError`` for a value that is no OmegaConf node (OmegaConf's)."""
    from omegaconf import OmegaConf

    out = OmegaConf.to_container(node, **options)
    if not isinstance(out, dict):
        raise TypeError(f"expected a mapping node, got {type(out).__name__}")
    return cast(dict[str, Any], out)


def to_list(node: Any, **options: Any) -> list[Any]:
    """``OmegaConf.to_container(node, **options)`` of a list node (``ListConfig``): a plain
    list. Raises ``TypeError`` for a mapping node, ``ValueError`` for a value that is no
    OmegaConf node (OmegaConf's)."""
    from omegaconf import OmegaConf

    out = OmegaConf.to_container(node, **options)
    if not isinstance(out, list):
        raise TypeError(f"expected a list node, got {type(out).__name__}")
    return out
