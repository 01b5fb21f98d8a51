"""The MLflow UI, looked at as a person does: a real sweep and the references, served by `mlflow server`, in Chromium.

A store is built in tmp_path with the real entry points (a two-cell sweep, then `python src/references.py`),
`mlflow server` serves it on a free loopback port, and headless Chromium (Debian's, driven by Playwright)
opens the experiment `trainbench`: the runs are listed by name, the columns `samples_per_s` and `hw.label`
are added with the column selector and show each run's values, and the compare view puts a local cell next
to two reference runs. The URL trainbench.store.runs.ui_url gives (what a sweep prints) lands on that comparison
with no clicks: `hw.label` and `samples_per_s` in view, fastest first. Screenshots of the views are saved in
tmp_path; with TRAINBENCH_UI_SHOTS=DIR they are also copied to DIR (that is how docs/screenshots/ is made).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from conftest import RUN_PY, TINY, child_env, import_references, runs_in
from test_team_server import mlflow_server
from trainbench.figures import number
from trainbench.store import shared_runs, tracking
from trainbench.store.runs import LOCAL_UI, ui_url

pytestmark = pytest.mark.slow  # real servers, sweeps and a browser

CHROMIUM = Path(os.environ.get("TRAINBENCH_CHROMIUM", "/usr/bin/chromium"))
# What the machine's docs say headless Chromium needs here (no network but package registries).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SWEEP = ["-m", "model=mlp", "device=cpu,gpu", *TINY]
# The default cell: results/contributed/ holds the same setting run on an H100 machine (its GPU and its CPU).
SHARED_SETTING: list[str] = []
SEARCH = "attributes.run_name LIKE '%mlp-%'"  # the local MLP cells and the published MLP references
RUN_NAME, SAMPLES, LABEL, BACKEND = (
    "attributes.`Run Name`",
    "metrics.`samples_per_s`",
    "tags.`hw.label`",
    "tags.`trainbench.backend`",
)
TIMEOUT_MS = 30_000


def browser_or_skip() -> Any:
    """Playwright's sync API; skip (fail under CI, which installs both) when it or Chromium is missing."""
    missing = []
    try:
        from playwright import sync_api
    except ImportError:
        sync_api = None
        missing.append("the Python package playwright (pip install -r requirements.txt)")
    if not CHROMIUM.is_file():
        missing.append(f"Chromium at {CHROMIUM} (apt-get install chromium, or set TRAINBENCH_CHROMIUM)")
    if missing:
        reason = "the UI test needs " + " and ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(reason + "; .ci/run installs both")
        pytest.skip(reason)
    return sync_api


def build_store(folder: Path) -> str:
    """A real two-cell sweep (cpu finishes; gpu finishes or is `unavailable`) and the published references."""
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    env = child_env({"MLFLOW_TRACKING_URI": uri})
    sweep = subprocess.run(
        [sys.executable, str(RUN_PY), *SWEEP], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )
    assert sweep.returncode in (0, 1), sweep.stderr[-2000:]  # 1: no GPU here, the gpu cell is `unavailable`
    import_references(folder, uri)
    return uri


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    return build_store(tmp_path_factory.mktemp("ui-store"))


def open_browser(sync_api: Any, playwright: Any, profile: Path) -> Any:
    context = playwright.chromium.launch_persistent_context(
        str(profile),
        executable_path=str(CHROMIUM),
        headless=True,
        args=CHROMIUM_FLAGS,
        viewport={"width": 1440, "height": 900},
    )
    context.set_default_timeout(TIMEOUT_MS)
    sync_api.expect.set_options(timeout=TIMEOUT_MS)
    return context


@contextlib.contextmanager
def browser_page(sync_api: Any, playwright: Any, tmp_path: Path) -> Iterator[Any]:
    """A page in a fresh Chromium profile; a test that fails leaves a screenshot of where it was (failure.png)."""
    context = open_browser(sync_api, playwright, tmp_path / "chromium-profile")
    page = context.new_page()
    try:
        yield page
    except BaseException:
        with contextlib.suppress(Exception):
            page.screenshot(path=str(tmp_path / "failure.png"))
            print(f"screenshot of the page at the failure: {tmp_path / 'failure.png'}")
        raise
    finally:
        context.close()


