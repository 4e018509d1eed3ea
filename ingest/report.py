"""What `ingest`'s commands print on stdout: each stage's report as text (the commands print the reports'
`as_json()` under --json). Every function returns the text, one line per row, and prints nothing."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingest.build import BuildReport
    from ingest.check import Check
    from ingest.dem.load import DemLoadReport
    from ingest.export.run import ExportReport
    from ingest.export.verify import CheckReport
    from ingest.fetch import FetchReport
    from ingest.initdb import InitReport
    from ingest.osm.pbf.sources import PbfReport
    from ingest.osm.reports import OsmLoadReport
    from ingest.snapshot.create import CreateReport
    from ingest.snapshot.restore import RestoreReport

LISTED_SKIPS = 20  # skipped features listed by `ingest osm`; --json has them all


def size(count: float) -> str:
    """Bytes as people read them: 950 B, 12.3 MB, 1.2 GB (powers of 1000)."""
    if count < 1000:
        return f"{count:.0f} B"
    for unit in ("kB", "MB", "GB"):
        count /= 1000
        if count < 1000 or unit == "GB":
            return f"{count:.1f} {unit}"
    raise AssertionError("unreachable")


def _lines(lines: Iterable[str]) -> str:
    return "\n".join(lines)


def init_json(report: InitReport) -> dict[str, Any]:
    return {"database": report.target, "created": report.created, "repaired": report.repaired, "left": report.left}


def init_text(report: InitReport) -> str:
    lines = []
    for heading, labels in ((f"created in {report.target}:", report.created),
                            (f"repaired in {report.target} (it differed from its declaration):", report.repaired),
                            ("not repaired (init cannot):", report.left)):
        if labels:
            lines += [heading, *(f"  {label}" for label in labels)]
    if not report.changed and not report.left:
        lines.append(f"nothing to do: the reference schema is already in place in {report.target}")
    return _lines(lines)


def fetch_text(report: FetchReport, dry_run: bool) -> str:
    from ingest.fetch import SOURCE_REPO

    source = f"{SOURCE_REPO}@{report.revision[:12]}"
    lines = []
    if dry_run:
        present = set(report.present)
        lines += [f"{'present' if remote.path in present else 'fetch':8} {size(remote.size):>9}  {remote.path}"
                  for remote in report.files]
        lines.append(f"{len(report.files)} files ({size(report.total_bytes)}) from {source}: "
                     f"{len(report.downloaded)} to download ({size(report.bytes_downloaded)}), "
                     f"{len(report.present)} already present")
    else:
        lines.append(f"{source}: downloaded {len(report.downloaded)} files ({size(report.bytes_downloaded)}) in "
                     f"{report.seconds:.1f} s; {len(report.present)} already present; {len(report.failed)} failed; "
                     f"{len(report.missing)} missing")
        lines += [f"  failed: {path}: {reason}" for path, reason in sorted(report.failed.items())]
    lines += [f"  missing: {path} is named by the tile list but is not in {source}" for path in report.missing]
    return _lines(lines)


def dem_text(report: DemLoadReport) -> str:
    return _lines([f"{report.table}: loaded {len(report.loaded)} files ({report.tiles_written:,} tiles) in "
                   f"{report.seconds:.1f} s; {len(report.unchanged)} already loaded; {len(report.failed)} failed",
                   *(f"  failed: {name}: {error}" for name, error in report.failed.items())])


def osm_json(read: PbfReport | None, report: OsmLoadReport | None) -> dict[str, Any]:
    """`ingest osm --json`: the PBF readers' report (if extracts were read) beside the load's (if any)."""
    return {**({"pbf": read.as_json()} if read else {}), **(report.as_json() if report else {})}


def osm_text(read: PbfReport | None, report: OsmLoadReport | None, exported_to: Path | None) -> str:
    return _lines(([pbf_text(read, exported_to)] if read else []) + ([load_text(report)] if report else []))


def pbf_text(report: PbfReport, exported_to: Path | None) -> str:
    layers = ", ".join(f"{layer} {count:,}" for layer, count in sorted(report.features.items())) or "no features"
    target = f" -> {exported_to}" if exported_to else ""
    lines = [f"{len(report.sources)} extract(s){target}: {layers}; {report.duplicates:,} objects already taken "
             f"from an earlier extract; node locations: {report.location_index.split(',')[0] or 'not needed'}"]
    if report.broken:
        lines.append(f"could not be built ({', '.join(f'{kind} {n:,}' for kind, n in sorted(report.broken.items()))}):")
        lines += [f"  {line}" for line in report.broken_listed]
    lines += [f"  failed: {error}" for error in report.failed]
    return _lines(lines)


def load_text(report: OsmLoadReport, listed: int = LISTED_SKIPS) -> str:
    from ingest.osm.reports import describe_skip

    lines = []
    for layer in report.layers.values():
        lines.append(f"{layer.table}: loaded {len(layer.loaded)} of {layer.files} files ({layer.rows_written:,} rows "
                     f"from {layer.features_read:,} features); {len(layer.unchanged)} already loaded; "
                     f"{len(layer.failed)} failed; skipped features: {layer.skipped_count:,}"
                     + (f"; indexed and analyzed in {layer.ready_seconds:.1f} s" if layer.ready_seconds is not None
                        else ""))
        # The message names the file (an extract's sources fail with the same one)
        lines += [f"  failed: {error}" for error in dict.fromkeys(layer.failed.values())]
    skipped = [entry for layer in report.layers.values() for entry in layer.skipped]
    total = sum(layer.skipped_count for layer in report.layers.values())
    if total:
        lines.append(f"skipped features ({total:,}; loader 1 could not have stored them):")
        lines += [f"  {describe_skip(entry)}" for entry in skipped[:listed]]
        if total > listed:
            lines.append(f"  ... and {total - listed:,} more (see --json)")
    lines.append(f"done in {report.seconds:.1f} s")
    return _lines(lines)


def build_text(report: BuildReport) -> str:
    lines = [f"{stage.stage:9} {stage.state:8} {stage.seconds:8.1f} s  {stage.summary}" for stage in report.stages]
    if report.exit_code:
        lines.append("the build stopped; fix what the failed stage names, then run the same command again")
    return _lines(lines)


def status_text(state: dict[str, Any]) -> str:
    lines = []
    origin = state["snapshot"]
    if origin:
        lines.append(f"snapshot  {origin['state']:11} {origin.get('restored', '')[:19]}  from {origin['source']} "
                     f"(manifest sha256 {origin['manifest_sha256']})")
    for stage in state["stages"]:
        line = f"{stage['stage']:9} {stage['state']:11}"
        if stage.get("started"):
            line += f" {stage['started'][:19]}  {stage['seconds'] or 0:8.1f} s  {stage['summary']}"
        lines.append(line)
    expected = {table: files for stage in state["stages"]
                for table, files in ((stage.get("expected") or {}).get("tables") or {}).items()}
    for table, loaded in state["loaded"].items():
        files = f"{loaded['files']:,}" + (f" of {expected[table]:,}" if table in expected else "")
        lines.append(f"{table:14} {files:>15} files  {loaded['rows'] or 0:>14,} rows")
    return _lines(lines)


def check_line(result: Check) -> str:
    return f"{'ok' if result.ok else 'FAILED':6} {result.name:22} {result.detail}"


def checks_passed(results: list[Check]) -> str:
    failed = sum(not result.ok for result in results)
    return f"{len(results) - failed} of {len(results)} checks passed"


def checks_text(results: list[Check]) -> str:
    """`ingest check`: every check, in the order given (failed ones first), then the count that passed."""
    return _lines([*map(check_line, results), checks_passed(results)])


def snapshot_created_text(folder: Path, report: CreateReport) -> str:
    done = "already held a finished snapshot" if report.already else f"written in {report.seconds:.1f} s"
    return (f"{folder}: {report.parts} parts ({size(report.bytes)}) {done}; manifest sha256 "
            f"{report.manifest_sha256}")


def pushed_text(folder: Path, repo: str, revision: str | None, commit: str) -> str:
    return (f"{folder} pushed to the dataset {repo} (commit {commit}); restore it with "
            f"`ingest snapshot restore hf:{repo}{'@' + revision if revision else ''}`")


def extracted_text(source: str, data_dir: Path, report: RestoreReport) -> str:
    """A physical snapshot extracted in place of a data directory: what is left to do."""
    return (f"{source} extracted into {data_dir} in {report.seconds:.1f} s; start its server, then finish with "
            f"`ingest snapshot restore {source}` against it")


def restored_text(source: str, report: RestoreReport) -> str:
    """A restore's outcome: where from and to, then its `ingest check`, the failed checks listed as there."""
    return _lines([f"{source} restored into {report.target} in {report.seconds:.1f} s (manifest sha256 "
                   f"{report.manifest_sha256}); {checks_passed(report.checks)}",
                   *map(check_line, report.failed_checks)])


def export_text(folder: Path, report: ExportReport) -> str:
    return (f"{folder}: {report.files} files ({size(report.bytes)}); {len(report.written)} written, "
            f"{len(report.kept)} already there, in {report.seconds:.1f} s; manifest sha256 {report.manifest_sha256}")


def export_check_text(folder: Path, checked: CheckReport) -> str:
    verdict = "equals" if not checked.differences else f"differs from ({len(checked.differences)} differences)"
    return _lines([*(f"DIFFERS {difference}" for difference in checked.differences),
                   f"{folder}: {checked.files} files; {verdict} the database {checked.database}"])


def demo_text(data_dir: Path, written: dict[str, int]) -> str:
    return (f"{data_dir}: {written['tiles']} DEM tiles, {written['pois']} pois and a few features per other "
            f"layer, {written['R1']} R1 and {written['V5']} V5 questions under benchmark/")
