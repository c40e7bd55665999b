"""Brokers on separate Ray nodes, with Ray's own multi-node harness (in a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.multinode
def test_brokers_spread_over_nodes_and_replicas_stay_pinned():
    scenario = Path(__file__).with_name("multinode_scenario.py")
    proc = subprocess.run(
        [sys.executable, str(scenario)], capture_output=True, text=True, timeout=400, cwd=Path(__file__).parents[2]
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    nodes = out["broker_nodes"]
    assert len(set(nodes.values())) == 3, "three brokers on three different nodes"
    for p in out["placement"].values():
        # Each leader replica runs on the node its broker is bound to.
        assert p["node"] == nodes[str(p["broker"])]
    assert sorted(out["end_offsets"].values()) == [10] * 6
    assert out["offline_after_node_loss"] == out["expected_offline"] and out["expected_offline"]
    assert out["produced_after_loss"] == 6 - len(out["expected_offline"])