def keep_shots(tmp_path: Path, *names: str) -> None:
    """With TRAINBENCH_UI_SHOTS=DIR, the test's screenshots go to DIR too (how docs/screenshots/ is made)."""
    if os.environ.get("TRAINBENCH_UI_SHOTS"):
        target = Path(os.environ["TRAINBENCH_UI_SHOTS"])
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copyfile(tmp_path / name, target / name)


def test_the_printed_url_lands_on_the_comparison(store, tmp_path) -> None:
    """No clicks: the runs table, filtered to the compared runs, fastest first, hw.label and samples_per_s in view."""
    sync_api = browser_or_skip()
    expect = sync_api.expect
    runs = runs_in(store)
    compared = [
        r
        for r in runs
        if r.data.tags.get("trainbench.kind") in ("cell", "reference")
        and r.data.tags.get("trainbench.outcome") == "finished"
    ]
    fastest = max(compared, key=lambda r: r.data.metrics.get("samples_per_s", 0))
    with mlflow_server(tmp_path / "server", store=store) as server, sync_api.sync_playwright() as playwright:
        url = ui_url(store, runs[0].info.experiment_id, ui_base=server)
        with browser_page(sync_api, playwright, tmp_path) as page:
            page.goto(url)
            expect(page.get_by_text(f"{len(compared)} matching runs")).to_be_visible()
            close_assistant(page)
            for column in (LABEL, SAMPLES):
                expect(page.locator(f'.ag-header-cell[col-id="{column}"]')).to_be_in_viewport(ratio=1)
            first = page.locator(f'[role=row][row-id="{fastest.info.run_id}"]')
            expect(first.locator(f'[col-id="{LABEL}"]')).to_have_text(fastest.data.tags["hw.label"])
            expect(first.locator(f'[col-id="{LABEL}"]')).to_be_in_viewport(ratio=1)
            shown = first.locator(f'[col-id="{SAMPLES}"]')
            expect(shown).to_be_in_viewport(ratio=1)
            assert float(shown.inner_text().replace(",", "")) == pytest.approx(
                fastest.data.metrics["samples_per_s"], rel=1e-3
            )
            page.screenshot(path=str(tmp_path / "landing.png"))
    keep_shots(tmp_path, "landing.png")


def test_runs_columns_and_compare_view_as_a_person_sees_them(store, tmp_path) -> None:
    sync_api = browser_or_skip()
    expect = sync_api.expect

    uri = store
    runs = runs_in(uri)
    by_kind: dict[str, list[Any]] = {}
    for run in runs:
        by_kind.setdefault(run.data.tags.get("trainbench.kind"), []).append(run)
    (sweep,) = by_kind["sweep"]
    cells = {run.info.run_name: run for run in by_kind["cell"]}
    assert set(cells) == {"pytorch-mlp-cpu-bs64", "pytorch-mlp-gpu-bs64"}
    local = cells["pytorch-mlp-cpu-bs64"]
    references = [r for r in by_kind["reference"] if "mlp-" in r.info.run_name and "samples_per_s" in r.data.metrics]
    labels = {r.data.tags["hw.label"] for r in references}
    assert len(labels) >= 2, "references/published-results.csv should hold MLP figures of two machines"
    # two references on different hardware, fastest first
    shown = sorted(
        {r.data.tags["hw.label"]: r for r in references}.values(), key=lambda r: -r.data.metrics["samples_per_s"]
    )[:2]
    compared = [local, *shown]

    with (
        mlflow_server(tmp_path / "server", store=uri) as server,
        sync_api.sync_playwright() as playwright,
        browser_page(sync_api, playwright, tmp_path) as page,
    ):
        check_views(page, expect, server, tmp_path, runs, sweep, cells, compared)

    for name in ("runs-table.png", "compare-view.png", "run-page.png"):
        assert (tmp_path / name).stat().st_size > 10_000
    keep_shots(tmp_path, "runs-table.png", "compare-view.png", "run-page.png")


