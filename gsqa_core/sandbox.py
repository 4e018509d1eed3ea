"""The sandbox that SQL we did not write runs in, declared once: the two login roles, what they get at login,
and what the reference database closes to them. `ingest init` applies it (ingest/roles.py), every command's
preflight and `reproduce check` audit a server against it (gsqa_core/roles.py), and docs/SANDBOX.md is the
threat model it implements.

Two roles, so that neither can read the other's query text in pg_stat_activity (PostgreSQL shows it only to
the same role, superusers and pg_read_all_stats): gold SQL runs as gsqa_reader, a model's SQL as gsqa_model.
Both own nothing and may create nothing; what PostgreSQL 15 cannot forbid a login (its own `ALTER ROLE ...
SET`, its own password, its own default privileges) is sent again at every login we make, audited, and
repaired by `ingest init`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Role:
    name: str
    runs: str  # whose SQL, for messages and `reproduce check`
    password_env: str  # the variable that gives its password (else the one `ingest init` keeps or generates)
    connection_limit: int  # -1: none
    own_settings: tuple[tuple[str, str], ...] = ()  # beside SETTINGS, this role's alone


READER = Role("gsqa_reader", "gold SQL: reproduce verify, show, rebase; score's gold run", "GSQA_READER_PASSWORD", -1)
# A bound on a model's connections keeps the server's other slots for gold runs and administrators, and with
# the memory each backend may take (backend_memory_mb), the model role's share of the server's memory.
# No parallel workers: each is a backend of its own, with memory of its own (backend_memory_mb), and a
# Parallel Hash lives in shared memory, which that bound does not count; gold SQL keeps the server's default.
MODEL = Role("gsqa_model", "model SQL: reproduce score, reproduce serve, reproduce.baseline.engine()",
             "GSQA_MODEL_PASSWORD", 8, (("max_parallel_workers_per_gather", "0"),))
ROLES = (READER, MODEL)

# Role attributes: keyword for ALTER ROLE, the pg_roles column, its declared value. NOINHERIT: a membership
# someone grants later gives no privileges without an explicit SET ROLE, which the roles' SQL cannot do.
ATTRIBUTES = (
    ("LOGIN", "rolcanlogin", True),
    ("NOSUPERUSER", "rolsuper", False),
    ("NOCREATEDB", "rolcreatedb", False),
    ("NOCREATEROLE", "rolcreaterole", False),
    ("NOREPLICATION", "rolreplication", False),
    ("NOBYPASSRLS", "rolbypassrls", False),
    ("NOINHERIT", "rolinherit", False),
)

# Stored on both roles (ALTER ROLE ... SET, as PostgreSQL spells them back in pg_db_role_setting) and, those a
# session may change, sent again by every connection we open as them (libpq's `options`), which outranks what
# the role stores: a role may always change its own stored settings.
SETTINGS = {
    "default_transaction_read_only": "on",  # a first wall only: SQL may switch it off; privileges hold
    "statement_timeout": "120s",  # every run sets its own --timeout on top
    "idle_in_transaction_session_timeout": "10min",  # an open transaction holds locks and the xmin horizon
    "work_mem": "64MB",  # per sort or hash node
    "temp_file_limit": "2GB",  # a bad join on 18 M roads cannot fill the disk; superusers only may change it
    "search_path": "public",  # the benchmark's unqualified table and PostGIS function names
    "extra_float_digits": "1",  # floats as the stored answers were read: shortest exact text
    # How a backslash in a string reads: the gate's parser reads it so (off, `'a\' ; NOTIFY x; --'` would be
    # one statement to the gate and two to the server).
    "standard_conforming_strings": "on",
    # The bytes the server reads the SQL as: in a client-only encoding (SJIS), a character's second byte can
    # be a backslash that escapes a quote the gate read as closing a string.
    "client_encoding": "UTF8",
    # A backend whose client is gone (a killed `reproduce serve` or verify) notices within this and ends its
    # query, instead of running it to its timeout.
    "client_connection_check_interval": "2s",
}
SUPERUSER_ONLY = frozenset({"temp_file_limit"})  # stored only: a login may not send it, nor change it
# Sent at login, not stored: a library the role told the server to load for itself would make every login
# fail before anything could check the role.
LOGIN_ONLY = {"local_preload_libraries": ""}


def settings_of(role: Role) -> dict[str, str]:
    """What the role stores and its logins get: SETTINGS, and the role's own."""
    return {**SETTINGS, **dict(role.own_settings)}


def session_settings(role: Role) -> dict[str, str]:
    """The role's settings a session may change, and so every login sends (and engine() sets again)."""
    return {name: value for name, value in settings_of(role).items() if name not in SUPERUSER_ONLY}


