"""The "fastmc" logger, with the ``NullHandler`` a library adds (Python's convention: nothing is
printed unless the application configures logging). Imported when fastmc first logs (a server
event, auto-discovery), so that ``import fastmc`` does not import :mod:`logging`."""

from __future__ import annotations

import logging

LOGGER = logging.getLogger("fastmc")
LOGGER.addHandler(logging.NullHandler())


def warm_up_failures(failed: dict[str, Exception]) -> None:
    """Log each server a constructor's ``warm_up`` could not warm (it never raises for them)."""
    for address, error in failed.items():
        LOGGER.warning("warm-up of %s failed: %s", address, error)