def check_views(
    page: Any,
    expect: Any,
    server: str,
    tmp_path: Path,
    runs: list[Any],
    sweep: Any,
    cells: dict[str, Any],
    compared: list[Any],
) -> None:
    experiment = sweep.info.experiment_id

    def cell(run: Any, column: str) -> Any:
        """The table cell a person reads for `run` in `column`."""
        return page.locator(f'[role=row][row-id="{run.info.run_id}"] [col-id="{column}"]')

    # The experiment's runs table lists every run of the store.
    page.goto(f"{server}/#/experiments/{experiment}/runs")
    expect(page.get_by_text(f"{len(runs)} matching runs")).to_be_visible()
    close_assistant(page)

    # Narrow it down as a person would, with the search box; the cells sit under their collapsed sweep.
    search = page.get_by_test_id("search-box")
    search.fill(SEARCH)
    search.press("Enter")
    expect(cell(sweep, RUN_NAME).get_by_role("link")).to_have_text(sweep.info.run_name)
    cell(sweep, RUN_NAME).get_by_role("button").first.click()  # the [+] that expands the sweep's children
    for run in [*cells.values(), *compared[1:]]:
        link = cell(run, RUN_NAME).get_by_role("link")
        expect(link).to_have_text(run.info.run_name)
        expect(link).to_be_visible()

    # Show samples_per_s, hw.label and trainbench.backend with the column selector (and drop empty columns).
    page.get_by_role("button", name="Columns", exact=True).click()
    columns = page.get_by_placeholder("Search columns")
    for title in ("samples_per_s", "hw.label", "trainbench.backend", "Dataset", "Source", "Models"):
        columns.fill(title)
        exact = page.locator(".du-bois-light-tree-title").filter(has_text=re.compile(f"^{re.escape(title)}$"))
        page.locator("[data-testid=column-selector-tree] .du-bois-light-tree-treenode").filter(has=exact).locator(
            ".du-bois-light-tree-checkbox"
        ).click()
    page.keyboard.press("Escape")
    for column in (RUN_NAME, SAMPLES, BACKEND, LABEL):  # fit the columns to their text, as a person would
        page.locator(f'.ag-header-cell[col-id="{column}"] .ag-header-cell-resize').dblclick()
    for run in compared:
        expect(cell(run, LABEL)).to_have_text(run.data.tags["hw.label"])
        expect(cell(run, LABEL)).to_be_visible()
        expect(cell(run, BACKEND)).to_have_text(run.data.tags["trainbench.backend"])
        shown = cell(run, SAMPLES)
        expect(shown).to_be_visible()
        expect(shown).to_have_text(re.compile(r"^\d[\d.,]*$"))
        assert float(shown.inner_text().replace(",", "")) == pytest.approx(run.data.metrics["samples_per_s"], rel=1e-3)
    # the gpu cell, when it was `unavailable`, has no throughput and says so with a dash
    gpu = cells["pytorch-mlp-gpu-bs64"]
    if "samples_per_s" not in gpu.data.metrics:
        expect(cell(gpu, SAMPLES)).to_have_text("-")
    page.screenshot(path=str(tmp_path / "runs-table.png"))

    # Select the local cell and two references, then Compare: one column per run, a row per param/metric/tag.
    for run in compared:
        page.locator(f'[role=row][row-id="{run.info.run_id}"] input.ag-checkbox-input').click()
    page.get_by_test_id("runs-compare-button").click()
    page.wait_for_url(re.compile(r"#/compare-runs\?runs="))
    expect(page.get_by_role("heading", name=f"Comparing {len(compared)} Runs from 1 Experiment")).to_be_visible()
    page.set_viewport_size({"width": 1440, "height": 1500})
    for section in ("Visualizations", "Parameters", "Artifacts"):  # fold away what is not compared here
        page.get_by_role("button", name=section, exact=True).click()
    page.get_by_role("switch", name="Tags - Show diff only").click()
    names = row(page, "Run Name:")
    expect(names.get_by_role("cell")).to_have_text([run.info.run_name for run in compared])
    expect(names).to_be_visible()
    expect(page.get_by_role("link", name="samples_per_s", exact=True)).to_be_visible()  # a row of Metrics
    labels = row(page, "hw.label")
    labels.scroll_into_view_if_needed()
    expect(labels.get_by_role("cell")).to_have_text([run.data.tags["hw.label"] for run in compared])
    expect(labels).to_be_visible()
    page.screenshot(path=str(tmp_path / "compare-view.png"))

    # A cell's own page leads with its description: its figure as the sweep quoted it, and its setting in words.
    local = compared[0]
    page.goto(f"{server}/#/experiments/{experiment}/runs/{local.info.run_id}")
    figure = f"{number(local.data.metrics['samples_per_s'])} samples/s"
    headline = page.get_by_text(figure, exact=True)  # bold, first in the description
    expect(headline).to_be_visible()
    description = headline.locator("xpath=..")
    expect(description).to_contain_text(f"{figure} (1 repeat) · finished")
    expect(description).to_contain_text(local.data.tags["trainbench.setting_name"])
    expect(description).to_contain_text(local.data.tags["hw.label"])
    page.screenshot(path=str(tmp_path / "run-page.png"))


