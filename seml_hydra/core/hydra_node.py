"""A stored sweep point back to the ``DictConfig`` Hydra's ``run_job`` expects: used on the
compute node (``seml_hydra.job.runner``) and by the launcher (the batch's typed base node, pickled
into the payload).

Hydra and OmegaConf are imported inside the functions: the job imports this module at start-up
before it knows whether it runs anything (a duplicate job exits at once).
"""

from __future__ import annotations

import re
from typing import Any

from seml_hydra.core.documents import dict_diff, diff_parent


def escape_interpolations(value: Any) -> Any:
    """Escape ``${`` in the strings of a resolved container, so building a ``DictConfig`` from it
    does not interpolate a second time (a value resolved from ``\\${HOME}`` is the literal
    ``${HOME}``). Backslashes before ``${`` are doubled first, as OmegaConf's grammar wants."""
    if isinstance(value, dict):
        return {k: escape_interpolations(v) for k, v in value.items()}
    if isinstance(value, list):
        return [escape_interpolations(v) for v in value]
    if isinstance(value, str) and "${" in value:
        return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value)
    return value


#: what ``${hydra.job.id}`` in ``hydra.sweep.subdir`` resolves to at staging (the Slurm job id
#: exists only in the job): the job puts its id in its place (:func:`with_job_id`)
JOB_ID_TOKEN = "@seml-job-id@"


def with_job_id(value: Any, job_id: str) -> Any:
    """``value`` (a resolved ``hydra`` node, plain containers) with :data:`JOB_ID_TOKEN`
    replaced by ``job_id`` (Slurm's ``<array>_<task>``) in every string: the sweep subdir, the
    output dir and what was resolved from them (the job log's file name). Pure: containers
    are copied, ``value`` is left as it is."""
    if isinstance(value, dict):
        return {k: with_job_id(v, job_id) for k, v in value.items()}
    if isinstance(value, list):
        return [with_job_id(v, job_id) for v in value]
    if isinstance(value, str) and JOB_ID_TOKEN in value:
        return value.replace(JOB_ID_TOKEN, job_id)
    return value


def typed_hydra_node(hydra_node: dict[str, Any]) -> Any:
    """``hydra_node`` as a ``DictConfig`` typed as Hydra's ``HydraConf`` (merged onto the
    structured schema, struct mode off: Hydra's composed node carries keys beyond the schema).
    ~20 ms; the launcher builds it once per batch (``Payload.typed_hydra_base``)."""
    from hydra.conf import HydraConf
    from omegaconf import OmegaConf

    hydra_cfg = OmegaConf.structured(HydraConf)
    OmegaConf.set_struct(hydra_cfg, False)
    hydra_cfg.merge_with(escape_interpolations(hydra_node))
    return hydra_cfg


def _patched_hydra_node(typed_base: Any, diff: list[dict[str, Any]]) -> Any:
    """``typed_base`` (a typed Hydra ``DictConfig``, changed in place) with the leaves of
    ``diff`` (``seml_hydra.core.documents.dict_diff``) set or deleted."""
    for entry in diff:
        node, leaf = diff_parent(typed_base, entry["path"])
        if entry.get("delete"):
            del node[leaf]
        else:
            node[leaf] = escape_interpolations(entry["value"])
    return typed_base


def job_config(
    config: dict[str, Any],
    hydra_node: dict[str, Any],
    job_id: str | None,
    *,
    typed_base: Any = None,
    base_node: dict[str, Any] | None = None,
) -> Any:
    """Rebuild the ``DictConfig`` that Hydra's ``run_job`` expects from a stored point.

    ``hydra`` must be typed as Hydra's ``HydraConf`` (``HydraConfig.set_config`` asserts it).
    Given ``typed_base`` (:func:`typed_hydra_node` of ``base_node``, a fresh copy: it is changed
    in place), only the leaves where ``hydra_node`` differs from ``base_node`` are set on it
    (~1 ms instead of ~20 ms); when that fails the node is merged onto the schema from scratch.
    ``job_id`` becomes ``hydra.job.id`` (Slurm's ``<array>_<task>``).
    """
    from omegaconf import OmegaConf, flag_override, open_dict

    hydra_cfg = None
    if typed_base is not None and base_node is not None:
        try:
            hydra_cfg = _patched_hydra_node(typed_base, dict_diff(base_node, hydra_node))
        except Exception:  # a change the typed node refuses: build it from scratch below
            hydra_cfg = None
    if hydra_cfg is None:
        hydra_cfg = typed_hydra_node(hydra_node)
    if job_id is not None:
        hydra_cfg.job.id = job_id
    cfg = OmegaConf.create(escape_interpolations(config))
    # the node is ours alone: attached without OmegaConf's deep copy, as Hydra's config loader
    # attaches its composed ``hydra`` node (``_internal/config_loader_impl.py``)
    with open_dict(cfg), flag_override(cfg, "no_deepcopy_set_nodes", True):
        cfg.hydra = hydra_cfg
    return cfg
