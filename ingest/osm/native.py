"""The native modules of `ingest osm`, built at install by hatch_build.py where a compiler and their headers are:
pbf/_osmread (the PBF reader, libosmium; pbf/native.py) and _lines (the GeoJSON lines encoder, simdjson; used
by geojson.py). Both give what their Python path gives, byte for byte, and take loader 1's rules from here as
data (declared once in rules.py); the shared C++ half of the rules is copy_rows.hpp.

Without a module, or with $GSQA_NATIVE_READER=0, the Python path does the work: the same rows, more CPU."""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any

from ingest.osm.batches import BATCH_BYTES, MAX_REPORTED_PER_JOB
from ingest.osm.rules import POI_PASSES, VARCHAR_LIMIT, Layer

NATIVE_READER_ENV = "GSQA_NATIVE_READER"  # 0: the Python paths even where the native modules are built
NATIVE_LINES_PACKAGES = "g++ python3-dev libsimdjson-dev"  # system-packages.txt, native


@functools.cache
def native_module(name: str) -> Any:
    """ingest.osm.<name>, or None when it was not built or the native modules are switched off."""
    if os.environ.get(NATIVE_READER_ENV) == "0":
        return None
    try:
        return importlib.import_module(f"ingest.osm.{name}")
    except ImportError:
        return None


def fallback_note(name: str, what: str, instead: str, packages: str) -> str | None:
    """One line for stderr when the native module `name` (`what`) does not do the work: why, what the Python path
    costs (`instead`), and how to get the module; None when it does the work."""
    if native_module(name) is not None:
        return None
    why = (f"{NATIVE_READER_ENV}=0 is set" if os.environ.get(NATIVE_READER_ENV) == "0"
           else f"the native {what} was not built when this package was installed")
    return (f"ingest osm: {why}; {instead}. For the native {what.rsplit(' ', 1)[-1]}: apt-get install {packages}, "
            "then install this package again (make venv, or pip install .)")


def lines_note() -> str | None:
    """One line for stderr when GeoJSON lines are encoded in Python; None when the native encoder encodes them."""
    return fallback_note("_lines", "GeoJSON lines encoder", "encoding GeoJSON lines in Python: the same rows, more "
                         "CPU", NATIVE_LINES_PACKAGES)


def layer_spec(layer: Layer, staged_as: str) -> dict[str, Any]:
    """Loader 1's rules for one table as the native modules take them (copy_rows.hpp, Rules); `staged_as`: the
    source name of the pois staging rows."""
    rules = {"table": layer.name, "attributes": len(layer.attribute_columns), "tag_columns": layer.tag_columns,
             "name_column": layer.tag_columns[layer.name_column],
             "osm_id_column": -1 if layer.osm_id_index is None else layer.osm_id_index}
    if layer.in_passes:
        rules["staged_as"] = staged_as
        rules["passes"] = [(key, list(values)) for key, values in POI_PASSES]
    return rules


def limits(listed_broken: int = 0) -> dict[str, int]:
    """Loader 1's column limit and the batch and report bounds of the Python side (copy_rows.hpp, Limits)."""
    return {"varchar": VARCHAR_LIMIT, "batch_bytes": BATCH_BYTES, "reported": MAX_REPORTED_PER_JOB,
            "listed_broken": listed_broken}


def line_encoder(layer: Layer, source_name: str, bbox: tuple[float, float, float, float] | None) -> Any:
    """The native encoder of a lines job (_lines.LineEncoder), or None: not built, switched off, or a file name
    that is not UTF-8 (the Python path reports that on each of its features)."""
    module = native_module("_lines")
    if module is None:
        return None
    try:
        source_name.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return module.LineEncoder(layer_spec(layer, source_name), limits(), bbox)