def startup_options(role: Role) -> str:
    """libpq's `options`: the role's session_settings and LOGIN_ONLY, which outrank the role's stored ones."""
    sent = {**session_settings(role), **LOGIN_ONLY}
    return " ".join(f"-c {name}={_escaped(value)}" for name, value in sent.items())


def _escaped(value: str) -> str:
    """A value inside libpq's `options`, where a space separates arguments unless a backslash escapes it."""
    return value.replace("\\", "\\\\").replace(" ", "\\ ")


@dataclass(frozen=True)
class Closed:
    """A function (regprocedure signature) whose EXECUTE is revoked from PUBLIC in the reference database."""

    function: str
    why: str


_LARGE_OBJECT = "creates a large object, which outlives the session"
_LARGE_OBJECT_CHANGE = "changes or deletes a large object"
_ADVISORY = ("takes an advisory lock: the locks `ingest` takes for a build or a load are advisory, so a model "
             "could stop a build")
_SIGNAL = "signals backends of the same role: one question could end another"
CLOSED_FUNCTIONS = (
    Closed("pg_catalog.lo_create(oid)", _LARGE_OBJECT),
    Closed("pg_catalog.lo_creat(integer)", _LARGE_OBJECT),
    Closed("pg_catalog.lo_from_bytea(oid, bytea)", _LARGE_OBJECT),
    Closed("pg_catalog.lo_import(text)", _LARGE_OBJECT),
    Closed("pg_catalog.lo_import(text, oid)", _LARGE_OBJECT),
    Closed("pg_catalog.lowrite(integer, bytea)", _LARGE_OBJECT_CHANGE),
    Closed("pg_catalog.lo_put(oid, bigint, bytea)", _LARGE_OBJECT_CHANGE),
    Closed("pg_catalog.lo_truncate(integer, integer)", _LARGE_OBJECT_CHANGE),
    Closed("pg_catalog.lo_truncate64(integer, bigint)", _LARGE_OBJECT_CHANGE),
    Closed("pg_catalog.lo_unlink(oid)", _LARGE_OBJECT_CHANGE),
    *(Closed(f"pg_catalog.pg_{attempt}advisory_{scope}lock{shared}({arguments})", _ADVISORY)
      for attempt in ("", "try_") for scope in ("", "xact_") for shared in ("", "_shared")
      for arguments in ("bigint", "integer, integer")),
    Closed("pg_catalog.pg_notify(text, text)", "sends a notification to every listening session"),
    Closed("pg_catalog.pg_logical_emit_message(boolean, text, text)", "writes to the server's WAL"),
    Closed("pg_catalog.pg_logical_emit_message(boolean, text, bytea)", "writes to the server's WAL"),
    Closed("public._add_raster_constraint(name, text)", "runs its second argument as SQL (PostGIS raster's "
           "helper of AddRasterConstraints): any statement, from inside a query"),
    Closed("pg_catalog.pg_cancel_backend(integer)", _SIGNAL),
    Closed("pg_catalog.pg_terminate_backend(integer, bigint)", _SIGNAL),
)
# USAGE revoked from PUBLIC: DO blocks, whose loops can catch a cancel (functions already defined in the
# language still run: calling one needs no USAGE).
CLOSED_LANGUAGES = {"plpgsql": "runs DO blocks, which can catch a cancel and loop on"}

# The memory a backend of the server may take for itself (RLIMIT_DATA of the server's processes: what it
# allocates, not the shared buffers it maps). Past it a statement fails with "out of memory" and every other
# session goes on; work_mem, which any session may raise, is bounded by it too. make db's server sizes it so
# that the model role's connections together hold at most this share of the memory the server may use, each
# at least the floor (an index build's maintenance_work_mem of 1 GB, and room beside it):
# docker/backend-memory.sh computes the same (tests/test_sandbox_memory.py holds them equal).
# The model role's own setting keeps its plans serial, but a query a statement runs itself (query_to_xml) is
# planned after the statement's set_config: the parallel workers of the whole server (max_parallel_workers,
# make db's docker/postgresql-gsqa.conf) count against the share too.
MODEL_MEMORY_SHARE = (2, 3)
BACKEND_MEMORY_FLOOR_MB = 1536
SERVER_PARALLEL_WORKERS = 2


def backend_memory_mb(server_memory_mb: int) -> int:
    """The memory each backend may take (MB) on a server that may use `server_memory_mb`."""
    numerator, denominator = MODEL_MEMORY_SHARE
    backends = MODEL.connection_limit + SERVER_PARALLEL_WORKERS
    return max(BACKEND_MEMORY_FLOOR_MB, server_memory_mb * numerator // denominator // backends)


# Server settings the sandbox needs; only the server's administrator can change them (postgresql.conf).
SERVER = {
    "max_prepared_transactions": ("0", "PREPARE TRANSACTION would leave a transaction, with its locks, behind "
                                       "the session"),
    "lo_compat_privileges": ("off", "any role may write or delete any large object"),
}
