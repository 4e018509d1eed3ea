"""What the PBF tests share: small extracts written from inline OPL (each id a case), a damaged copy of an
extract, and `ingest` with the PBF tests' timeout."""

from __future__ import annotations

import functools
from pathlib import Path

import load_helpers
import osmium

TABLES = ["pois", "roads", "parks", "lakes", "regions"]
LONG = "x" * 300

# Nodes 1-9 and ways 20-31 around (7.0, 43.0); the ids say what each case is.
OPL = f"""\
n1 v1 x7.0001 y43.0001 Tamenity=restaurant,name=Chez%20%Zo%e9%,cuisine=french
n2 v1 x7.0002 y43.0002 Tamenity=bench
n3 v1 x7.0003 y43.0003 Tleisure=park,name=Small%20%Park
n4 v1 x7.0 y43.0
n5 v1 x7.01 y43.0
n6 v1 x7.01 y43.01
n7 v1 x7.0 y43.01
n8 v1 x7.02 y43.02
n9 v1 x7.03 y43.03 Ttourism=museum,name=Long,description={LONG}
w20 v1 Thighway=residential,name=Open%20%Street Nn4,n5,n6
w21 v1 Thighway=pedestrian,name=Square Nn4,n5,n6,n7,n4
w22 v1 Twaterway=river,name=River Nn5,n8
w23 v1 Tnatural=water,name=Pond Nn4,n5,n6,n7,n4
w24 v1 Thighway=service Nn4,n999
w25 v1 T Nn4,n5,n6,n4
w26 v1 T Nn6,n7,n8,n6
w27 v1 T Nn4,n5
w28 v1 Tleisure=pitch,name=Court Nn4,n5,n6,n7,n4
r100 v1 Ttype=multipolygon,leisure=park,name=Two%20%Parts Mw25@outer,w26@outer
r101 v1 Ttype=boundary,boundary=administrative,admin_level=8,name=Town Mw25@outer
r102 v1 Ttype=multipolygon,natural=water,name=Broken Mw27@outer
r103 v1 Ttype=multipolygon,leisure=park,name=Around%20%the%20%Court Mw28@outer
"""


def pbf_from_opl(text: str, path: Path) -> Path:
    opl = path.with_suffix(".opl")
    opl.write_text(text)
    with osmium.SimpleWriter(str(path)) as writer:
        for obj in osmium.FileProcessor(str(opl)):
            writer.add(obj)
    return path


ingest = functools.partial(load_helpers.ingest, timeout=300)


def damaged_copy(source: Path, target: Path) -> Path:
    data = bytearray(source.read_bytes())
    data[len(data) // 2:len(data) // 2 + 64] = bytes(64)  # inside a block: its headers still say whole
    target.write_bytes(bytes(data))
    return target
