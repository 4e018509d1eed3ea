"""Which reader process reads what: the two readers' share of the kinds and layers (READERS, or READERS_ON_DISK
for large inputs), and each one's ReadPlan, with where it keeps its node locations; and the order both readers
read a plan's extracts in (read_extracts)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ingest.osm.pbf.sources import PbfReport, source_name, unreadable
from ingest.osm.rules import KIND_LAYERS

# Input bytes above which node locations go to one file, not RAM. Below it two readers keep an index each:
# flex_mem takes about 16 bytes per node (the native reader's index 17), so 1 GiB of PBF (about 130 M nodes) costs
# 2 x 2 GB.
IN_MEMORY_LIMIT = 1024**3


def locations_on_disk(paths: list[Path]) -> bool:
    return sum(path.stat().st_size for path in paths) > IN_MEMORY_LIMIT


def location_index(paths: list[Path], work: Path, reader: str) -> str:
    """In memory for small inputs; on disk (a sparse file array, 16 bytes per node) for large ones."""
    if not locations_on_disk(paths):
        return "flex_mem"
    return f"sparse_file_array,{work / f'node-locations-{reader}.bin'}"


def drop_index(index: str) -> None:
    """Removes the file of an on-disk index (`index` as location_index gives it): each extract starts with an
    empty one (read_extracts). libosmium's sparse_file_array takes over what its file holds, so a
    file left by the extract before (or by a killed run) would give this extract's ways other nodes'
    locations: an earlier extract's version of a moved node, a node missing from this extract."""
    if index.startswith("sparse_file_array,"):
        Path(index.split(",", 1)[1]).unlink(missing_ok=True)


# The reader processes: name -> the layers each produces per kind, about equal work on real and on synthetic
# data. Ways and relation areas both need node locations, so each of the two keeps an index of its own (one
# reader for both, the other reading only nodes, read less in all but left that one idle: town 0.75x of
# osm2pgsql against 0.84x). Every way feature goes to the first, so that the second decodes the ways once (its
# second read, for the areas' member ways), not twice (decoding ways leads the profile of a town's reading).
# Each reader produces its sources in name order (an extract's nodes, then its ways, then its areas), as the
# writers take them.
READERS = {"ways": {"ways": KIND_LAYERS["ways"]},
           "nodes+areas": {"nodes": KIND_LAYERS["nodes"], "areas": KIND_LAYERS["areas"]}}
# With node locations on disk (large inputs: a file of 16 bytes per node, about 24 GB for the US), one reader
# takes every kind that needs them: one such file instead of two, sorted and searched once, next to the page
# cache PostgreSQL needs; the other reader is lighter then.
READERS_ON_DISK = {"ways+areas": {"ways": KIND_LAYERS["ways"], "areas": KIND_LAYERS["areas"]},
                   "nodes": {"nodes": KIND_LAYERS["nodes"]}}


@dataclass(frozen=True)
class ReadPlan:
    """One reader's work: per extract (in source name order) the layers whose sources it sends per kind, and
    the layers it reads every extract for (`reads`)."""

    name: str  # in READERS or READERS_ON_DISK
    produces: dict[str, tuple[str, ...]]  # kind -> layers, its entry there
    extracts: list[tuple[Path, dict[str, set[str]]]]
    reads: dict[str, set[str]]  # kind -> layers every extract is read for (see reader_plans)
    index: str  # of the node locations; "" for a reader that needs none
    bbox: tuple[float, float, float, float] | None
    several: bool  # more than one extract in the run: keep ids to skip duplicates


def extract_order(paths: list[Path]) -> list[Path]:
    """The extracts in the order of their sources' names (the same for every kind, see check_inputs)."""
    return sorted(paths, key=lambda path: source_name(path, "nodes"))


def reader_plans(paths: list[Path], wanted: dict[str, set[str]], work: Path,
                 bbox: tuple[float, float, float, float] | None) -> list[ReadPlan]:
    """`wanted`: layer -> the source names to produce. A reader with nothing to produce is not started.

    An object an earlier extract gave is skipped in a later one, so an extract before one to load is read
    even when it has nothing to send (a rerun whose earlier extracts are loaded): for the ids it claims.
    With several extracts, every extract is read for every layer of each kind read at all (`reads`) and sends
    only the sources wanted from it: it claims what a run of all layers claims (the first extract's version
    of a shared object decides, whatever its layer), so a rerun, or a load of some layers then the rest,
    gives one whole run's tables even where extracts of different dates disagree on a shared object."""
    plans, several = [], len(paths) > 1
    for reader, produced in (READERS_ON_DISK if locations_on_disk(paths) else READERS).items():
        sent = [(path, {kind: {layer for layer in kind_layers if source_name(path, kind) in wanted.get(layer, ())}
                        for kind, kind_layers in produced.items()}) for path in extract_order(paths)]
        last = max((number for number, (_, layers) in enumerate(sent) if any(layers.values())), default=None)
        if last is None:
            continue
        extracts = sent[:last + 1]
        reads = {kind: set().union(*(layers[kind] for _, layers in extracts)) for kind in produced}
        if several:  # a kind read at all is read for all its layers: its claims are a whole run's
            reads = {kind: set(produced[kind]) if layers else set() for kind, layers in reads.items()}
        index = location_index(paths, work, reader) if {"ways", "areas"} & set(produced) else ""
        plans.append(ReadPlan(reader, produced, extracts, reads, index, bbox, several))
    return plans


def file_reads(layers: dict[str, set[str]]) -> int:
    """Times a reader reads an extract (`layers`: kind -> the layers it reads it for): once, twice when it
    assembles relation areas (the second read feeds the area assembler the relations' member ways)."""
    return 2 if layers.get("areas") else 1


def read_extracts(plan: ReadPlan, read_one: Callable[[Path, dict[str, set[str]]], PbfReport],
                  fail: Callable[[dict[str, set[str]], str], None]) -> tuple[PbfReport, list[str]]:
    """Both readers' walk through a plan: `read_one(path, layers)` reads an extract (`layers`: kind -> the
    layers whose sources it sends) and gives its report, or raises RuntimeError when the extract cannot be read
    to its end, having failed the sources it had open. The extracts after that one are not read: `fail(layers,
    why)` fails their sources (after_unreadable). An on-disk location index starts empty for each extract
    (drop_index) and is gone at the end. The report, and every extract's failure."""
    report = PbfReport(sources=[str(path) for path, _ in plan.extracts], location_index=plan.index)
    failures: list[str] = []
    unreadable_extract = None
    for path, layers in plan.extracts:
        if unreadable_extract is not None:
            failures.append(after_unreadable(path, unreadable_extract))
            fail(layers, failures[-1])
            continue
        drop_index(plan.index)
        try:
            report.merge_sent(read_one(path, layers), layers)
        except RuntimeError as error:
            failures.append(unreadable(path, error))
            unreadable_extract = path
    drop_index(plan.index)
    return report, failures


def fail_sources(send: Callable[[str, str, tuple], None], layers: dict[str, set[str]], message: str) -> None:
    for kind, kind_layers in layers.items():
        for layer in sorted(kind_layers):
            send(kind, layer, ("failed", message))


def after_unreadable(path: Path, unreadable: Path) -> str:
    """Why an extract after one that could not be read is not read: which objects the two share (and so which
    a load of this one skips) is known only once the earlier one is read whole."""
    return (f"{path}: not read: {unreadable.name}, before it in source order, could not be read to its end, and "
            f"the objects the two share are known only once it can; mend {unreadable.name} and run again")
