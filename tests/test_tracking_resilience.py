"""The tracking store under stress (issue 10): a server that blinks mid-sweep, and sweeps that all start at
the same instant on a fresh store. Real sweeps through the real entry point, real `mlflow server`
processes (tests/servers.py), a real SIGKILL; nothing of MLflow is mocked."""

from __future__ import annotations

import re
import sqlite3
import time
from collections import Counter
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from conftest import runs_in, start_multirun
from servers import BusyProxy, MlflowServer

pytestmark = pytest.mark.slow

# Six short epochs: the server dies after the first one and the cell carries on once it is back.
BLINK_CELL = [
    "device=cpu",
    "data.num_samples=512",
    "data.num_val_samples=16",
    "batch_size=64",
    "task.epochs=6",
    "tracking.system_metrics_interval_s=0",
    "sweep.heartbeat_s=1",
]
# A cell as small as a training cell gets. It logs one point of each of these 18 metrics (6 per epoch, one
# epoch; compile_time_s needs a second one); a sweep's run logs 3 (cells, cells_finished, sweep_time_s).
# 4 sweeps x 3 cells: 12 x 18 = 216 points in the cells' runs, 12 in the sweeps'.
SMALL_CELL = [
    "device=cpu",
    "model.hidden_sizes=[32]",
    "data.image_size=8",
    "data.num_samples=64",
    "data.num_val_samples=16",
    "task.epochs=1",
    "tracking.system_metrics_interval_s=0",
]
SMALL_CELL_METRICS = Counter(
    ["epoch_time_s", "epoch_samples_per_s", "train_loss", "train_accuracy", "val_loss", "val_accuracy"]
    + ["samples_per_s", "total_time_s", "first_epoch_time_s", "num_parameters", "num_devices", "flops_per_sample"]
    + ["achieved_tflops", "device_peak_tflops", "mfu", "peak_host_memory_mb", "host_load_1m_start", "host_load_1m_end"]
)
SWEEP_RUN_METRICS = Counter(["cells", "cells_finished", "sweep_time_s"])


def points_per_key(client: MlflowClient, run) -> Counter[str]:
    """How many points each metric of `run` has in the store (its whole history, not the latest value)."""
    return Counter({key: len(client.get_metric_history(run.info.run_id, key)) for key in run.data.metrics})


def kind(runs: list, which: str) -> list:
    return [r for r in runs if r.data.tags.get("trainbench.kind") == which]


def stored_points(database: Path, key: str) -> int:
    """Points of `key` in a server's SQLite file, read directly (no HTTP, so it works while the server is down)."""
    if not database.exists():
        return 0
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10) as connection:
        try:
            return connection.execute("select count(*) from metrics where key = ?", (key,)).fetchone()[0]
        except sqlite3.OperationalError:  # the schema is not there yet
            return 0


