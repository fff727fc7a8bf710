"""Hydra plugin shim for seml-hydra: registers ``hydra/launcher=seml`` and ``seml_local``.

Hydra imports every ``hydra_plugins`` module at start and again on every rank, so this package
only registers dataclasses; the launcher imports ``seml_hydra`` lazily.
"""
