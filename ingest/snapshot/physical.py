"""The physical snapshot format: a cold copy of a PostgreSQL cluster's data directory, taken with the server
cleanly shut down, as one tar stream compressed by zstd and cut into parts (data/cluster.tar.zst.part000, ...).

Create (`ingest snapshot create DIR --format physical --data-dir PGDATA`, run as root or as the cluster's
owner, on the machine of the server): the database is checked and described while the server runs (kept in
DIR/.work/described.json), then the server is stopped (`pg_ctl stop -m fast`) if it runs, the data directory
is tarred (GNU tar, sorted, so that the same stopped cluster gives the same bytes; of pg_wal only the segment
of the shutdown checkpoint, the others being old or recycled), piped through `zstd -T0` (whose output does
not depend on the number of threads) and cut into the parts, and the server is started again with the options
it had (postmaster.opts). A rerun after kill -9 keeps the parts already written if the cluster's last
checkpoint and the compressor (zstd's version and level) are still the ones they were cut with.

Restore (`ingest snapshot restore SOURCE --data-dir PGDATA --replace`, the server stopped): every part is
checked first; the cluster's settings and logins files (postgresql.conf, pg_hba.conf, ...) are kept aside, the
data directory is deleted and the parts, concatenated, are decompressed (`zstd -d`; a manifest without
"compression" is of an uncompressed tar) and extracted in its place as its owner (the owner of PGDATA, or of
its parent folder if it does not exist: the db image's postgres in a Docker volume), with the kept files put
back. A rerun after kill -9 does the same again. The server's next start finds a cleanly shut down cluster:
no recovery, and its statistics (the planner's and the activity statistics, pg_stat/) are the publisher's.
docs/SNAPSHOTS.md has the why.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gsqa_core.errors import GsqaError

# The manifest's "compression" of the parts, and the commands that stream through it; none: a plain tar (a
# snapshot made before the parts were compressed). Level 6 by measurement (docs/SNAPSHOTS.md).
COMPRESSION = "zstd"
ZSTD_LEVEL = 6
_COMPRESS = ["zstd", f"-{ZSTD_LEVEL}", "-T0", "--quiet", "--stdout"]
_DECOMPRESS = {None: None, "zstd": ["zstd", "--decompress", "--quiet", "--stdout"]}
ARCHIVE = "cluster.tar.zst"
# The target's own: how it listens, who may log in and how; never the publisher's.
KEPT_FILES = ("postgresql.conf", "postgresql.auto.conf", "pg_hba.conf", "pg_ident.conf")
# Files of a running or stopped server that are no part of its data.
_NOT_COPIED = ("postmaster.pid", "postmaster.opts")
_CHUNK = 1 << 20
_WAL_SEGMENT = re.compile(r"[0-9A-F]{24}")


def part_name(number: int) -> str:
    return f"{ARCHIVE}.part{number:03d}"


def require_zstd() -> None:
    if shutil.which("zstd") is None:
        raise GsqaError("zstd is not installed: a physical snapshot's parts are zstd-compressed (Debian: apt-get "
                        "install zstd)")


# --- the cluster on disk -----------------------------------------------------------------------------------


def server_bin(data_dir: Path) -> Path:
    """The server's programs of the cluster's major version (Debian's layout, as in the db image)."""
    major = (data_dir / "PG_VERSION").read_text().strip()
    return Path(f"/usr/lib/postgresql/{major}/bin")


@dataclass(frozen=True)
class Control:
    """What create needs of the cluster's global/pg_control."""

    system_identifier: str
    shut_down: bool  # cleanly: no recovery at the next start
    checkpoint: int  # the last checkpoint's location: the cluster has not run since, if unchanged
    checkpoint_wal_file: str  # the WAL segment holding the shutdown checkpoint (its redo point)


# The head of PostgreSQL's ControlFileData (unchanged since 9.x), read directly so that the loader image needs
# no server package: system_identifier, pg_control_version, catalog_version_no, state, (padding), time,
# checkPoint, checkPointCopy.redo, checkPointCopy.ThisTimeLineID.
_CONTROL_HEAD = struct.Struct("=QIIi4xqQQI")
_DB_SHUTDOWNED = 1


def read_control(data_dir: Path) -> Control:
    try:
        head = (data_dir / "global" / "pg_control").read_bytes()[:_CONTROL_HEAD.size]
        identifier, _, _, state, _, checkpoint, redo, timeline = _CONTROL_HEAD.unpack(head)
    except (OSError, struct.error) as error:
        raise GsqaError(f"--data-dir {data_dir}: cannot read global/pg_control ({error})") from None
    segment = _wal_segment_size(data_dir)
    number, per_id = redo // segment, 0x1_0000_0000 // segment
    return Control(str(identifier), state == _DB_SHUTDOWNED, checkpoint,
                   f"{timeline:08X}{number // per_id:08X}{number % per_id:08X}")


def _wal_segment_size(data_dir: Path) -> int:
    """Every WAL segment file has the cluster's segment size (initdb --wal-segsize)."""
    for path in (data_dir / "pg_wal").iterdir():
        if _WAL_SEGMENT.fullmatch(path.name):
            return path.stat().st_size
    raise GsqaError(f"--data-dir {data_dir}: no WAL segment in pg_wal: not a cluster that was shut down cleanly")


def _owner(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_uid, stat.st_gid


def as_owner(argv: list[str], owner: tuple[int, int]) -> list[str]:
    """The command as the cluster's owner: the server's tools refuse root, and the files a restore writes
    must be the server's. It is killed when `ingest` dies (a parent-death signal set before the change of
    user is cleared by it, so it is set here again)."""
    if os.geteuid() != 0 or owner[0] == 0:
        return argv
    return ["setpriv", f"--reuid={owner[0]}", f"--regid={owner[1]}", "--clear-groups", "--pdeathsig", "KILL", "--",
            *argv]


# --- create ------------------------------------------------------------------------------------------------


def run_tool(argv: list[str], name: str) -> None:
    if shutil.which(argv[0]) is None:
        raise GsqaError(f"{argv[0]} is not installed: it comes with the PostgreSQL client (Debian: "
                        "apt-get install postgresql-client-15)")
    # setpriv: the tool gets SIGKILL when `ingest` dies, so a kill -9 of a restore does not leave pg_restore
    # writing into the tables that the rerun drops.
    result = subprocess.run(["setpriv", "--pdeathsig", "KILL", "--", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        raise GsqaError(f"{name} failed (exit {result.returncode}): {lines[-1] if lines else 'no message'}")


def copy_cluster(data_dir: Path, data: Path, work: Path, system_identifier: str, part_size: int) -> None:
    """The stopped cluster at data_dir as tar parts in `data`; see the module docstring."""
    if not (data_dir / "PG_VERSION").is_file():
        raise GsqaError(f"--data-dir {data_dir}: not a PostgreSQL data directory (no PG_VERSION)")
    require_zstd()
    found = read_control(data_dir).system_identifier
    if found != system_identifier:
        raise GsqaError(f"--data-dir {data_dir}: the cluster of another server (system identifier {found}; the "
                        f"database's server has {system_identifier})")
    owner = _owner(data_dir)
    bin_dir = server_bin(data_dir)
    restart = work / "postmaster.opts"
    if (data_dir / "postmaster.pid").exists():
        if not (bin_dir / "pg_ctl").exists():  # the server runs elsewhere (the Docker database): `make snapshot`
            raise GsqaError(f"--data-dir {data_dir}: a server runs on it (postmaster.pid) and there is no pg_ctl here "
                            "to stop it: stop the server, then run the same command again")
        if not restart.exists():
            shutil.copyfile(data_dir / "postmaster.opts", restart)
        run_tool(as_owner([str(bin_dir / "pg_ctl"), "stop", "-D", str(data_dir), "-m", "fast", "-w", "-t", "600"],
                          owner), f"pg_ctl stop -D {data_dir}")
    control = read_control(data_dir)
    if not control.shut_down:
        raise GsqaError(f"--data-dir {data_dir}: the cluster was not shut down cleanly (a crash, or a standby): start "
                        "its server and stop it with `pg_ctl stop -m fast`, then run again")
    _tar_into_parts(data_dir, data, work, str(control.checkpoint),
                    unneeded_wal(data_dir, control.checkpoint_wal_file), part_size)
    if restart.exists():
        options = shlex.split(restart.read_text())[1:]  # the server's arguments without the program
        run_tool(as_owner([str(bin_dir / "pg_ctl"), "start", "-D", str(data_dir), "-w", "-t", "600", "-o",
                       shlex.join(_without_data_dir(options))], owner), f"pg_ctl start -D {data_dir}")
        restart.unlink()


def _without_data_dir(options: list[str]) -> list[str]:
    kept, skip = [], False
    for option in options:
        if skip:
            skip = False
        elif option == "-D":
            skip = True
        else:
            kept.append(option)
    return kept


def unneeded_wal(data_dir: Path, redo_file: str) -> list[str]:
    """The WAL segments a cleanly shut down cluster does not need to start: all but the one holding its
    shutdown checkpoint (the others are old or recycled for reuse, up to max_wal_size)."""
    return sorted(f"./pg_wal/{path.name}" for path in (data_dir / "pg_wal").iterdir()
                  if _WAL_SEGMENT.fullmatch(path.name) and path.name != redo_file)


def _tar_into_parts(data_dir: Path, data: Path, work: Path, checkpoint: str, unneeded: list[str],
                    part_size: int) -> None:
    """GNU tar of the data directory through zstd, cut into parts; parts a killed run wrote from the same
    checkpoint with the same compressor are kept (the stream is the same), others are deleted first."""
    cut_from = work / "checkpoint"
    origin = f"{checkpoint} {_zstd_version()} {' '.join(_COMPRESS)}"
    if not cut_from.exists() or cut_from.read_text() != origin:
        for stale in data.iterdir():
            stale.unlink()
        cut_from.write_text(origin)
    excluded = work / "excluded"
    excluded.write_text("".join(f"{name}\n" for name in [*(f"./{name}" for name in _NOT_COPIED), *unneeded]))
    tar_argv = ["tar", "--create", "--file=-", "--format=gnu", "--sort=name", f"--directory={data_dir}",
                f"--exclude-from={excluded}", "."]
    with contextlib.ExitStack() as stack:
        tar = stack.enter_context(_start(tar_argv, stdin=subprocess.DEVNULL))
        zstd = stack.enter_context(_start(_COMPRESS, stdin=tar.stdout))
        tar.stdout.close()  # zstd's alone: tar gets SIGPIPE if zstd dies
        stack.callback(_kill, [tar, zstd])
        number = 0
        while _write_part(zstd.stdout, data / part_name(number), part_size):
            number += 1
        _raise_on_failure([(f"tar of {data_dir}", tar), (f"zstd of the tar of {data_dir}", zstd)])


def _zstd_version() -> str:
    return subprocess.run(["zstd", "--version"], capture_output=True, text=True, check=True).stdout.strip()


def _start(argv: list[str], stdin: Any, stdout: Any = subprocess.PIPE) -> subprocess.Popen:
    """A step of a pipeline, killed when `ingest` dies (as run_tool's)."""
    return subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", *argv], stdin=stdin, stdout=stdout,
                            stderr=subprocess.PIPE)


def _kill(processes: list[subprocess.Popen]) -> None:
    """A pipeline left by an error of ours: its steps would wait for each other."""
    for process in processes:
        if process.poll() is None:
            process.kill()


def _raise_on_failure(steps: list[tuple[str, subprocess.Popen]]) -> None:
    """One line for the pipeline's first step that failed of itself (not by SIGPIPE, which a step gets when
    the one it writes to failed), else its first that failed at all."""
    failed = []
    for name, process in steps:
        error = process.stderr.read().decode(errors="replace").strip()
        if process.wait() != 0:
            failed.append((process.returncode == -signal.SIGPIPE, name, process.returncode, error))
    if failed:
        _, name, code, error = min(failed, key=lambda failure: failure[0])
        raise GsqaError(f"{name} failed (exit {code}): {error.splitlines()[-1] if error else 'no message'}")


def _write_part(stream: Any, target: Path, size: int) -> bool:
    """The next `size` bytes of the stream into target (skipped if a killed run wrote it whole); False at
    the end of the stream."""
    keep = target.exists()
    scratch = target.with_name(target.name + ".partial")
    out = None if keep else open(scratch, "wb")  # noqa: SIM115 - closed below
    left = size
    try:
        while left and (chunk := stream.read(min(left, _CHUNK))):
            if out:
                out.write(chunk)
            left -= len(chunk)
    finally:
        if out:
            out.close()
    if left == size:  # nothing was left in the stream
        scratch.unlink(missing_ok=True)
        return False
    if out:
        os.replace(scratch, target)
    return left == 0


def describe_cluster(conn: Any) -> dict[str, Any]:
    """What a physical snapshot's manifest says about the cluster: its identity (a restored data directory
    has the same) and its databases (all of them come along)."""
    return {"system_identifier": str(conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()[0]),
            "databases": [name for (name,) in conn.execute(
                "SELECT datname FROM pg_database WHERE NOT datistemplate ORDER BY 1")]}


# --- restore -----------------------------------------------------------------------------------------------


def restore_cluster(folder: Path, part_paths: list[str], data_dir: Path, replace: bool,
                    compression: str | None) -> None:
    """The parts (checked already) extracted in place of the data directory; see the module docstring."""
    if compression not in _DECOMPRESS:
        raise GsqaError(f"snapshot {folder}: compression {compression!r} in its manifest, expected zstd or none")
    if compression:
        require_zstd()
    if (data_dir / "postmaster.pid").exists():
        raise GsqaError(f"--data-dir {data_dir}: a server runs on it (or was killed: postmaster.pid is there): stop "
                        "it first")
    scratch = data_dir.parent / f".{data_dir.name}.gsqa-restore"
    kept, cluster = scratch / "kept", scratch / "cluster"
    if (data_dir / "PG_VERSION").exists() and not kept.exists():
        if not replace:
            raise GsqaError(f"--data-dir {data_dir}: holds a cluster: give --replace to replace it with the snapshot")
        _keep_settings(data_dir, scratch)
    owner = _owner(data_dir if data_dir.exists() else data_dir.parent)
    _delete_atomically(data_dir, scratch / "old")
    shutil.rmtree(cluster, ignore_errors=True)
    cluster.mkdir(parents=True, mode=0o700)
    os.chown(cluster, *owner)
    _extract(folder, part_paths, _DECOMPRESS[compression], cluster, owner)
    for name in KEPT_FILES if kept.exists() else ():
        if (kept / name).exists():
            shutil.copy2(kept / name, cluster / name)
            os.chown(cluster / name, *owner)
    os.rename(cluster, data_dir)
    shutil.rmtree(scratch)


def _extract(folder: Path, part_paths: list[str], decompress: list[str] | None, cluster: Path,
             owner: tuple[int, int]) -> None:
    """The parts, concatenated, through `decompress` (if any) into tar extracting into `cluster` as `owner`."""
    extract = as_owner(["tar", "--extract", "--file=-", f"--directory={cluster}"], owner)
    with contextlib.ExitStack() as stack:
        zstd = stack.enter_context(_start(decompress, stdin=subprocess.PIPE)) if decompress else None
        tar = stack.enter_context(_start(extract, stdin=zstd.stdout if zstd else subprocess.PIPE,
                                         stdout=subprocess.DEVNULL))
        steps = [(f"zstd -d of snapshot {folder}", zstd)] if zstd else []
        steps.append((f"tar extracting the snapshot into {cluster}", tar))
        stack.callback(_kill, [process for _, process in steps])
        if zstd:
            zstd.stdout.close()  # tar's alone
        feed = (zstd or tar).stdin
        try:
            for path in part_paths:
                with open(folder / path, "rb") as handle:
                    shutil.copyfileobj(handle, feed, _CHUNK)
            feed.close()
        except BrokenPipeError:
            pass
        _raise_on_failure(steps)


def _delete_atomically(data_dir: Path, aside: Path) -> None:
    """The data directory renamed aside, then deleted: killed meanwhile, it is whole or gone, never half deleted,
    which no server starts on (where it is gone, the db image makes a new cluster, and a rerun replaces that)."""
    shutil.rmtree(aside, ignore_errors=True)
    if data_dir.exists():
        aside.parent.mkdir(exist_ok=True)
        os.rename(data_dir, aside)
    shutil.rmtree(aside, ignore_errors=True)


def _keep_settings(data_dir: Path, scratch: Path) -> None:
    partial = scratch / "kept.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name in KEPT_FILES:
        if (data_dir / name).exists():
            shutil.copy2(data_dir / name, partial / name)
    os.rename(partial, scratch / "kept")


# --- what a server must be to run the data directory --------------------------------------------------------

# A data directory runs only on the build that wrote it (catalog version, alignment, the extensions' libraries
# its catalogs name): version() (which names the build and the compiler) and the libraries must be equal. The
# databases' collations come along with the cluster.
BUILD_KEYS = ("server_build", "postgis", "geos", "proj", "gdal")


def build_differences(built: dict[str, Any], here: dict[str, Any]) -> list[str]:
    return [f"{key} {built.get(key)!r} in the snapshot, {here.get(key)!r} on this server"
            for key in BUILD_KEYS if str(built.get(key)) != str(here.get(key))]

