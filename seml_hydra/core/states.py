"""Experiment states, as in SEML 0.5 (``settings.STATES``); the strings are stored in MongoDB."""

STAGED = "STAGED"
PENDING = "PENDING"
RUNNING = "RUNNING"
RESCHEDULED = "RESCHEDULED"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
KILLED = "KILLED"
INTERRUPTED = "INTERRUPTED"

#: every state, in life-cycle order (the order status tables use)
ALL = (STAGED, PENDING, RUNNING, RESCHEDULED, COMPLETED, FAILED, KILLED, INTERRUPTED)
#: the experiment will not change any more without a user command (reset, start)
TERMINAL = frozenset({COMPLETED, FAILED, KILLED, INTERRUPTED})
#: a Slurm job exists (or should) that will run or is running the experiment
ACTIVE = frozenset({PENDING, RUNNING, RESCHEDULED})
#: outcomes that a new launch of the same config runs again (after a reset to STAGED)
RERUNNABLE = frozenset({FAILED, KILLED, INTERRUPTED})
#: SEML 0.5 also calls STAGED "QUEUED" in old collections
ALIASES = {"QUEUED": STAGED}

#: a Sacred heartbeat (or start/claim time) younger than this (seconds) proves a run alive
#: (Sacred beats every 10 s): ``manage.decide_killed`` and the claim of a requeued task
#: (``seml_hydra.job.claim.claim_filter``) use it
HEARTBEAT_STALE_S = 60.0
