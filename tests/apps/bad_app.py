"""A test app that misbehaves on request (``mode``): a result BSON cannot store, a SIGKILL as
the OOM killer sends, bytes that are not UTF-8 on stdout."""

import os
import signal
import sys

import hydra
from omegaconf import DictConfig


class Opaque:
    """Neither BSON nor JSON knows this."""

    __slots__ = ("handle",)

    def __init__(self) -> None:
        self.handle = open(os.devnull)  # noqa: SIM115 - an open file cannot be serialised

    def __repr__(self) -> str:
        return "<Opaque handle>"


@hydra.main(version_base="1.3", config_path="conf_bad", config_name="config")
def main(cfg: DictConfig):
    if cfg.mode == "unstorable":
        return {"score": 1.0, "thing": Opaque()}
    if cfg.mode == "huge":
        return "x" * (17 * 1024 * 1024)  # above MongoDB's 16 MB document limit
    if cfg.mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if cfg.mode == "bad_utf8":
        sys.stdout.flush()
        sys.stdout.buffer.write(b"before \xff\xfe after\n")
        sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    main()