def row(page: Any, header: str) -> Any:
    """The compare view's table row whose header reads `header`."""
    return page.get_by_role("row").filter(has=page.get_by_role("rowheader", name=header, exact=True))


def close_assistant(page: Any) -> None:
    """MLflow 3 opens its chat assistant beside every page; a person closes it to see the table."""
    close = page.locator('[data-component-id="mlflow.assistant.chat_panel.close"]')
    try:
        close.click(timeout=5_000)
    except Exception as error:  # not there (another MLflow release, or already closed): nothing to do
        if type(error).__name__ != "TimeoutError":
            raise


def test_the_side_by_side_link_compares_two_machines_in_mlflow(tmp_path) -> None:
    """A sweep whose setting the contributed H100 file also ran prints a link; in Chromium it opens MLflow's
    compare-runs page with this machine's run and the H100's, one column each, their hw.label and setting name."""
    sync_api = browser_or_skip()
    expect = sync_api.expect
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = child_env({"MLFLOW_TRACKING_URI": uri, "TRAINBENCH_SHARED_RUNS": "on"})
    sweep = subprocess.run(
        [sys.executable, str(RUN_PY), "model=mlp", "device=cpu", *SHARED_SETTING],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    links = re.findall(r"^Side by side in MLflow: (.+): (http\S+)$", sweep.stdout, re.MULTILINE)
    assert links, sweep.stdout[-3000:]
    name, url = links[0]
    runs = {r.info.run_id: r for e in ("trainbench", "trainbench-shared") for r in runs_in(uri, e)}
    assert runs_in(uri, "trainbench-shared"), "the published and contributed runs are in the store"
    assert shared_runs.up_to_date(tracking.open_store(uri)), "the next sweep imports nothing again"
    with (
        mlflow_server(tmp_path / "server", store=uri) as server,
        sync_api.sync_playwright() as playwright,
        browser_page(sync_api, playwright, tmp_path) as page,
    ):
        page.goto(url.replace(LOCAL_UI, server))
        shown = [runs[i] for i in json.loads(unquote(url.split("runs=")[1].split("&")[0]))]
        labels = {r.data.tags["hw.label"] for r in shown}
        assert len(labels) >= 2
        expect(page.get_by_role("heading", name=re.compile(rf"Comparing {len(shown)} Runs from"))).to_be_visible()
        close_assistant(page)
        page.set_viewport_size({"width": 1440, "height": 1500})
        for section in ("Visualizations", "Parameters", "Artifacts"):  # fold away what is not compared here
            page.get_by_role("button", name=section, exact=True).click()
        names = row(page, "Run Name:")
        expect(names.get_by_role("cell")).to_have_text([r.info.run_name for r in shown])
        hw = row(page, "hw.label")
        hw.scroll_into_view_if_needed()
        expect(hw.get_by_role("cell")).to_have_text([r.data.tags["hw.label"] for r in shown])
        setting = row(page, "trainbench.setting_name")
        expect(setting.get_by_role("cell")).to_have_text([name] * len(shown))
        hw.scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / "side-by-side.png"))
    keep_shots(tmp_path, "side-by-side.png")
