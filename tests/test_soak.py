"""The soak (benchmarks/soak.py), short: a sweep while another process imports, a third exports, and chaos threads
hold the store's write lock, SIGKILL a running cell and kill the tracking server that every process goes through,
starting it again seconds later. Every run ends closed, none is imported twice, every point a finished cell logged
is there, and every kind of chaos struck; the counts are printed (pytest -s shows them)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import soak  # noqa: E402


@pytest.mark.slow
def test_a_sweep_beside_imports_exports_locks_kills_and_server_blinks_ends_whole(tmp_path: Path, capsys) -> None:
    # imports and exports every few seconds, the store's lock taken every 8 s or so, a running cell SIGKILLed after
    # 25 s, the server killed after 20 s and back 5 s later
    verdict = soak.Soak(tmp_path, seconds=35, pause_s=3, server=True).run()
    printed = capsys.readouterr().out
    print(printed)
    assert verdict == 0, printed
    assert "sweep's finished cells: 0" not in printed  # the sweep got work done under the chaos
