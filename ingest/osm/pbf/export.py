"""--export-geojson: the osmx-style layers of OpenStreetMap extracts as GeoJSON files, one feature per line,
read with pyosmium by the same readers (ReadPlan) as a direct load."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from gsqa_core.errors import GsqaError
from ingest.osm.pbf.checks import check_inputs, extent
from ingest.osm.pbf.plans import ReadPlan, reader_plans
from ingest.osm.pbf.pyosmium import Feature, run_reader
from ingest.osm.pbf.sources import FOLDERS, PbfReport, layer_sources, source_name


def export(paths: list[Path], folder: Path, bbox: tuple[float, float, float, float] | None = None,
           progress: bool = True) -> PbfReport:
    """--export-geojson: write the osmx-style layers (`<layer>/<source name>`, one feature per line) to
    `folder`, the readers (reader_plans) at the same time. An extract that cannot be read to its end (and the
    ones after it) is listed in the report's `failed`; the files of the others are written."""
    started = time.monotonic()
    check_inputs(paths, bbox)
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {layer: set(layer_sources(paths, layer)) for layer in FOLDERS}
    plans = reader_plans(paths, wanted, folder, bbox)
    report = PbfReport(sources=[str(path) for path in paths])
    failures: list[str] = []
    with _export_pool(len(plans)) as pool, tqdm(total=len(plans), unit=" readers", disable=not progress,
                                                desc="ingest osm: exporting") as bar:
        for part, failed in pool.imap_unordered(_export_one, [(plan, folder) for plan in plans]):
            report.merge(part)
            report.location_index = report.location_index or part.location_index
            failures += failed
            bar.update()
    report.failed = sorted(set(failures))  # (each reader fails an unreadable extract)
    report.close_relations()
    if bbox is not None and not report.features and not failures:
        raise GsqaError(f"--bbox {','.join(map(str, bbox))} holds none of the features of the extracts "
                        f"(they cover {'; '.join(extent(path) for path in paths)})")
    report.seconds = time.monotonic() - started
    return report


def _export_pool(processes: int) -> Any:
    return multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn").Pool(processes)


def _export_one(task: tuple[ReadPlan, Path]) -> tuple[PbfReport, list[str]]:
    plan, folder = task
    return run_reader(plan, lambda path, layers, features: _geojson_files(path, layers, features, folder),
                      geojson=True)


def _geojson_files(path: Path, layers: dict[str, set[str]], features: Iterator[Feature], folder: Path) -> None:
    """--export-geojson: each source as an osmx-style file, one feature per line, written to `.partial` and
    renamed when complete."""
    targets = {(kind, layer): folder / layer / source_name(path, kind)
               for kind, kind_layers in layers.items() for layer in kind_layers}
    handles: dict[tuple[str, str], TextIO] = {}
    try:
        for source, target in targets.items():
            target.parent.mkdir(parents=True, exist_ok=True)
            handles[source] = open(target.with_suffix(".partial"), "w", encoding="utf-8")
            handles[source].write('{"type": "FeatureCollection", "features": [\n')
        separator = dict.fromkeys(targets, "")
        for kind, layer, osm_id, tags, geometry in features:
            if not layer:  # (pyosmium.FIRST_READ_OVER)
                continue
            handles[(kind, layer)].write(
                f'{separator[(kind, layer)]}{{"type": "Feature", "geometry": {geometry}, "properties": '
                f'{{"id": {osm_id}, "tagsMap": {json.dumps(tags, ensure_ascii=False)}}}}}')
            separator[(kind, layer)] = ",\n"
        for source, handle in handles.items():
            handle.write("\n]}\n")
            handle.close()
            os.replace(targets[source].with_suffix(".partial"), targets[source])
    finally:
        for source, handle in handles.items():
            handle.close()
            targets[source].with_suffix(".partial").unlink(missing_ok=True)