def test_a_server_down_beyond_mlflows_retries_mid_sweep_costs_no_metric_point_and_no_cell(tmp_path) -> None:
    """A restart, a deploy, a reboot: longer than any HTTP retry budget. The sweep waits for the server up to
    tracking.outage_s (300 s by default), then sends what it kept. MLflow retries nothing here, so all of the
    outage is trainbench's to ride out, whatever MLflow's retry settings (its own budget was about a minute,
    trainbench's default is two quick retries): the outage need not outlast them."""
    control_uri = f"sqlite:///{tmp_path / 'control.db'}"
    with MlflowServer(tmp_path / "server") as server:
        no_retries = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
        # Two cells: the first ends its epochs while the server is down, the second starts once it is back.
        running = start_multirun(server.uri, tmp_path / "blink", "seed=0,1", *BLINK_CELL, env=no_retries)
        deadline = time.monotonic() + 300
        while stored_points(server.folder / "mlflow.db", "epoch_time_s") < 1:  # cell 1 is in its epochs
            assert running.poll() is None and time.monotonic() < deadline, running.communicate()[1][-3000:]
            time.sleep(0.2)
        down_at = time.time()  # before the kill: the sweep may see the server gone before stop() returns
        server.stop(kill=True)  # SIGKILL: a crash, no shutdown handler runs
        # The control: the same cell on a local store, run while the sweep waits for the server.
        control = start_multirun(control_uri, tmp_path / "control", *BLINK_CELL)
        # Down until the control has run the same cell (so cell 1 ends its epochs in the dark and the sweep waits
        # to start cell 2), and at least 30 s (six of OutageWatch's polls) whatever the machine's speed.
        control.communicate(timeout=600)
        time.sleep(max(0.0, down_at + 30 - time.time()))
        server.start()  # same port, same store; returns once /health answers
        back_at = time.time()
        out, err = running.communicate(timeout=600)

        assert control.returncode == 0
        (control_cell,) = kind(runs_in(control_uri), "cell")
        expected = points_per_key(MlflowClient(control_uri), control_cell)
        assert expected["epoch_time_s"] == 6

        assert 30 <= back_at - down_at <= 180  # the control's time on a busy machine, and the restart's
        assert running.returncode == 0, err[-3000:]
        client = MlflowClient(server.uri)
        runs = runs_in(server.uri)
        cells, (parent,) = kind(runs, "cell"), kind(runs, "sweep")
        assert sorted(c.data.tags["trainbench.outcome"] for c in cells) == ["finished"] * 2
        assert not [r for r in runs if r.info.status == "RUNNING"]
        for cell in cells:  # every point the control stored, once: nothing lost, nothing logged twice
            assert points_per_key(client, cell) == expected, cell.info.run_name
        # The owner's heartbeat thread lived through the outage, and its last writes reached the server.
        assert float(parent.data.tags["trainbench.heartbeat"]) >= back_at - 1
        assert parent.info.status == "FINISHED" and parent.data.metrics["cells_finished"] == 2
        assert "summary.txt" in {a.path for a in client.list_artifacts(parent.info.run_id)}
        assert out.count("finished") >= 2
        # One line when the outage begins, saying what the server did in words, and one when it ends
        # refused, or aborted where the kill caught a request under way
        said = r"trainbench: the tracking server does not answer \(connection (refused|aborted)\): waiting for it up to 300 s"
        assert re.search(said, err), err[-3000:]
        assert re.search(r"trainbench: the tracking server answers again after \d+ s", err), err[-3000:]


@pytest.mark.parametrize("store", ["sqlite", "mlflow_server_postgres"])
def test_four_sweeps_started_at_once_on_a_fresh_store_all_succeed_with_every_point(store, request, tmp_path) -> None:
    uri = f"sqlite:///{tmp_path / 'fresh.db'}" if store == "sqlite" else request.getfixturevalue(store).uri
    # A machine's very first sweeps: no empty store cached yet either (trainbench.store.store_template), so they race
    # to make it as well as the store.
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    sweeps = [
        start_multirun(uri, tmp_path / f"sweep{i}", "seed=0,1", *SMALL_CELL, fresh=True, env=cache) for i in range(4)
    ]
    finished = [s.communicate(timeout=900) for s in sweeps]

    errors = "\n".join(err[-2000:] for _, err in finished)
    assert [s.returncode for s in sweeps] == [0] * 4, errors
    if store == "sqlite":  # made once, by one of them; each of the others copied it
        assert sum(err.count("creating MLflow's empty store schema once") for _, err in finished) == 1, errors
        assert len(list((tmp_path / "cache" / "trainbench").glob("mlflow-schema-*.db"))) == 1
    assert "database is locked" not in errors and "Traceback" not in errors
    client = MlflowClient(uri)
    runs = runs_in(uri)
    cells, parents = kind(runs, "cell"), kind(runs, "sweep")
    assert (len(runs), len(cells), len(parents)) == (12, 8, 4)
    assert {r.info.status for r in runs} == {"FINISHED"}
    for run in cells:  # every point of every metric, once: none lost to a lock, none logged twice
        assert points_per_key(client, run) == SMALL_CELL_METRICS, run.info.run_name
    for run in parents:
        assert points_per_key(client, run) == SWEEP_RUN_METRICS, run.info.run_name
    assert sum(sum(points_per_key(client, c).values()) for c in cells) == 8 * sum(SMALL_CELL_METRICS.values())
    assert len({c.data.tags["mlflow.parentRunId"] for c in cells}) == 4


