"""The run context every scenario gets: settings, servers, fastmc, the columns (created once per
server set), the failures found so far and the report being written."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .columns import PEER_MAKERS, PEERS, Floor, make_fastmc
from .report import Report
from .settings import Settings
from .verify import Failures


@dataclass
class Ctx:
    s: Settings
    servers1: list
    servers3: list | None
    meta_ok: bool
    fastmc_mod: Any
    fastmc_name: str
    fastmc_error: str | None
    run_id: str
    out: str = "results"  # folder of the Markdown, the JSON and the chart
    limit_maxbytes: int | None = None  # the first server's memory
    peers: tuple = PEERS  # the peers' columns (bench.py --peers)
    pin_pids: list = field(default_factory=list)  # servers pinned with us to one CPU
    pinned_now: bool = False
    failures: Failures = field(default_factory=Failures)
    report: Report = field(default_factory=Report)
    _columns: dict = field(default_factory=dict)

    @property
    def has_fastmc(self) -> bool:
        return self.fastmc_mod is not None

    @property
    def standin(self) -> bool:
        return self.has_fastmc and self.fastmc_name != "fastmc"

    @property
    def mode(self) -> str:
        return "quick" if self.s.quick else "full"

    def columns(self, servers: list) -> list:
        """floor text, floor meta, fastmc, then the peers; created once per server set."""
        key = tuple(servers)
        if key not in self._columns:
            self._columns[key] = self._make_columns(servers)
        return self._columns[key]

    def _make_columns(self, servers: list) -> list:
        tags = (f"{self.run_id}{i}" for i in range(100))
        cols: list = [Floor("floor text", next(tags), servers, "text", self.meta_ok)]
        if self.meta_ok:
            cols.append(Floor("floor meta", next(tags), servers, "meta", True))
        if self.has_fastmc:
            try:
                cols.append(make_fastmc(self.fastmc_mod, self.fastmc_name, servers, next(tags)))
            except Exception as e:  # reported loudly, the run goes on
                self.failures.add("setup", "fastmc", f"Client({servers}) raised {e!r}")
        for name in self.peers:
            try:
                cols.append(PEER_MAKERS[name](servers, next(tags)))
            except Exception as e:
                self.failures.add("setup", name, f"could not create client: {e!r}")
        return cols
