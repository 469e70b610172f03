"""The "fastmc" logger, with the ``NullHandler`` a library adds (Python's convention: nothing is
printed unless the application configures logging). Imported when fastmc first logs (a server
event, auto-discovery), so that ``import fastmc`` does not import :mod:`logging`."""

from __future__ import annotations

import logging

LOGGER = logging.getLogger("fastmc")
LOGGER.addHandler(logging.NullHandler())
