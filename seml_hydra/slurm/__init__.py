"""Slurm's command-line tools: pure parsers of their output and the client that runs them
(argument lists, never a shell). Imports ``core`` only."""
