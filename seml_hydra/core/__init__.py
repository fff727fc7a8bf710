"""Pure vocabulary shared by every side (login node, compute node, CLI): experiment states,
document building blocks and diffs (``documents``), Hydra override strings (``overrides``), a
stored point back to Hydra's ``DictConfig`` (``hydra_node``), the user-error base class, id
ranges, calls run at once from threads (``parallel``). No I/O, no imports of the other
sub-packages."""
