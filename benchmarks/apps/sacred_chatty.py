"""The same chatty task as a plain Sacred 0.8 run under Sacred's own ``MongoObserver`` (what
SEML 0.5.7 attaches to each experiment): the heartbeat benchmark's reference.

    python sacred_chatty.py <mongodb url> <database> <kb_per_s> <seconds>
"""

import sys

from chatter import chatter
from sacred import SETTINGS, Experiment
from sacred.observers import MongoObserver

SETTINGS.CAPTURE_MODE = "sys"  # as seml-hydra and SEML 0.5.7 capture
url, database, kb_per_s, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
ex = Experiment("sacred_chatty", save_git_info=False)
ex.observers.append(MongoObserver(url=url, db_name=database))


@ex.main
def run() -> int:
    return chatter(kb_per_s, seconds)


if __name__ == "__main__":
    ex.run()