def test_a_server_gone_for_good_ends_the_sweep_once_tracking_outage_s_has_passed(tmp_path) -> None:
    with MlflowServer(tmp_path / "server") as server:
        # No MLflow retries: once the bound is spent, each of the sweep's last writes fails at once.
        running = start_multirun(
            server.uri,
            tmp_path / "gone",
            "seed=0,1",
            *BLINK_CELL,
            "tracking.outage_s=15",
            env={"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"},
        )
        deadline = time.monotonic() + 300
        while stored_points(server.folder / "mlflow.db", "epoch_time_s") < 1:
            assert running.poll() is None and time.monotonic() < deadline, running.communicate()[1][-3000:]
            time.sleep(0.2)
        down_at = time.monotonic()  # before the kill: the sweep's clock may start before stop() returns
        server.stop(kill=True)  # and it never comes back
        out, err = running.communicate(timeout=900)
        gave_up_after_s = time.monotonic() - down_at

    # The bound, then every later write tries once: the rest of the sweep takes seconds, not a bound per write.
    assert 15 <= gave_up_after_s <= 90, f"{gave_up_after_s:.0f} s\n{err[-3000:]}"
    assert running.returncode == 1
    row = next(line for line in out.splitlines() if line.startswith("pytorch-mlp-cpu-bs64 seed=0"))
    assert "failed" in row and "stopped: the tracking server" in row and "(tracking.outage_s)" in row
    assert "waiting for it up to 15 s (tracking.outage_s)" in err and "has not answered for" in err
    assert "Traceback" not in err


def test_a_server_answering_429_then_503_beyond_mlflows_retries_costs_no_metric_point_and_no_cell(tmp_path) -> None:
    """A rate limiter, then a gateway that lost its backend, for 14 s: longer than MLflow's own retries (two, a few
    seconds in all, Retry-After honoured), so it is trainbench's waiting that carries the sweep through: the end
    of the first cell and the start of the second."""
    with MlflowServer(tmp_path / "server") as server, BusyProxy(server.uri) as proxy:
        running = start_multirun(proxy.uri, tmp_path / "busy", "seed=0,1", *SMALL_CELL)
        deadline = time.monotonic() + 300
        while stored_points(server.folder / "mlflow.db", "epoch_time_s") < 1:  # the first cell is in its epoch
            assert running.poll() is None and time.monotonic() < deadline, running.communicate()[1][-3000:]
            time.sleep(0.1)
        proxy.busy(14)
        out, err = running.communicate(timeout=600)

        assert running.returncode == 0, err[-3000:]
        assert "Traceback" not in err, err[-3000:]
        client = MlflowClient(server.uri)
        runs = runs_in(server.uri)
        cells, (parent,) = kind(runs, "cell"), kind(runs, "sweep")
        assert sorted(c.data.tags["trainbench.outcome"] for c in cells) == ["finished"] * 2
        assert not [r for r in runs if r.info.status == "RUNNING"]
        for cell in cells:  # every point, once
            assert points_per_key(client, cell) == SMALL_CELL_METRICS, cell.info.run_name
        assert points_per_key(client, parent) == SWEEP_RUN_METRICS
    waited = [line for line in err.splitlines() if "(tracking.outage_s)" in line]
    assert len(waited) == 1, err[-3000:]
    assert "the tracking store is busy (HTTP 429 Too Many Requests, after MLflow's retries)" in waited[0], waited
    assert len([line for line in err.splitlines() if "answers again" in line]) == 1, err[-3000:]
