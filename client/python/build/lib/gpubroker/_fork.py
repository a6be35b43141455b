"""The process's fork generation: handles made before a fork() are the parent's."""

import os

generation = 0


def _in_child() -> None:
    global generation
    generation += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)
