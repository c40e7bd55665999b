"""Which twin runs: compiled by default, pure with RAYQUEUE_NO_EXTENSIONS=1, one warning when missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import storage.record_batch
from storage import extensions
from storage.record_batch import RecordBatchBuilder
from tests import twins

ROOT = Path(__file__).resolve().parents[2]
# Importing these loads every module that has a compiled twin.
IMPORTS = "import storage, storage.log, storage.cleaner, rayqueue.producer"
REPORT = "import json, warnings, storage.extensions as e; print(json.dumps(e.ACTIVE))"


def run(code: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != extensions.ENV_SWITCH}
    environment.update(env, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-W", "always", "-c", code],
        env=environment,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_the_switch_forces_the_pure_twins_silently() -> None:
    done = run(f"{IMPORTS}; {REPORT}", RAYQUEUE_NO_EXTENSIONS="1")
    active = json.loads(done.stdout)
    assert active and set(active.values()) == {"pure"}, active
    assert {"storage.record_batch", "storage.log", "storage.cleaner", "rayqueue.producer.producer"} <= set(active)
    assert "ExtensionsWarning" not in done.stderr


@pytest.mark.skipif(extensions.NO_EXTENSIONS, reason="RAYQUEUE_NO_EXTENSIONS is set for this run")
def test_the_compiled_twins_are_in_use_by_default() -> None:
    done = run(
        f"{IMPORTS}; {REPORT}; import storage.record_batch as r; print(type(r.RecordBatchBuilder).__module__,"
        " r.RecordBatchBuilder.__module__)"
    )
    active_line, types_line = done.stdout.splitlines()
    active = json.loads(active_line)
    assert active and set(active.values()) == {"compiled"}, f"not built? run `make setup`: {active}"
    assert types_line.split()[1] == "storage._compiled.record_batch"
    assert "ExtensionsWarning" not in done.stderr


def test_a_missing_build_falls_back_with_one_warning() -> None:
    """No compiler at install time: every twin is missing; the pure code runs and says so once."""
    blocker = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if '._compiled.' in name:\n"
        "            raise ImportError('no module named ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
    )
    done = run(f"{blocker}{IMPORTS}; {REPORT}")
    active = json.loads(done.stdout)
    assert active and set(active.values()) == {"pure"}
    assert done.stderr.count("ExtensionsWarning") == 1, done.stderr
    assert "make setup" in done.stderr and "RAYQUEUE_NO_EXTENSIONS=1" in done.stderr


def test_an_extension_older_than_its_source_is_stale(tmp_path: Path) -> None:
    built = tmp_path / "record_batch.cpython-311-x86_64-linux-gnu.so"
    source = tmp_path / "record_batch.pyx"
    built.write_bytes(b"")
    source.write_text("")
    module = SimpleNamespace(__name__="storage._compiled.record_batch", __file__=str(built))
    now = time.time()
    os.utime(source, (now - 10, now - 10))
    os.utime(built, (now, now))
    assert extensions._stale(module) is None
    os.utime(source, (now + 10, now + 10))
    assert extensions._stale(module) == str(source)
    source.unlink()  # installed from a wheel: no sources to compare with
    assert extensions._stale(module) is None


def test_the_twin_fixture_swaps_every_importer(twin: str) -> None:
    """tests/twins.py rebinds the names in the pure module and in the modules that imported them."""
    pure, compiled = extensions.TWINS[("storage.record_batch", "RecordBatchBuilder")]
    expected = pure if twin == "pure" else compiled
    assert storage.record_batch.RecordBatchBuilder is expected
    assert sys.modules[__name__].RecordBatchBuilder is expected  # this module's own import
    assert storage.RecordBatchBuilder is expected
    if twin == "compiled":
        assert pure is not compiled and twins.compiled_available()
    assert RecordBatchBuilder is expected


def test_the_twin_fixture_swaps_methods_and_classes(twin: str) -> None:
    """Methods with a compiled twin (Log.append, LogSegment.append) and the offset map follow the fixture."""
    import storage.cleaner
    import storage.log
    import storage.segment

    which = 0 if twin == "pure" else 1
    assert storage.log.Log.append is extensions.TWINS[("storage.log", "Log.append")][which]
    assert storage.segment.LogSegment.append is extensions.TWINS[("storage.segment", "LogSegment.append")][which]
    assert storage.cleaner.SkimpyOffsetMap is extensions.TWINS[("storage.cleaner", "SkimpyOffsetMap")][which]
    if twin == "pure":
        assert storage.log.Log.append.__module__ == "storage.log"
