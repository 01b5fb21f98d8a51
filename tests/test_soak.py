"""The soak (benchmarks/soak.py), short: a sweep while another process imports, a third exports, and a chaos loop
holds the store's write lock and SIGKILLs cells. Every run ends closed, none is imported twice, every point a
finished cell logged is there; the counts are printed (pytest -s shows them). SQLite only: see the script."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import soak  # noqa: E402


@pytest.mark.slow
def test_a_sweep_beside_imports_exports_locks_and_kills_ends_whole(tmp_path: Path, capsys) -> None:
    # imports and exports every few seconds, the store's lock taken every 8 s or so, a running cell SIGKILLed every 25 s
    verdict = soak.Soak(tmp_path, seconds=35, pause_s=3).run()
    printed = capsys.readouterr().out
    print(printed)
    assert verdict == 0, printed
    assert "sweep's finished cells: 0" not in printed  # the sweep got work done under the chaos
