"""The sandbox connections serve's query calls share: gsqa_model's connections of the runner
(reproduce/runner.py) with geometries as WKT and NULL columns kept, at most --connections of them, and no
client holding more than its share while others wait."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import psycopg
import psycopg.adapt
import psycopg.types.json
import shapely
from psycopg.types.string import TextLoader

from reproduce.runner import Outcome, SandboxConnection
from reproduce.serve.replies import agent_value, json_or_text, server_error

APPLICATION_NAME = "gsqa-serve"  # what pg_stat_activity shows for the tools' connections
# The types an agent gets as the server's text (replies.py says why), their arrays with them.
AS_TEXT = ("date", "time", "timetz", "timestamp", "timestamptz", "interval",
           *(f"{kind}{range_}" for kind in ("int4", "int8", "num", "date", "ts", "tstz")
             for range_ in ("range", "multirange")))


class WktLoader(psycopg.adapt.Loader):
    """geometry and geography values as WKT (text format: hex EWKB) instead of the stored answers' hex."""

    def load(self, data: Any) -> str:
        hex_ewkb = bytes(data).decode()
        try:
            return shapely.from_wkb(hex_ewkb).wkt
        except (shapely.errors.ShapelyError, NotImplementedError):  # curves, triangles: GEOS cannot write them
            return hex_ewkb


class AgentConnection(SandboxConnection):
    """gsqa_model's connection for serve: values in the forms of replies.py (dates, times, intervals and ranges
    as the server's text: psycopg's Python types would drop an interval's months, infinite dates and BC years),
    cut where long."""

    application_name = APPLICATION_NAME
    keep_nulls = True  # an agent sees every column it asked for
    convert = staticmethod(agent_value)
    statement = ""  # the SQL as the agent sent it (the server saw it inside runner.capped's query)

    def run(self, statement: str) -> Outcome:
        self.statement = statement
        return super().run(statement)

    def describe(self, error: psycopg.Error, sent: str) -> str:
        return server_error(error, super().describe(error, sent), self.statement, sent)

    def _connect(self) -> psycopg.Connection:
        conn = super()._connect()
        for name in AS_TEXT:
            conn.adapters.register_loader(name, TextLoader)
        for name in ("geometry", "geography"):
            if info := psycopg.types.TypeInfo.fetch(conn, name):
                conn.adapters.register_loader(info.oid, WktLoader)
        psycopg.types.json.set_json_loads(json_or_text, conn)
        conn.rollback()
        return conn


class Pool:
    """At most `size` sandbox connections, made by `connect` when first needed and reused; a caller waits for a
    free one. Fair: while several owners (clients) hold or wait for connections, none gets more than its share
    (size divided among them, at least one), so one agent's many calls at once cannot keep the others out."""

    def __init__(self, connect: Callable[[], SandboxConnection], size: int) -> None:
        self._connect, self.size = connect, size
        self._idle: list[SandboxConnection] = []
        self._held: Counter[Hashable] = Counter()  # owner -> connections it holds
        self._waiting: Counter[Hashable] = Counter()  # owner -> calls of it waiting
        self._changed = threading.Condition()

    def share(self) -> int:
        """What one owner may hold now (the caller holds the condition's lock)."""
        owners = len(set(self._held) | set(self._waiting))
        return max(1, self.size // max(1, owners))

    @contextlib.contextmanager
    def connection(self, wait: float, owner: Hashable = None) -> Iterator[SandboxConnection | None]:
        """A free connection for `owner`, waiting at most `wait` seconds for one (None if none came free)."""
        if not self._take(wait, owner):
            yield None
            return
        found = None
        try:
            with self._changed:
                found = self._idle.pop() if self._idle else None
            found = found or self._connect()
            yield found
        finally:
            with self._changed:
                if found is not None:
                    self._idle.append(found)
                self._held[owner] -= 1
                if not self._held[owner]:
                    del self._held[owner]
                self._changed.notify_all()

    def _take(self, wait: float, owner: Hashable) -> bool:
        deadline = None if math.isinf(wait) else time.monotonic() + wait
        with self._changed:
            self._waiting[owner] += 1
            try:
                while sum(self._held.values()) >= self.size or self._held[owner] >= self.share():
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._changed.wait(left)
                self._held[owner] += 1
                return True
            finally:
                self._waiting[owner] -= 1
                if not self._waiting[owner]:
                    del self._waiting[owner]

    def close(self) -> None:
        with self._changed:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
