"""Resolve the pinned JVM artifacts (``pins.toml``) with Maven, into Maven's own cache.

For each set of ``pins.toml`` a throwaway POM naming its artifacts is written under
``build/jvm/<set>/`` and ``mvn dependency:build-classpath`` resolves them (with their
dependencies) into ``~/.m2``; the classpath it prints, paths into Maven's cache, is kept in
``build/jvm/<set>.classpath``. Nothing is downloaded but through Maven and no jar lands in
the checkout. Used by ``make jvm``, the JVM tests (``tests/jvm``) and the Kafka peer benchmark.

    python -m tests.jvm.maven            # resolve every set, compile tests/jvm/java/*/
    python -m tests.jvm.maven kafka      # one set
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PINS = HERE / "pins.toml"
BUILD = ROOT / "build" / "jvm"


class JvmUnavailable(RuntimeError):
    """Java or Maven is missing, or Maven could not resolve a pinned set."""


def pins() -> dict:
    """The parsed ``pins.toml``."""
    with PINS.open("rb") as f:
        return tomllib.load(f)


def versions() -> dict[str, str]:
    """The pinned versions by name (``kafka``, ``kafka-legacy``, ``spark``, ...)."""
    return dict(pins()["versions"])


def artifacts(set_name: str) -> list[tuple[str, str, str, str]]:
    """(group, artifact, version, classifier) of one set, versions filled in from
    ``[versions]``; a coordinate is ``group:artifact:version`` or, for a jar Maven Central
    publishes beside the main one (``tests``, ``test-fixtures``), ``group:artifact:version:classifier``
    (classifier empty for the main jar)."""
    data = pins()
    if set_name not in data["sets"]:
        raise KeyError(f"no set {set_name!r} in {PINS} (sets: {', '.join(data['sets'])})")
    out = []
    for coordinate in data["sets"][set_name]["artifacts"]:
        parts = coordinate.format_map(data["versions"]).split(":")
        if len(parts) not in (3, 4):
            raise ValueError(f"{coordinate!r} in set {set_name!r}: group:artifact:version[:classifier]")
        group, artifact, version = parts[:3]
        out.append((group, artifact, version, parts[3] if len(parts) == 4 else ""))
    return out


def _pom(set_name: str) -> str:
    deps = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>"
        + (f"<classifier>{c}</classifier>" if c else "")
        + "</dependency>"
        for g, a, v, c in artifacts(set_name)
    )
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>rayqueue.jvm</groupId>
  <artifactId>{set_name}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


def require_tools() -> None:
    """Raise ``JvmUnavailable`` naming what is missing (java, javac, mvn)."""
    missing = [tool for tool in ("java", "javac", "mvn") if shutil.which(tool) is None]
    if missing:
        raise JvmUnavailable(f"{', '.join(missing)} not on PATH (OpenJDK 17 and Maven are needed)")


def classpath(set_name: str) -> str:
    """The classpath of one set (``:``-joined jar paths in ``~/.m2``), resolving it with Maven
    the first time or whenever its pins change."""
    require_tools()
    pom = _pom(set_name)
    digest = hashlib.sha256(pom.encode()).hexdigest()[:16]
    out = BUILD / f"{set_name}.classpath"
    stamp = BUILD / f"{set_name}.digest"
    if out.exists() and stamp.exists() and stamp.read_text() == digest:
        cp = out.read_text().strip()
        if all(os.path.exists(p) for p in cp.split(os.pathsep)):
            return cp
    work = BUILD / set_name
    work.mkdir(parents=True, exist_ok=True)
    (work / "pom.xml").write_text(pom)
    result = subprocess.run(
        ["mvn", "-q", "-B", "-f", str(work / "pom.xml"), "dependency:build-classpath", f"-Dmdep.outputFile={out}"],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0 or not out.exists():
        tail = (result.stdout + result.stderr).strip().splitlines()[-15:]
        raise JvmUnavailable(f"Maven could not resolve set {set_name!r}:\n" + "\n".join(tail))
    stamp.write_text(digest)
    return out.read_text().strip()


JAVA_SOURCES = HERE / "java"
CLASSES = BUILD / "classes"


def program_sets(program_dir: str) -> list[str]:
    """The sets a program directory is compiled against: those its ``SET`` file names
    (whitespace-separated; the same sources built once per set), ``kafka`` when it has none."""
    set_file = JAVA_SOURCES / program_dir / "SET"
    names = set_file.read_text().split() if set_file.exists() else []
    return names or ["kafka"]


def compile_java(program_dir: str, set_name: str) -> Path:
    """Compile ``tests/jvm/java/<program_dir>/*.java`` (plus ``<program_dir>/<set_name>/*.java``,
    the set's own version-specific sources, if any) against a set's classpath with ``javac``
    into ``build/jvm/classes/<program_dir>/<set_name>/`` (again only when a source is newer
    than the classes); returns that directory, to put first on ``java -cp``."""
    cp = classpath(set_name)
    sources = sorted((JAVA_SOURCES / program_dir).glob("*.java")) + sorted(
        (JAVA_SOURCES / program_dir / set_name).glob("*.java")
    )
    if not sources:
        raise JvmUnavailable(f"no Java sources in {JAVA_SOURCES / program_dir}")
    out = CLASSES / program_dir / set_name
    stamp = out / ".compiled"
    newest = max(s.stat().st_mtime for s in [*sources, PINS])
    if stamp.exists() and stamp.stat().st_mtime >= newest:
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    result = subprocess.run(
        ["javac", "-nowarn", "-d", str(out), "-cp", cp, *map(str, sources)], capture_output=True, text=True
    )
    if result.returncode != 0:
        raise JvmUnavailable(f"javac failed for {program_dir} against {set_name}:\n{result.stdout}{result.stderr}")
    stamp.touch()
    return out


def compile_all() -> list[Path]:
    """Compile every program directory under ``tests/jvm/java/`` against each set it names
    (``program_sets``)."""
    done = []
    for program_dir in sorted(p for p in JAVA_SOURCES.glob("*") if p.is_dir()) if JAVA_SOURCES.exists() else []:
        for set_name in program_sets(program_dir.name):
            done.append(compile_java(program_dir.name, set_name))
    return done


def main(argv: list[str]) -> int:
    names = argv or list(pins()["sets"])
    try:
        for name in names:
            cp = classpath(name)
            print(f"{name}: {len(cp.split(os.pathsep))} jars ({BUILD / (name + '.classpath')})")
        if not argv:
            for out in compile_all():
                print(f"compiled {out}")
    except JvmUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
