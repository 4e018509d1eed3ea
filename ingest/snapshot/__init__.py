"""`ingest snapshot`: a built and checked reference database as a folder of verified parts, and back.

    manifest.py   what both formats share: the folder's names, the manifest and the checks of the parts,
                  the server's versions and their differences, the database's comment naming the snapshot
                  it was restored from, the tools' --dbname
    create.py     `ingest snapshot create`: the database checked and described, the dump cut into parts,
                  the card and the manifest (written last)
    card.py       the dataset card (README.md)
    restore.py    `ingest snapshot restore`: the preflight and its refusals, a dump's restore (pg_restore, COPY
                  from cut parts), a physical snapshot's finish once its server runs
    hub.py        hub sources (hf:OWNER/NAME[@REVISION]) downloaded into a local folder, and push
    physical.py   the physical format: a cold copy of the stopped cluster and its extraction in place of a
                  data directory

manifest.py and physical.py import no other module of the package; create.py imports card.py; none imports
create.py, restore.py or hub.py. docs/SNAPSHOTS.md has what a snapshot holds and why.
"""
