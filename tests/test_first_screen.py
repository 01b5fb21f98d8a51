"""The first screen after a sweep compares machines: a real sweep through the entry point, the page it prints,
opened in Chromium as a person opens it.

The sweep is the default cell on this machine's CPU; results/contributed/ holds an H100 machine's runs of
the same setting (its GPU, and its host's 16-core CPU). Without scrolling, the page must show this machine's
figure, marked as yours, next to at least one other machine's, with readable numbers and the speed-up. A
screenshot is saved in tmp_path; with TRAINBENCH_UI_SHOTS=DIR it is copied to DIR (docs/screenshots/).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RUN_PY, child_env
from test_ui import browser_or_skip, open_browser
from trainbench.measure import hardware

pytestmark = pytest.mark.slow  # a real sweep (~30 s on two cores) and a browser


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("first-screen")
    done = subprocess.run(
        [sys.executable, str(RUN_PY), "device=cpu", "tracking.system_metrics_interval_s=0"],
        cwd=folder,
        env=child_env({"MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}"}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return folder, done.stdout


def test_the_sweep_says_where_this_machine_stands_and_prints_the_page(sweep) -> None:
    folder, out = sweep
    (mine,) = hardware.labels_for("cpu", hardware.host_tags())
    assert re.search(r"Where this machine stands: 1 of 1 setting\(s\) also measured on another machine", out), (
        "no other machine has the default cell's setting: regenerate results/contributed/ (its README says how)"
    )
    (line,) = [line for line in out.splitlines() if line.startswith("  mlp (train):")]
    # the fastest contributed figure with its interval, then a ratio or, where the intervals overlap, the words
    assert re.search(
        r"samples/s here; \d+ other machine\(s\), fastest .+ \(contributed, pytorch [\d.]+\) [\d,]+ .*\), "
        r"([\d.]+x \((faster|slower) than your(s| pytorch)(; no interval recorded)?\)|within noise of your"
        r"|too close to call against yours \(no interval recorded\))$",
        line,
    ), line
    # the page and the store as the person who started the sweep reaches them: from the folder they started it in
    (printed,) = re.findall(r"^Compare: (\S+)", out, flags=re.MULTILINE)
    (page,) = (folder / "outputs" / "compare").glob("*.html")
    assert (folder / printed).resolve() == page and mine in page.read_text()
    (store,) = re.findall(r"^MLflow: sqlite:///(\S+) ", out, flags=re.MULTILINE)
    assert (folder / store).resolve() == folder / "mlflow.db", store


def test_compare_returns_the_first_screens_line_as_typed_rows(sweep) -> None:
    """trainbench.compare on the sweep's store: this machine's run against the contributed H100's, as printed."""
    import trainbench
    from conftest import runs_in

    folder, out = sweep
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    (cell,) = [r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "cell"]
    (row,) = trainbench.compare(cell.info.run_id, tracking_uri=uri)
    assert row.lines[0] in out.splitlines()
    (yours,) = row.yours
    assert (yours.value, yours.ci95) == (cell.data.metrics["samples_per_s"], cell.data.metrics["samples_per_s_ci95"])
    assert yours.machine == cell.data.tags["hw.label"] and row.unit == "samples/s"
    contributed = [m for m in row.others if m.kind == "contributed" and m.machine == "NVIDIA H100 80GB HBM3"]
    assert contributed and all(m.within_noise or m.speedup for m in contributed), row.others
    fastest = max(row.others, key=lambda m: m.value)
    assert f"{fastest.machine} ({fastest.kind}, {fastest.software}) {fastest.figure}" in row.lines[0]
    # This machine's latest run of the setting, named by its id alone, reads the same.
    assert trainbench.compare(setting=row.setting_id, tracking_uri=uri) == (row,)
    assert trainbench.compare(setting="0" * 12, tracking_uri=uri) == ()


