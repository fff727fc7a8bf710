"""Pure vocabulary shared by every side (login node, compute node, CLI): experiment states,
document building blocks, the user-error base class, id ranges. No I/O, no imports of the other
sub-packages."""
