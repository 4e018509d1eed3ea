"""--replica: more servers for one run, each checked to hold the same database as the primary first.

The benchmark SQL only reads, so any hot standby of the reference database (PostgreSQL's streaming
replication) can answer it. Before the first question every replica must be caught up with the primary
(a standby of this primary: its replay position reaches the primary's WAL position within REPLAY_WAIT_S) and
hold the same data: the same exact row counts of the reference tables, the same load log (file names and
checksums) and the same PostGIS build. A replica that lags or differs is refused with one line naming it,
unless forced; a replica that is not a standby (a restored copy) is judged by the fingerprint alone.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from gsqa_core.db import connect, resolve_dsn, target_parts
from gsqa_core.errors import GsqaError
from gsqa_core.roles import login_dsn
from gsqa_core.sandbox import READER, Role
from reproduce import readiness
from reproduce.runner import Server

REPLAY_WAIT_S = 30.0  # how long a standby may take to replay what the primary has written so far


@dataclass(frozen=True)
class Checked:
    name: str
    admin: str
    logins: dict[Role, str]  # each role's login DSN there, resolved once (the preflight used the same)
    role: str  # standby (of this primary) or copy
    problem: str = ""  # why it does not hold the primary's database ("" when it does)

    def server(self, role: Role) -> Server:
        """The replica as a server that answers as `role`."""
        return Server(self.name, self.logins[role], self.admin)


def replicas(primary: str | None, dsns: Sequence[str], tables: list[str], force: bool,
             roles: Sequence[Role] = (READER,), wait: float = REPLAY_WAIT_S) -> list[Checked]:
    """The --replica servers, ready for `roles` and checked against the primary; GsqaError for the first that
    is not (a lagging or different one only without `force`)."""
    checked = []
    names = {name_of(primary)}
    for dsn in dsns:
        name = name_of(dsn)
        if name in names:
            raise GsqaError(f"--replica {name}: named twice (or it is the primary)")
        names.add(name)
        try:
            logins = {role: login_dsn(dsn, role) for role in roles}
            readiness.preflight(dsn, logins, tables)
        except GsqaError as error:
            raise GsqaError(f"--replica {name}: {error}") from None
        kind, problem = _compare(primary, dsn, wait)
        if problem and not force:
            raise GsqaError(f"--replica {name}: {problem}; its answers could differ from the primary's "
                            "(--force runs on it anyway)")
        checked.append(Checked(name, resolve_dsn(dsn), logins, kind, problem))
    return checked


def name_of(dsn: str | None) -> str:
    """host:port/database, as reports name a server."""
    host, port, database = target_parts(resolve_dsn(dsn))
    return f"{host}:{port}/{database}"


def _compare(primary: str | None, replica: str, wait: float) -> tuple[str, str]:
    """(role, problem): whether the replica is a standby of the primary, and what differs, if anything."""
    with connect(primary, autocommit=True) as source, connect(replica, autocommit=True) as copy:
        standby = copy.execute("SELECT pg_is_in_recovery()").fetchone()[0] and _system_id(copy) == _system_id(source)
        if standby:
            behind = _replay_lag(source, copy, wait)
            if behind:
                return "standby", f"a standby {behind:,} bytes of WAL behind the primary after {wait:.0f} s"
        mine, theirs = fingerprint(source), fingerprint(copy)
    differences = [f"{key} {theirs[key]} (primary: {mine[key]})" for key in mine if mine[key] != theirs[key]]
    return ("standby" if standby else "copy"), ("not the primary's data: " + "; ".join(differences)
                                                if differences else "")


def _system_id(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()[0]


def _replay_lag(primary: psycopg.Connection, standby: psycopg.Connection, wait: float) -> int:
    """Bytes of WAL the standby has still to replay to reach where the primary is now (0: caught up)."""
    target = primary.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
    deadline = time.monotonic() + wait
    while True:
        behind = standby.execute("SELECT greatest(pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn()), 0)::bigint",
                                 [target]).fetchone()[0]
        if not behind or time.monotonic() >= deadline:
            return behind
        time.sleep(0.1)


def fingerprint(conn: psycopg.Connection) -> dict[str, object]:
    """What must be equal on every server of a run: exact row counts, the load log, the PostGIS build."""
    facts = readiness.table_facts(conn)
    log = conn.execute("SELECT md5(coalesce(string_agg(concat_ws(' ', target_table, source_name, source_checksum), "
                       "',' ORDER BY target_table, source_name), '')) FROM gsqa.load_log").fetchone()[0]
    return {"row counts": facts["row_counts"], "load log": log, "PostGIS": facts["postgis_full_version"]}
