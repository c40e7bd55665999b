"""Which twin runs: compiled by default, pure with RAYQUEUE_NO_EXTENSIONS=1, one warning when
missing; chosen once at import; compiled classes and kernels show their signatures."""

from __future__ import annotations

import inspect
import json
import os
import pydoc
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import rayqueue.producer.accumulator
import storage.cleaner
import storage.log_validator
import storage.records.builder
import storage.records.reader
from storage import extensions
from storage.records.builder import RecordBatchBuilder
from tests import twins

ROOT = Path(__file__).resolve().parents[2]
# Importing these loads every module that has a compiled twin.
IMPORTS = "import storage, storage.log, storage.cleaner, storage.records.columns, rayqueue.producer"
REPORT = "import json, warnings, storage.extensions as e; print(json.dumps(e.ACTIVE))"
TWINNED = {
    "storage.records.reader",
    "storage.records.builder",
    "storage.records.columns",
    "storage.log_validator",
    "storage.cleaner",
}


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
    assert set(active) == TWINNED
    assert "ExtensionsWarning" not in done.stderr


@pytest.mark.skipif(extensions.NO_EXTENSIONS, reason="RAYQUEUE_NO_EXTENSIONS is set for this run")
def test_the_compiled_twins_are_in_use_by_default() -> None:
    done = run(
        f"{IMPORTS}; {REPORT}; import storage.records.builder as r; print(type(r.RecordBatchBuilder).__module__,"
        " r.RecordBatchBuilder.__module__)"
    )
    active_line, types_line = done.stdout.splitlines()
    active = json.loads(active_line)
    assert active and set(active.values()) == {"compiled"}, f"not built? run `make setup`: {active}"
    assert types_line.split()[1] == "storage.records._compiled.builder"
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
    built = tmp_path / "builder.cpython-311-x86_64-linux-gnu.so"
    source = tmp_path / "builder.pyx"
    built.write_bytes(b"")
    source.write_text("")
    module = SimpleNamespace(__name__="storage.records._compiled.builder", __file__=str(built))
    now = time.time()
    os.utime(source, (now - 10, now - 10))
    os.utime(built, (now, now))
    assert extensions._stale(module) is None
    os.utime(source, (now + 10, now + 10))
    assert extensions._stale(module) == str(source)
    source.unlink()  # installed from a wheel: no sources to compare with
    assert extensions._stale(module) is None


def test_each_twin_is_chosen_once_at_import() -> None:
    """Every importer holds the twin its defining module picked; nothing rebinds them."""
    builder = storage.records.builder.RecordBatchBuilder
    assert storage.cleaner.RecordBatchBuilder is builder
    assert rayqueue.producer.accumulator.RecordBatchBuilder is builder
    assert storage.RecordBatchBuilder is builder  # the package's lazy export
    for (module, name), (pure, compiled) in extensions.PAIRS.items():
        assert getattr(sys.modules[module], name) is (compiled if compiled is not None else pure), (module, name)
    assert {module for module, _ in extensions.PAIRS} == TWINNED


def test_using_switches_each_name_in_its_own_module_and_puts_it_back() -> None:
    kernel = storage.records.reader._iter_records
    offset_map = storage.cleaner.SkimpyOffsetMap
    with extensions.using("pure"):
        assert storage.records.reader._iter_records is extensions.twin_of(
            "pure", "storage.records.reader", "_iter_records"
        )
        assert storage.cleaner.SkimpyOffsetMap is extensions.twin_of("pure", "storage.cleaner", "SkimpyOffsetMap")
        assert storage.log_validator.check_request.__module__ == "storage.log_validator"
        # Only the defining module: an importer of the class keeps what it imported.
        assert rayqueue.producer.accumulator.RecordBatchBuilder is RecordBatchBuilder
    assert storage.records.reader._iter_records is kernel
    assert storage.cleaner.SkimpyOffsetMap is offset_map
    with pytest.raises(ValueError):
        with extensions.using("neither"):
            pass
    assert storage.records.reader._iter_records is kernel


def test_the_twin_fixture_switches_the_kernels_and_this_module(twin: str) -> None:
    """tests/twins.py sets the kernels in their modules and the builder this module imported."""
    expected = extensions.twin_of(twin, "storage.records.builder", "RecordBatchBuilder")
    assert sys.modules[__name__].RecordBatchBuilder is expected
    assert storage.records.builder.RecordBatchBuilder is expected
    assert storage.log_validator.check_request is extensions.twin_of(twin, "storage.log_validator", "check_request")
    assert storage.records.reader._walk_records is extensions.twin_of(twin, "storage.records.reader", "_walk_records")
    if twin == "compiled":
        assert twins.compiled_available()


@pytest.mark.skipif(not twins.compiled_available(), reason="the compiled extensions are not built")
def test_the_compiled_twins_show_their_signatures() -> None:
    """embedsignature and binding: inspect.signature and help() work on the compiled code."""
    compiled = extensions.twin_of("compiled", "storage.records.builder", "RecordBatchBuilder")
    pure = extensions.twin_of("pure", "storage.records.builder", "RecordBatchBuilder")
    for method in ("append", "append_many", "build", "set_producer_state", "close_for_record_appends", "has_room_for"):
        got, want = inspect.signature(getattr(compiled, method)), inspect.signature(getattr(pure, method))
        assert list(got.parameters) == list(want.parameters), method
    assert list(inspect.signature(compiled).parameters) == list(inspect.signature(pure).parameters)
    offset_map = extensions.twin_of("compiled", "storage.cleaner", "SkimpyOffsetMap")
    assert list(inspect.signature(offset_map.put).parameters) == ["self", "key", "offset"]
    for module, name in [
        ("storage.records.reader", "_decode_records"),
        ("storage.records.reader", "_iter_records"),
        ("storage.records.reader", "_walk_records"),
        ("storage.records.columns", "_parse_columns"),
        ("storage.log_validator", "check_request"),
        ("storage.log_validator", "patch_headers"),
    ]:
        kernel, reference = pair = twins.pair(module, name)
        assert len(inspect.signature(kernel).parameters) == len(inspect.signature(reference).parameters), pair
    text = pydoc.render_doc(compiled, renderer=pydoc.plaintext)
    assert "set_producer_state(self, producer_id, producer_epoch, base_sequence, is_transactional)" in text
    assert "Kafka's setProducerState" in text
