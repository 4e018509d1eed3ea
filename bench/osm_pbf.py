"""PBF load benchmark: `ingest osm FILE.osm.pbf` against osm2pgsql (flex style bench/osm2pgsql_flex.lua, the same
five layers) on the same extracts, server and settings, in one run.

    .venv/bin/python bench/osm_pbf.py [--runs 3] [--city-side 830] [--town-side 600] [--dsn DSN] [--work DIR]
                                      [--json]

Inputs: a few nodes (write_city with a side of 3: 9 nodes, 2 of them POIs, 6 streets and an untagged block),
where start-up decides; the real extracts in tests/data/osm (Monaco, Midtown Manhattan); and two synthetic ones written
with pyosmium (write_city): a dense city (--city-side 830: about 1.0 M objects, a third of them features of the
five layers) and a town with buildings (--town-side 600: about 11 M objects, 2% features, as in real data).
Two comparisons, each round into fresh databases:
  load:  osm2pgsql -O flex -S bench/osm2pgsql_flex.lua --number-processes 2 FILE, tables neither clustered
         nor indexed (GSQA_BENCH_LOAD_ONLY=1)  |  ingest osm FILE --no-index
  ready: osm2pgsql as it runs by default (tables clustered by geometry, GiST indexes, ANALYZE)
         |  ingest osm FILE (GiST indexes, ANALYZE, each table as soon as its layer is in; no clustering: ids
            stay in load order)
and prints, per tool, wall time, client CPU (the process tree), server CPU (all postgres processes), peak
client memory (RSS of the largest process, PSS of all), the rows per table side by side, and the wall ratio;
then, per table, the OSM objects (type, id) that only one tool took (our --export-geojson layers, before
loader 1's pois filter, against osm2pgsql's tables of the last round). Last, the floor of any loader in Python over
psycopg, timed the same way in the same run: the interpreter starting, importing psycopg and exiting.
osm2pgsql stores tags as jsonb and geometry(4326); ingest osm stores one column per tag and geography, with
loader 1's pois filter: the tables are not the same, the input and the layer rules are.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import osmium
import psycopg
from psycopg.conninfo import make_conninfo

from bench.measure import run_measured
from ingest.osm.pbf.sources import kind_of

ROOT = Path(__file__).resolve().parent.parent


INGEST = Path(sys.executable).parent / "ingest"
STYLE = ROOT / "bench" / "osm2pgsql_flex.lua"
LAYER_TABLES = {"pois": "pois", "roads": "roads", "parks": "parks", "lakes": "lakes", "postal_codes": "regions"}
OSM_TYPES = {"nodes": "N", "ways": "W", "areas": "R"}  # osm2pgsql's osm_type of each kind of our sources


def write_city(path: Path, side: int, buildings: int = 0) -> int:
    """A synthetic city on a side x side grid of street nodes; returns how many objects it has.

    Without buildings (the dense city: about 1.5 * side^2 objects) a third of all objects are features of
    the five layers, ten times real OpenStreetMap data: the per-feature cost decides. With `buildings` per
    grid cell (closed ways tagged building=yes, four nodes each, in no layer) about 2% are features, as in
    a real extract: reading the file decides. Objects are written in id order per type, as osm2pgsql needs."""
    city = _City(side)
    with osmium.SimpleWriter(str(path), overwrite=True) as writer:
        for objects in (city.street_nodes(), city.building_nodes(buildings), city.streets(), city.blocks(),
                        city.buildings(), city.twin_parks()):
            for obj in objects:
                writer.add(obj)
                city.objects += 1
    return city.objects


class _City:
    STEP, ORIGIN = 0.0005, (-74.2, 40.5)
    CORNERS = [(0.1, 0.1), (0.3, 0.1), (0.3, 0.3), (0.1, 0.3)]

    def __init__(self, side: int) -> None:
        self.side, self.objects, self.way_id, self.building_count = side, 0, 1, 0
        self.block_ids: list[int] = []

    def node_id(self, i: int, j: int) -> int:
        return i * self.side + j + 1

    def location(self, i: float, j: float) -> tuple[float, float]:
        return self.ORIGIN[0] + j * self.STEP, self.ORIGIN[1] + i * self.STEP

    def street_nodes(self) -> Iterator[osmium.osm.mutable.Node]:
        for i in range(self.side):
            for j in range(self.side):
                tags = {}
                if (i * 7 + j * 13) % 9 == 0:  # a named POI, the three categories in turn
                    category = (i * 31 + j * 17) % 3
                    tags = {"name": f"Place {i}-{j}", ["amenity", "tourism", "leisure"][category]:
                            ["restaurant", "museum", "park"][category]}
                yield osmium.osm.mutable.Node(id=self.node_id(i, j), location=self.location(i, j), tags=tags)

    def building_nodes(self, per_cell: int) -> Iterator[osmium.osm.mutable.Node]:
        next_id = self.side * self.side + 1
        for i in range(self.side - 1):
            for j in range(self.side - 1):
                for number in range(per_cell):
                    dx, dy = 0.4 * (number % 2), 0.4 * (number // 2 % 2)
                    for x, y in self.CORNERS:
                        yield osmium.osm.mutable.Node(id=next_id, location=self.location(i + y + dy, j + x + dx))
                        next_id += 1
                    self.building_count += 1

    def _way(self, nodes: list[int], tags: dict[str, str]) -> osmium.osm.mutable.Way:
        way = osmium.osm.mutable.Way(id=self.way_id, nodes=nodes, tags=tags)
        self.way_id += 1
        return way

    def streets(self) -> Iterator[osmium.osm.mutable.Way]:
        """Along rows and columns, in segments of 10 nodes."""
        for i in range(self.side):
            for start in range(0, self.side - 1, 10):
                span = range(start, min(start + 10, self.side - 1) + 1)
                for nodes in ([self.node_id(i, j) for j in span], [self.node_id(j, i) for j in span]):
                    yield self._way(nodes, {"highway": "residential", "name": f"Street {self.way_id}"})

    def blocks(self) -> Iterator[osmium.osm.mutable.Way]:
        """Every other block: a park or a pond; one in five untagged (relation members)."""
        for i in range(0, self.side - 1, 2):
            for j in range(0, self.side - 1, 2):
                ring = [self.node_id(i, j), self.node_id(i, j + 1), self.node_id(i + 1, j + 1), self.node_id(i + 1, j),
                        self.node_id(i, j)]
                tags = {"leisure": "park", "name": f"Park {self.way_id}"} if (i + j) % 4 else {"natural": "water"}
                self.block_ids.append(self.way_id)
                yield self._way(ring, tags if (i * j) % 5 else {})

    def buildings(self) -> Iterator[osmium.osm.mutable.Way]:
        first = self.side * self.side + 1
        for building in range(self.building_count):
            yield self._way([first + 4 * building + corner for corner in (0, 1, 2, 3, 0)], {"building": "yes"})

    def twin_parks(self) -> Iterator[osmium.osm.mutable.Relation]:
        untagged = [block for n, block in enumerate(self.block_ids) if n % 5 == 0][:2 * (len(self.block_ids) // 10)]
        for relation_id in range(1, len(untagged) // 2 + 1):
            members = [("w", untagged[2 * relation_id - 2], "outer"), ("w", untagged[2 * relation_id - 1], "outer")]
            yield osmium.osm.mutable.Relation(id=relation_id, members=members, tags={
                "type": "multipolygon", "leisure": "park", "name": f"Twin Park {relation_id}"})


def fresh_database(server_dsn: str, name: str, initialize: bool) -> str:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = make_conninfo(server_dsn, dbname=name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION postgis")
    if initialize:
        subprocess.run([str(INGEST), "init", "--dsn", dsn], check=True, capture_output=True)
    return dsn


def timed(command: list[str], env: dict[str, str] | None = None) -> dict:
    run = run_measured(f"{shlex.join(command)} >/dev/null 2>&1", name=Path(command[0]).name, env=env, check=False)
    usage = run.total
    return {"wall_s": usage.wall_s, "client_cpu_s": usage.client_cpu_s, "server_cpu_s": usage.server_cpu_s,
            "peak_rss_mb": usage.peak_client_rss_mb, "peak_pss_mb": usage.peak_client_pss_mb,
            "returncode": run.returncode}


def counts(dsn: str, prefix: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        return {table: conn.execute(f"SELECT count(*) FROM {prefix}{table}").fetchone()[0]
                for table in LAYER_TABLES.values()}


def one_round(server_dsn: str, source: Path, mode: str) -> dict:
    theirs = fresh_database(server_dsn, "gsqa_bench_osm2pgsql", initialize=False)
    anchor = timed(["osm2pgsql", "-d", psycopg.conninfo.conninfo_to_dict(theirs)["dbname"], "-O", "flex", "-S",
                    str(STYLE), "--number-processes", "2", str(source)],
                   env={**os.environ, **_libpq_env(server_dsn), **({"GSQA_BENCH_LOAD_ONLY": "1"}
                                                                  if mode == "load" else {})})
    anchor["rows"] = counts(theirs, "bench_")
    ours_dsn = fresh_database(server_dsn, "gsqa_bench_ingest_pbf", initialize=True)
    ours = timed([str(INGEST), "osm", str(source), "--dsn", ours_dsn, *(["--no-index"] if mode == "load" else [])])
    ours["rows"] = counts(ours_dsn, "public.")
    return {"osm2pgsql": anchor, "ingest osm": ours}


def ids_only_one_took(server_dsn: str, source: Path, work: Path) -> dict[str, dict[str, int]]:
    """Per table, how many OSM objects only ingest osm (its --export-geojson layers) or only osm2pgsql (the
    last round's tables) took."""
    folder = work / f"ids-{source.name}"
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run([str(INGEST), "osm", str(source), "--export-geojson", str(folder)], capture_output=True)
    compared = {}
    with psycopg.connect(make_conninfo(server_dsn, dbname="gsqa_bench_osm2pgsql")) as conn:
        for layer, table in LAYER_TABLES.items():
            files = sorted((folder / layer).glob("*.geojson"))
            ours = {(OSM_TYPES[kind_of(path.name)], feature["properties"]["id"])
                    for path in files for feature in json.loads(path.read_text())["features"]}
            theirs = set(conn.execute(f"SELECT osm_type, osm_id FROM bench_{table}"))
            compared[table] = {"only ingest osm": len(ours - theirs), "only osm2pgsql": len(theirs - ours)}
    shutil.rmtree(folder)
    return compared


def _libpq_env(dsn: str) -> dict[str, str]:
    keys = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "password": "PGPASSWORD"}
    return {keys[key]: value for key, value in psycopg.conninfo.conninfo_to_dict(dsn).items() if key in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--city-side", type=int, default=830)
    parser.add_argument("--town-side", type=int, default=600)
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL", ""))
    parser.add_argument("--work", type=Path, default=Path("/tmp/gsqa-bench-osm-pbf"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    # ingest starts as installed, from its modules' bytecode: where PYTHONDONTWRITEBYTECODE is set, an editable
    # checkout would compile them again at every start, which no installed ingest does.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "ingest"), str(ROOT / "gsqa_core")],
                   check=True, capture_output=True)
    inputs = [_synthetic(args.work, "few", 3, 0), ROOT / "tests/data/osm/monaco.osm.pbf",
              ROOT / "tests/data/osm/manhattan-midtown.osm.pbf",
              _synthetic(args.work, "city", args.city_side, 0), _synthetic(args.work, "town", args.town_side, 6)]
    results: dict = {}
    for source in inputs:
        for mode in ("load", "ready"):
            rounds = [one_round(args.dsn, source, mode) for _ in range(args.runs)]
            results.setdefault(source.name, {"bytes": source.stat().st_size})[mode] = rounds
            if not args.json:
                print_input(f"{source.name}, {mode}", source.stat().st_size, rounds)
        results[source.name]["ids_only_one_took"] = ids_only_one_took(args.dsn, source, args.work)
        if not args.json:
            print(f"  OSM objects only one tool took, per table: {results[source.name]['ids_only_one_took']}")
    floor = [timed([sys.executable, "-c", "import psycopg"]) for _ in range(args.runs)]
    results["python_psycopg_floor"] = floor
    if not args.json:
        walls = [run["wall_s"] for run in floor]
        print(f"\nfloor of a Python loader over psycopg ({sys.executable} -c 'import psycopg'): wall "
              f"{' / '.join(f'{w:.3f}' for w in walls)} median {statistics.median(walls):.3f}")
    if args.json:
        print(json.dumps(results, indent=1))


def _synthetic(work: Path, name: str, side: int, buildings: int) -> Path:
    path = work / f"{name}-{side}.osm.pbf"
    if not path.exists():
        print(f"writing {path} ({write_city(path, side, buildings):,} objects)", file=sys.stderr)
    return path


def print_input(name: str, size: int, rounds: list[dict]) -> None:
    print(f"\n{name} ({size / 1e6:.1f} MB), {len(rounds)} rounds; wall s (each round), median")
    for tool in ("osm2pgsql", "ingest osm"):
        walls = [r[tool]["wall_s"] for r in rounds]
        last = rounds[-1][tool]
        print(f"  {tool:10} wall {' / '.join(f'{w:.2f}' for w in walls)} median {statistics.median(walls):.2f}; "
              f"client CPU {last['client_cpu_s']:.1f} s, server CPU {last['server_cpu_s']:.1f} s; "
              f"max RSS {last['peak_rss_mb']:.0f} MB, "
              f"PSS {last['peak_pss_mb']:.0f} MB; exit {last['returncode']}; rows {last['rows']}")
    ratio = statistics.median(r["osm2pgsql"]["wall_s"] for r in rounds) / statistics.median(
        r["ingest osm"]["wall_s"] for r in rounds)
    print(f"  osm2pgsql wall / ingest osm wall: {ratio:.2f}x")


if __name__ == "__main__":
    main()
