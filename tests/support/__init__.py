"""What the test files share, by concern (``tests/`` is on ``sys.path``, pyproject's
``[tool.pytest.ini_options] pythonpath``, so a test file writes ``from support.run import
run_app``):

- :mod:`support.paths`: the repository and the test apps;
- :mod:`support.mongo`: the testbed's MongoDB, the test database, a private ``mongod``,
  SEML configuration files;
- :mod:`support.slurm`: ``sacct``/``squeue`` queries, the fault cluster, a blocking Slurm client;
- :mod:`support.wait`: waiting for a state instead of sleeping;
- :mod:`support.run`: apps, sweeps and the ``seml`` command run as a user runs them;
- :mod:`support.launcher_conf`: ``hydra.launcher`` nodes for the pure tests of the launcher;
- :mod:`support.machine`: what the machine shares between test processes (locks, the second user);
- :mod:`support.modules`: small importable projects and fresh-interpreter imports;
- :mod:`support.markers`: which marker a fixture brings, the order tests start in;
- :mod:`support.hydra_singletons`: Hydra's process-wide state put back after a test.

``tests/conftest.py`` holds only fixtures and hooks (which call these); no test file imports
``conftest`` or another test file (``tests/unit/test_test_layout.py`` checks it).
"""
