"""Runs the README's Arrow-tool snippets as they stand and checks their counts.

    python readme_snippets.py SHARD_DIR COCO_INSTANCES_JSON

Each fenced block that follows a ``<!-- ci: NAME -->`` line in README.md runs
in a scratch folder where ``shards/train2017`` is SHARD_DIR: the ``sql``
blocks with DuckDB's Python package (the first statement's row is
``images, instances``), the ``python`` blocks with exec (they leave
``images`` and ``instances`` behind). Every snippet must count as many
images and instances as the manifest, and as many images as the COCO file
has. Ends with "N passed, N failed"; exits 1 on any failure.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "..", "..", "README.md")
BLOCK = re.compile(r"^<!-- ci: (\w+) -->\n```(\w+)\n(.*?)^```", re.M | re.S)


def snippets(text: str) -> list[tuple[str, str, str]]:
    return [(m.group(1), m.group(2), m.group(3)) for m in BLOCK.finditer(text)]


def run(lang: str, code: str) -> tuple[int, int]:
    if lang == "sql":
        import duckdb

        con = duckdb.connect()
        rows = None
        for stmt in (s.strip() for s in code.split(";")):
            if stmt:
                res = con.sql(stmt).fetchall()
                rows = res if rows is None else rows
        (images, instances), = rows
        return int(images), int(instances)
    if lang == "python":
        ns: dict = {"__name__": "__readme__"}
        exec(compile(code, "README.md snippet", "exec"), ns)
        return int(ns["images"]), int(ns["instances"])
    raise ValueError(f"no runner for {lang} blocks")


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    shards, coco_path = (os.path.abspath(p) for p in sys.argv[1:])
    with open(os.path.join(shards, "manifest.json")) as f:
        manifest = json.load(f)
    with open(coco_path) as f:
        coco_images = len(json.load(f)["images"])
    with open(README) as f:
        blocks = snippets(f.read())
    want_names = {"duckdb", "pyarrow", "polars"}
    passed = failed = 0

    def check(name: str, ok: bool, detail: str) -> None:
        nonlocal passed, failed
        if ok:
            passed += 1
            print(f"ok   {name}")
        else:
            failed += 1
            print(f"FAIL {name}: {detail}")

    check("README has the duckdb, pyarrow and polars snippets", want_names <= {b[0] for b in blocks}, str([b[0] for b in blocks]))
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "shards"))
        os.symlink(shards, os.path.join(d, "shards", "train2017"))
        os.chdir(d)
        try:
            for name, lang, code in blocks:
                try:
                    images, instances = run(lang, code)
                except Exception as e:  # reported as a failure, the others still run
                    check(f"{name} snippet runs", False, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")
                    continue
                check(f"{name}: images = manifest rows", images == manifest["rows"], f"{images} vs {manifest['rows']}")
                check(f"{name}: images = COCO file images", images == coco_images, f"{images} vs {coco_images}")
                check(f"{name}: instances = manifest instances", instances == manifest["instances"], f"{instances} vs {manifest['instances']}")
        finally:
            os.chdir(cwd)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
