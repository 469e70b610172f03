"""The columns of every table: the floor (raw sockets), fastmc and the peers, and the bound."""

from .base import Column, fastmc_col, floors, peer_cols
from .bound import Bound, Results
from .floor import Floor
from .peers import PEER_MAKERS, PEERS, load_fastmc, make_fastmc

__all__ = [
    "PEERS",
    "PEER_MAKERS",
    "Bound",
    "Column",
    "Floor",
    "Results",
    "fastmc_col",
    "floors",
    "load_fastmc",
    "make_fastmc",
    "peer_cols",
]
