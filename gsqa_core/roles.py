"""The sandbox roles on a server (gsqa_core/sandbox.py declares them): their login DSNs, and an audit of a
server and database against the declaration.

A role's password is its variable ($GSQA_READER_PASSWORD, $GSQA_MODEL_PASSWORD), else the one `ingest init`
kept in gsqa.role_login (read through the admin connection). Where the local socket refuses the role (a stock
Debian or Ubuntu server authenticates socket logins by peer, and there is no such OS user), it logs in over
TCP on 127.0.0.1, the same port, with that password (scram-sha-256 there). Every login DSN carries the
declared settings as start-up options, so a setting the role stored for itself does not reach our sessions.

The audit reads only catalogs every role may read, so it runs on the role's own connection as well as on an
administrator's. It names each difference in a short phrase; `ingest init` repairs those of this database and
of the roles themselves, and says which it cannot (objects the role owns in another database, server settings).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from gsqa_core import sandbox, schema
from gsqa_core.db import advice, identifier, resolve_dsn, with_user
from gsqa_core.errors import GsqaError
from gsqa_core.sandbox import Role

LOGIN_TIMEOUT = 10  # seconds for each login tried
AUDIT_APPLICATION = "gsqa-audit"  # what pg_stat_activity shows for an audit's session


def login_dsn(dsn: str | None, role: Role, explicit: str | None = None) -> str:
    """`explicit` (a DSN of the role itself), else the main DSN logged in as the role with its password, over
    TCP on 127.0.0.1 when the socket refuses it and TCP takes it; with the declared start-up settings."""
    if explicit:
        return _with_settings(explicit, role)
    password = os.environ.get(role.password_env) or kept_password(dsn, role)
    login = _with_settings(with_user(dsn, role.name, password), role)
    if not password or not _on_socket(login) or _logs_in(login):
        return login
    over_tcp = make_conninfo(login, host="127.0.0.1")
    # Where the server answers over TCP, its answer is the cause to report (too many connections, a password
    # the role changed), not the socket's refusal of a user the OS does not have.
    error = _login_error(over_tcp)
    return over_tcp if error is None or _server_answered(error) else login


def _with_settings(dsn: str, role: Role) -> str:
    """The DSN with the declared settings last in its `options`, where they win over the DSN's own (a login
    DSN made here already ends with them)."""
    options = conninfo_to_dict(dsn).get("options") or ""
    if options.endswith(sandbox.startup_options(role)):
        return dsn
    return make_conninfo(dsn, options=f"{options} {sandbox.startup_options(role)}".strip())


def kept_password(dsn: str | None, role: Role) -> str | None:
    """The password `ingest init` kept for the role (None where the admin connection cannot read it)."""
    try:
        with psycopg.connect(resolve_dsn(dsn), autocommit=True, connect_timeout=LOGIN_TIMEOUT) as conn:
            query = sql.SQL("SELECT password FROM {} WHERE role = %s").format(identifier(schema.role_login.fullname))
            return (conn.execute(query, [role.name]).fetchone() or [None])[0]
    except psycopg.Error:
        return None


def _on_socket(dsn: str) -> bool:
    host = conninfo_to_dict(dsn).get("host") or os.environ.get("PGHOST", "")
    return not host or host.startswith("/")


def _logs_in(dsn: str) -> bool:
    return _login_error(dsn) is None


def _server_answered(error: psycopg.OperationalError) -> bool:
    """Whether a failed login reached the server, which refused it (libpq's message carries the server's
    FATAL; psycopg gives such an error no SQLSTATE)."""
    return "FATAL:" in str(error)


def _login_error(dsn: str) -> psycopg.OperationalError | None:
    try:
        psycopg.connect(dsn, connect_timeout=LOGIN_TIMEOUT).close()
    except psycopg.OperationalError as error:
        return error
    return None


@dataclass(frozen=True)
class Audit:
    """A role as one of its logins finds it: what the session gets, how the role and the server differ from the
    declaration (empty: as declared), or why it cannot log in; and what it owns in other databases of the
    server, which is named but does not stop a run (our doors never connect there)."""

    role: Role
    settings: dict[str, str]
    differences: list[str]
    login_problem: str | None = None
    server: list[str] = field(default_factory=list)  # server settings the sandbox needs, where they differ
    elsewhere: list[str] = field(default_factory=list)  # what the role owns in other databases, and the fix

    @property
    def problem(self) -> str | None:
        """The role's problem in one line (the server's are in `server`)."""
        if self.login_problem:
            return self.login_problem
        if self.differences:
            return (f"{self.role.name} is not as declared: {'; '.join(self.differences)} "
                    f"(`ingest init` restores what it can and names the rest)")
        return None

    @property
    def problems(self) -> list[str]:
        return ([self.problem] if self.problem else []) + self.server


def audit(login: str, role: Role) -> Audit:
    """Log in as the role and audit the server from that session."""
    try:
        with psycopg.connect(login, autocommit=True, connect_timeout=LOGIN_TIMEOUT,
                             application_name=AUDIT_APPLICATION) as conn:
            names = list(sandbox.settings_of(role))
            values = conn.execute(f"SELECT current_user, {', '.join(['current_setting(%s)'] * len(names))}",
                                  names).fetchone()
            settings = {"user": values[0], **dict(zip(names, values[1:], strict=True))}
            if settings["user"] != role.name:
                return Audit(role, settings, [], f"the DSN for {role.name} logs in as {settings['user']}")
            return Audit(role, settings, differences(conn, role), server=server_differences(conn),
                         elsewhere=owned_elsewhere(conn, role))
    except psycopg.OperationalError as error:
        cause = " ".join(str(error).split()).rstrip(".")
        return Audit(role, {}, [], f"{role.name} cannot log in: {cause}. {_login_advice(cause, role)}")


def _login_advice(cause: str, role: Role) -> str:
    lowered = cause.lower()
    if "password authentication failed" in lowered:
        return (f"{role.name}'s password is not the one kept for it (a login may change its own): `ingest init` "
                "restores it.")
    if "authentication failed" in lowered or "no password supplied" in lowered:
        return (f"`ingest init` gives {role.name} a password (${role.password_env}, or one it generates and keeps "
                "in the database), with which it logs in over TCP where the socket refuses it.")
    if f'role "{role.name}" does not exist' in lowered:
        return "Run `ingest init`, which creates it."
    if "too many connections for role" in lowered:
        return f"{role.name} may hold {role.connection_limit} connections at once: close some, or wait."
    if "permission denied for database" in lowered:
        return f"`ingest init` on this database grants {role.name} CONNECT again."
    return advice(cause)


def refuse_tampered(conn: psycopg.Connection) -> None:
    """Raise GsqaError, naming it, when the sandbox role this connection is logged in as stores settings other
    than the declared ones: a role may store them for itself at any time, so every connection we open checks
    (one query) that nothing it did not send at login can reach its SQL. A login that is not a sandbox role
    (a DSN of the caller's own) is the caller's to vouch for."""
    user, oid = conn.execute("SELECT current_user, oid FROM pg_roles WHERE rolname = current_user").fetchone()
    role = next((role for role in sandbox.ROLES if role.name == user), None)
    if role is None:
        return
    if found := _stored_settings(conn, oid, role):
        raise GsqaError(f"{conn.info.user} is not as declared: {'; '.join(found)} (`ingest init` restores it)")


def differences(conn: psycopg.Connection, role: Role) -> list[str]:
    """How the role, and its privileges in this database, differ from the declaration."""
    return role_differences(conn, role) + privilege_differences(conn, role)


def role_attributes(conn: psycopg.Connection, role: Role) -> tuple[int, int, list[bool]] | None:
    """(oid, connection limit, the ATTRIBUTES' values in order), or None for a role that does not exist."""
    row = conn.execute("SELECT oid, rolconnlimit, " + ", ".join(column for _, column, _ in sandbox.ATTRIBUTES)
                       + " FROM pg_roles WHERE rolname = %s", [role.name]).fetchone()
    return None if row is None else (row[0], row[1], list(row[2:]))


def role_differences(conn: psycopg.Connection, role: Role) -> list[str]:
    """How the cluster-wide role differs: attributes, stored settings, memberships, what it owns here."""
    found = role_attributes(conn, role)
    if found is None:
        return ["the role does not exist"]
    oid, limit, attributes = found
    differ = [f"it has {keyword.removeprefix('NO') if value else 'NO' + keyword}"
              for (keyword, _, wanted), value in zip(sandbox.ATTRIBUTES, attributes, strict=True) if value != wanted]
    if limit != role.connection_limit:
        differ.append(f"its connection limit is {limit} (declared {role.connection_limit})")
    owned = [f"it owns {_counted(kind, count)} in database {database}"
             for database, kind, count in _owned(conn, oid, here=True)]
    return differ + _stored_settings(conn, oid, role) + _memberships(conn, oid) + owned


def stored_settings(conn: psycopg.Connection, oid: int) -> list[tuple[str, list[str]]]:
    """(database name, "" for role-wide; its `name=value` entries) of what the role stores."""
    return conn.execute("SELECT coalesce(d.datname, ''), s.setconfig FROM pg_db_role_setting s "
                        "LEFT JOIN pg_database d ON d.oid = s.setdatabase WHERE s.setrole = %s", [oid]).fetchall()


def _stored_settings(conn: psycopg.Connection, oid: int, role: Role) -> list[str]:
    rows = stored_settings(conn, oid)
    declared = sandbox.settings_of(role)
    found = [f"it stores {', '.join(config)} for database {database}" for database, config in rows if database]
    role_wide = next((dict(entry.split("=", 1) for entry in config) for database, config in rows if not database), {})
    for name in sorted(set(role_wide) | set(declared)):
        have, want = role_wide.get(name), declared.get(name)
        if have == want:
            continue
        if want is None:
            found.append(f"it stores {name}={have}")
        elif have is None:
            found.append(f"it lacks {name}={want}")
        else:
            found.append(f"it stores {name}={have} (declared {want})")
    return found


def _memberships(conn: psycopg.Connection, oid: int) -> list[str]:
    rows = conn.execute(
        "SELECT m.member = %(oid)s, r.rolname FROM pg_auth_members m JOIN pg_roles r "
        "ON r.oid = CASE WHEN m.member = %(oid)s THEN m.roleid ELSE m.member END "
        "WHERE %(oid)s IN (m.member, m.roleid) ORDER BY 2", {"oid": oid}).fetchall()
    return [f"it is a member of {name}" if member else f"{name} is a member of it" for member, name in rows]


def _owned(conn: psycopg.Connection, oid: int, here: bool) -> list[tuple[str, str, int]]:
    """(database, catalog, count) of what the role owns (pg_shdepend is shared, so any database can tell):
    large objects, default privileges, anything a looser server let it create; in this database (`here`) or
    in the others."""
    return conn.execute(
        "SELECT coalesce(d.datname, ''), s.classid::regclass::text, count(*) FROM pg_shdepend s "
        "LEFT JOIN pg_database d ON d.oid = s.dbid WHERE s.refobjid = %s AND s.deptype = 'o' "
        "AND (s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())) = %s "
        "GROUP BY 1, 2 ORDER BY 1, 2", [oid, here]).fetchall()


def owned_elsewhere(conn: psycopg.Connection, role: Role) -> list[str]:
    """What the role owns in other databases of the server (where PUBLIC may connect, a raw login may create
    large objects), each with the command that removes it; `ingest init` does not touch another database."""
    found = role_attributes(conn, role)
    if found is None:
        return []
    return [f"{role.name} owns {_counted(kind, count)} in database {database or 'of the cluster'}: "
            f"`psql -d {database} -c 'DROP OWNED BY {role.name}'`, then `ingest init` on each reference database"
            for database, kind, count in _owned(conn, found[0], here=False)]


_OWNED_KINDS = {"pg_largeobject": ("large object", "large objects"),
                "pg_default_acl": ("entry of default privileges", "entries of default privileges"),
                "pg_class": ("relation", "relations"), "pg_namespace": ("schema", "schemas"),
                "pg_proc": ("function", "functions"), "pg_type": ("type", "types")}


def _counted(kind: str, count: int) -> str:
    singular, plural = _OWNED_KINDS.get(kind, (kind, kind))
    return f"{count} {plural if count > 1 else singular}"


def privilege_differences(conn: psycopg.Connection, role: Role) -> list[str]:
    """What the role may do in this database beyond reading the reference tables, or may not read of them."""
    functions = [closed.function for closed in sandbox.CLOSED_FUNCTIONS]
    why = {closed.function: closed.why for closed in sandbox.CLOSED_FUNCTIONS}
    found = [f"it may execute {function.removeprefix('pg_catalog.')}, which {why[function]}"
             for (function,) in conn.execute(
                 "SELECT f FROM unnest(%s::text[]) f WHERE to_regprocedure(f) IS NOT NULL "
                 "AND has_function_privilege(%s, f, 'EXECUTE')", [functions, role.name])]
    found += [f"it may use language {language}, which {why}" for language, why in sandbox.CLOSED_LANGUAGES.items()
              if conn.execute("SELECT has_language_privilege(%s, %s, 'USAGE')", [role.name, language]).fetchone()[0]]
    found += [f"it may create objects in schema {name}" for (name,) in conn.execute(
        "SELECT nspname FROM pg_namespace WHERE has_schema_privilege(%s, oid, 'CREATE') ORDER BY 1", [role.name])]
    found += [f"it may {what} {name}" for what, name in writable(conn, role)]
    database, create, temp, bookkeeping = conn.execute(
        "SELECT current_database(), has_database_privilege(%(role)s, current_database(), 'CREATE'), "
        "has_database_privilege(%(role)s, current_database(), 'TEMP'), "
        "coalesce(has_schema_privilege(%(role)s, to_regnamespace(%(schema)s), 'USAGE'), false)",
        {"role": role.name, "schema": schema.BOOKKEEPING_SCHEMA}).fetchone()
    found += [f"it may create schemas and extensions in database {database}"] if create else []
    found += [f"it may create temporary tables in database {database}"] if temp else []
    found += [f"it may read schema {schema.BOOKKEEPING_SCHEMA}, where the passwords are kept"] if bookkeeping else []
    found += [f"it holds SELECT on {name} (in {schema.BOOKKEEPING_SCHEMA}, where the passwords are kept)"
              for name in bookkeeping_reads(conn, role)]
    unreadable = [table.fullname for table in schema.REFERENCE_TABLES
                  if conn.execute("SELECT to_regclass(%s) IS NOT NULL AND NOT has_table_privilege(%s, %s, 'SELECT')",
                                  [table.fullname, role.name, table.fullname]).fetchone()[0]]
    return found + ([f"it may not read {', '.join(unreadable)}"] if unreadable else [])


TABLE_WRITES = "INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER"


def bookkeeping_reads(conn: psycopg.Connection, role: Role) -> list[str]:
    """The qualified name of each table or sequence of the bookkeeping schema the role may read, through a
    grant to it or to PUBLIC: useless without USAGE on the schema, until someone grants that too. (Writes
    there are `writable`'s, as anywhere.)"""
    return [name for (name,) in conn.execute(
        "SELECT format('%%I.%%I', n.nspname, c.relname) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(schema)s "
        "AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') AND CASE WHEN c.relkind = 'S' "
        "THEN has_sequence_privilege(%(role)s, c.oid, 'SELECT') ELSE has_table_privilege(%(role)s, c.oid, 'SELECT') "
        "END ORDER BY 1", {"schema": schema.BOOKKEEPING_SCHEMA, "role": role.name})]


def writable(conn: psycopg.Connection, role: Role) -> list[tuple[str, str]]:
    """("write to table" or "advance sequence", its qualified name) for each relation of this database the
    role may change, directly or through PUBLIC."""
    return conn.execute(
        "SELECT CASE c.relkind WHEN 'S' THEN 'advance sequence' ELSE 'write to table' END, "
        "format('%%I.%%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%%' "
        "AND CASE WHEN c.relkind = 'S' THEN has_sequence_privilege(%(role)s, c.oid, 'USAGE, UPDATE') "
        "WHEN c.relkind IN ('r', 'p', 'v', 'f') THEN has_table_privilege(%(role)s, c.oid, %(writes)s) "
        "ELSE false END ORDER BY 2", {"role": role.name, "writes": TABLE_WRITES}).fetchall()


def server_differences(conn: psycopg.Connection) -> list[str]:
    """The server settings the sandbox needs, where they differ, with where each was set (postgresql.conf, or
    ALTER DATABASE / ALTER ROLE), where only an administrator can change it."""
    found = []
    for name, (wanted, why) in sandbox.SERVER.items():
        value, source = conn.execute("SELECT setting, source FROM pg_settings WHERE name = %s", [name]).fetchone()
        if value != wanted:
            found.append(f"the server has {name} = {value} (set by: {source}), where {why}: set it to {wanted} there")
    return found + [f"function {function} in the reference schema is not PostGIS's: it can shadow a function the "
                    "benchmark's SQL calls, or make the call ambiguous; drop it or move it to another schema"
                    for function in foreign_functions(conn)]


def foreign_functions(conn: psycopg.Connection) -> list[str]:
    """The functions of the schemas the sandbox's SQL reads by name (search_path) that no extension installed."""
    return [function for (function,) in conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = ANY(%s) AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass "
        "AND d.objid = p.oid AND d.deptype = 'e') ORDER BY 1", [sandbox.SETTINGS["search_path"].split(", ")])]


def memory_note(conn: psycopg.Connection) -> str:
    """How much memory each backend of the server may take for itself (its RLIMIT_DATA) against what the sandbox
    needs (sandbox.backend_memory_mb), in one line; read through the admin connection, which may read the
    backend's /proc files only as a superuser or with pg_read_server_files."""
    try:
        with conn.transaction():
            limits, meminfo, workers = conn.execute(
                "SELECT pg_read_file('/proc/self/limits'), pg_read_file('/proc/meminfo'), "
                "current_setting('max_parallel_workers')::int").fetchone()
    except psycopg.Error:
        return ("the memory each backend of the server may take is unknown (reading it needs a superuser or "
                "pg_read_server_files): docs/SANDBOX.md, \"Memory\", says what make db's server sets")
    soft = next(line.split()[3] for line in limits.splitlines() if line.startswith("Max data size"))
    total_mb = next(int(line.split()[1]) // 1024 for line in meminfo.splitlines() if line.startswith("MemTotal:"))
    models = sandbox.MODEL.connection_limit
    backends = models + workers
    if soft == "unlimited":
        return (f"each backend of the server may take all of its memory ({total_mb:,} MB): one model statement "
                f"(an array of 100 million elements) can exhaust it; start the server with a data-size limit of "
                f"{sandbox.backend_memory_mb(total_mb):,} MB per process (docs/SANDBOX.md, \"Memory\")")
    each_mb = int(soft) // 1024**2
    share = backends * each_mb / total_mb
    return (f"each backend of the server may take {each_mb:,} MB of its own memory; {sandbox.MODEL.name}'s "
            f"{models} connections and the server's {workers} parallel workers together {backends * each_mb:,} MB, "
            f"{share:.0%} of the server's {total_mb:,} MB")