def test_the_first_screen_shows_this_machine_next_to_another(sweep, tmp_path) -> None:
    sync_api = browser_or_skip()
    folder, _ = sweep
    (page_file,) = (folder / "outputs" / "compare").glob("*.html")
    (mine,) = hardware.labels_for("cpu", hardware.host_tags())
    with sync_api.sync_playwright() as playwright:
        context = open_browser(sync_api, playwright, tmp_path / "profile")
        try:
            page = context.new_page()
            page.goto(page_file.as_uri())
            height = page.viewport_size["height"]
            yours = page.locator("tr.yours").first
            others = page.locator("tr.contributed, tr.imported, tr.published, tr.this")
            sync_api.expect(yours).to_be_visible()
            assert others.count() >= 1
            for row in (yours, others.first):  # both on the first screen, no scrolling
                box = row.bounding_box()
                assert box is not None and box["y"] + box["height"] <= height, box
            assert mine in yours.inner_text() and "yours" in yours.inner_text()
            other = others.first.inner_text()
            # another machine, or one of the same name that a colleague contributed, said so
            assert mine not in other or re.search(r"\tcontributed \S+\.json", other), other
            assert re.search(r"\d[\d,]*(\.\d+)?\s", other)  # a readable figure
            # a ratio, or where the intervals overlap the words for it
            assert re.search(r"[\d.]+x \((faster|slower) than yours|within noise of yours|too close to call", other)
            assert not re.search(r"\d\.\d{6,}", page.locator("#standing").inner_text())  # no raw floats
            shot = tmp_path / "first-screen.png"
            page.screenshot(path=str(shot))
            if os.environ.get("TRAINBENCH_UI_SHOTS"):
                shutil.copy(shot, Path(os.environ["TRAINBENCH_UI_SHOTS"]) / shot.name)
        finally:
            context.close()


def test_each_framework_this_machine_ran_has_its_figure_and_its_own_speedup() -> None:
    """Runs measured on an H100 (results/2026-11-26-mlx-cuda/): MLX and PyTorch cells of one setting on one machine.
    The terminal line gives both figures, another machine's PyTorch run is set against the PyTorch one, the
    setting's title is the same whichever framework's run comes first (PyTorch's channels_last is not a
    setting), an inference setting does not speak of epochs, and a figure of a compiled step says so."""
    from trainbench.report import standing
    from trainbench.report.selection import Selection, select
    from trainbench.store import sources

    folder = Path(__file__).resolve().parents[1] / "results" / "2026-11-26-mlx-cuda"
    opened = [sources.open_file(folder / name) for name in ("call-a.json", "call-b.json")]
    opened += [sources.open_file(path, contributed=True) for path in sources.contributed_files()]
    entries, _ = select(opened, Selection("trainbench"), mine={"NVIDIA H100 80GB HBM3"}, histories=False)
    found = {s.title: s for s in standing.standings(entries)}
    resnet = "resnet50 (benchmark): synthetic_imagenet 224 px, bs128, mixed_bf16, timed: steps"
    assert resnet in found, sorted(found)
    line = standing.terminal_lines([found[resnet]])[0]  # then its history lines
    assert re.search(r": mlx 0\.32: [\d,.]+ \S.*, pytorch 2\.11: [\d,.]+ .*samples/s here;", line), line
    # MLX compiled its fast step and PyTorch did not (a CUDA graph of the eager step): the line says which
    fast_mlp = "mlp (train): hidden [3000, 1000], synthetic 32 px, 8192 samples x 3 epochs, bs64, mixed_bf16, timed: epoch, optimize=fast"
    line = standing.terminal_lines([found[fast_mlp]])[0]
    assert re.search(r": mlx 0\.32, compiled: [\d,.]+ .*, pytorch 2\.11: [\d,.]+ .*samples/s here;", line), line
    default_cell = (
        "mlp (train): hidden [3000, 1000], synthetic 32 px, 8192 samples x 3 epochs, bs64, fp32, timed: epoch"
    )
    line = standing.terminal_lines([found[default_cell]])[0]
    assert re.search(
        r"\(contributed, [^)]+\) [\d,]+ .*\), ([\d.]+x \((faster|slower) than your pytorch(; no interval recorded)?\)"
        r"|within noise of your pytorch|too close to call against your pytorch \(no interval recorded\))",
        line,
    ), line
    inference = [title for title in found if "(inference)" in title]
    assert inference and not [title for title in inference if "epochs" in title], inference


def line_key(line: str) -> str:
    """What a printed line is, whatever its figures: its label up to the first ': ' (or the whole line), with
    every number as 9, every run of dashes as one, spacing collapsed and no NOISY mark."""
    label = line.split(": ", 1)[0].replace(" NOISY", "")  # how noisy this machine was is this machine's
    return " ".join(re.sub(r"-{2,}", "-", re.sub(r"\d[\d,.]*", "9", label)).split())


def test_the_readme_s_sample_output_is_what_the_main_job_prints(sweep) -> None:
    """Each line of the README's sample (`...` elides) is a line the main job prints, in the same order: the same
    labels and cell names, the figures aside (they are this machine's)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    (sample,) = re.findall(r"^```\n(\[cell 1/1\].*?)^```", readme, flags=re.MULTILINE | re.DOTALL)
    printed = [line_key(line) for line in sweep[1].splitlines()]
    position = 0
    for line in sample.splitlines():
        if line.strip() == "...":
            continue
        key = line_key(line)
        assert key in printed[position:], f"the README shows {line!r}; the main job printed no such line after " + (
            repr(printed[position - 1]) if position else "its start"
        )
        position = printed.index(key, position) + 1
