"""Text from outside is data: secrets masked by one rule set, control characters never reach a terminal, the
home folder masked only as a whole path prefix. Each rule is tested both ways: masked where it should be, and a
harmless look-alike left alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from trainbench.store import tracking
from trainbench.store.sharing.scrubbing import scrub
from trainbench.untrusted import for_terminal, redact, redact_value, shown

# (secret text, as masked); every masked form must also be what export's scrub and the store's private() give
SECRETS = [
    ("http://alice:pw@host:5000/api", "http://alice:***@host:5000/api"),
    ("postgresql://bob:s3cret@db.team/mlflow", "postgresql://bob:***@db.team/mlflow"),
    ("https://h/x?token=abc123&n=1&password=hunter2", "https://h/x?token=***&n=1&password=***"),
    ("s3://b/k?X-Amz-Signature=ff00&api_key=k1", "s3://b/k?X-Amz-Signature=ff00&api_key=***"),
    ("MLFLOW_TRACKING_PASSWORD=hunter2", "MLFLOW_TRACKING_PASSWORD=***"),
    ("env GITHUB_TOKEN=ghp_abc python x.py", "env GITHUB_TOKEN=*** python x.py"),
    ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG", "aws_secret_access_key=***"),
    ("DB_SECRET=x1, next", "DB_SECRET=***, next"),
    ("key id AKIAIOSFODNN7EXAMPLE here", "key id *** here"),
    ("ASIAY34FZKBOKMUTVV7A", "***"),
]
LOOK_ALIKES = [
    "http://alice@host:5000/api",  # a user, no password
    "https://host/x?n=1&tokens=512&keyboard=us",
    "KEYBOARD=us MONKEY=1 tokens=512 max_tokens=128 password_length=12",
    "AKIAIOSFODNN7EXAMPLEX THISISTWENTYLETTERSX akiaiosfodnn7example",
    "sqlite:///mlflow.db model.width=1024 full_key: model.x",
    "the secret is out; a key decision",
]


@pytest.mark.parametrize(("secret", "masked"), SECRETS)
def test_each_secret_is_masked_on_every_path_out(secret: str, masked: str) -> None:
    assert redact(secret) == masked
    assert tracking.private(secret) == masked  # what a cell records, and most lines printed
    assert scrub(secret) == masked  # what export writes
    assert shown(secret) == masked  # what a screen shows


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_a_harmless_look_alike_is_left_alone(text: str) -> None:
    assert redact(text) == text and shown(text) == text


def test_a_value_named_as_a_secret_is_masked_whole() -> None:
    assert redact_value("MLFLOW_TRACKING_PASSWORD", "hunter2") == "***"
    assert redact_value("cloud.secret_key", "abc") == "***"
    assert redact_value("model.width", "1024") == "1024"
    assert redact_value("tokenizer", "bert-base") == "bert-base"


def test_control_characters_are_spelled_out_not_sent() -> None:
    hostile = "run\x1b]0;owned\x07\x1b[2J\x9b31m\u202egnp.exe\r"
    assert for_terminal(hostile) == "run\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\u202egnp.exe\\x0d"
    assert for_terminal("a\nb\x1b", keep_newlines=True) == "a\nb\\x1b"
    assert for_terminal("ünïcode, 1,234 samples/s — fine") == "ünïcode, 1,234 samples/s — fine"
    # what a process prints keeps a progress bar's carriage return, never an escape
    from trainbench.untrusted import for_stream

    assert for_stream("epochs:  10%|#\r\x1b]0;owned\x07\tx\n") == "epochs:  10%|#\r\\x1b]0;owned\\x07\tx\n"


def test_the_home_folder_is_masked_only_as_a_whole_path_prefix(tmp_path) -> None:
    code = (
        "from trainbench.store import tracking;"
        "print(tracking.private('data.root=/root/cifar /rootpath/rootcifar /srv/root/x sqlite:////root/m.db /root'))"
    )
    env = {**os.environ, "HOME": "/root", "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "data.root=~/cifar /rootpath/rootcifar /srv/root/x sqlite:///~/m.db ~"


def test_export_writes_only_a_regular_file_and_leaves_devices_fifos_and_links_alone(tmp_path, capsys) -> None:
    from trainbench.store.sharing import commands

    fifo, target, link = tmp_path / "fifo", tmp_path / "precious.txt", tmp_path / "link.json"
    os.mkfifo(fifo)
    target.write_text("keep me")
    link.symlink_to(target)
    for out, said in (("/dev/full", "a device, FIFO or socket"), (fifo, "a device, FIFO or socket"), (link, "link")):
        code = commands.export_main(["--uri", f"sqlite:///{tmp_path / 'none.db'}", "-o", str(out)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and said in err[0] and "name a new file" in err[0], err
    assert Path("/dev/full").is_char_device() and fifo.is_fifo() and link.is_symlink()
    assert target.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == [
        "fifo",
        "link.json",
        "precious.txt",
    ]


def test_import_refuses_an_experiment_named_as_a_path(tmp_path, capsys) -> None:
    from trainbench.store.sharing import commands

    store = tmp_path / "store" / "mlflow.db"
    code = commands.import_main(["--uri", f"sqlite:///{store}", "--experiment", "../../X", "nothing.json"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "must be a name, not a path" in err[0], err
    assert not store.parent.exists() and not (tmp_path / "X").exists()


def test_an_imported_runs_description_is_shown_as_written_with_nothing_live(tmp_path, capsys) -> None:
    """MLflow's UI renders a run's description (mlflow.note.content) as Markdown at the top of its page: an
    imported one arrives as a code block, its markup, links and escapes text; importing its export again keeps it
    as it is."""
    import json

    from mlflow.tracking import MlflowClient

    from trainbench.store.sharing import commands

    hostile = (
        "**fast** <img src=y onerror=alert(1)> [click](javascript:alert(2))\n```\n<svg/onload=alert(3)>\x1b]0;x\x07"
    )
    record = {"run_id": "a" * 32, "run_name": "forged", "status": "FINISHED", "start_time": 1, "end_time": 2,
              "parent_run_id": None, "params": {}, "tags": {"mlflow.note.content": hostile, "trainbench.kind": "cell"},
              "metrics": {"train_loss": [[0, 1, 1.0]]}, "artifacts": {}}  # fmt: skip
    document = {"format": "trainbench-export", "version": 1, "exported_at": "now", "experiment": "x", "runs": [record]}
    (tmp_path / "forged.json").write_text(json.dumps(document))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert commands.import_main(["--uri", uri, str(tmp_path / "forged.json")]) == 0, capsys.readouterr().err
    (run,) = MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name("trainbench").experiment_id])
    note = run.data.tags["mlflow.note.content"]
    assert note.startswith("```\n") and note.endswith("\n```") and "`" not in note[4:-4], note
    assert "<img src=y onerror=alert(1)>" in note and "\x1b" not in note and "\\x1b]0;x\\x07" in note, note
    assert commands.export_main(["--uri", uri, "-o", str(tmp_path / "again.json")]) == 0, capsys.readouterr().err
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["runs"][0]["tags"]["mlflow.note.content"] == note
    from trainbench.store.sharing.importing import read_export

    (read,) = read_export(tmp_path / "again.json").runs
    assert read.data.tags["mlflow.note.content"] == note  # a code block already: not wrapped again


# ----------------------------------------------------------------- what reaches the terminal, from any path

HOSTILE = "evil\x1b]8;;javascript:alert(1)\x1b\\click\x1b]8;;\x1b\\\x1b]0;owned\x07\x1b[2J\u202e\u2028"
LIVE = ("\x1b", "\x07", "\u202e", "\u2028")


def _said(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout + done.stderr


def test_an_override_and_a_shared_files_run_name_reach_the_terminal_with_every_escape_spelled_out(tmp_path) -> None:
    """Hydra's parse error quotes an override's value, an import's refusal a file's run name: each is one line with
    its escapes as text (\\x1b), never a window title, a link, a cleared screen, nor a carriage return drawing
    another message over it (2026-11-29: all were raw)."""
    import json

    from conftest import child_env

    run_py = str(ROOT / "src" / "run.py")
    override = subprocess.run([sys.executable, run_py, f"batch_size={HOSTILE}", "device=cpu"], cwd=tmp_path,
                              env=child_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    spoof = "\rtrainbench: all runs imported OK" + "\n" * 50  # over the refusal, then off the screen
    record = {"run_id": "b" * 32, "run_name": HOSTILE + spoof, "status": "BOGUS", "start_time": 1, "end_time": 2,
              "parent_run_id": None, "params": {}, "tags": {}, "metrics": {}, "artifacts": {}}  # fmt: skip
    document = {"format": "trainbench-export", "version": 1, "exported_at": "now", "experiment": "x", "runs": [record]}
    (tmp_path / "shared.json").write_text(json.dumps(document))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    imported = subprocess.run([sys.executable, run_py, "import", "--uri", uri, "shared.json"], cwd=tmp_path,
                              env=child_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    for done in (override, imported):
        said = _said(done)
        assert done.returncode == 2 and len(said.strip().splitlines()) == 1, said
        assert not any(c in said for c in LIVE) and "\\x1b]0;owned\\x07" in said and "\\u202e" in said, said
    assert not (tmp_path / "mlflow.db").exists()


def test_no_setting_chooses_the_module_a_cell_imports(tmp_path) -> None:
    """framework.adapter (the module whose Adapter a cell runs) is the framework's own, framework.package (looked
    up as a module before the sweep) cannot be set, and a preset is one of conf/'s files, not a path: a module or
    YAML planted where the user stands never runs, and each override is one line, exit 2, nothing recorded."""
    from conftest import child_env
    from trainbench.locations import CONF_DIR

    (tmp_path / "pwnmod.py").write_text("open('RAN', 'w').write('planted code ran')\n")
    # A preset named by a path loads any YAML, and a YAML can have Hydra call a function
    (tmp_path / "planted.yaml").write_text(
        "# @package _global_\nhydra:\n  callbacks:\n    planted:\n      _target_: os.makedirs\n"
        f"      _args_: [{tmp_path / 'RAN'}]\n"
    )
    preset = os.path.relpath(tmp_path / "planted", CONF_DIR / "experiment")
    interpolated = "/".join("${oc.env:UNSET_HERE,..}" if part == ".." else part for part in preset.split("/"))
    launcher = os.path.relpath(tmp_path / "planted", CONF_DIR / "hydra" / "launcher")
    overrides = (
        "framework.adapter=pwnmod", "framework.package=pwnmod.x", f"+experiment={preset}",
        f"+experiment@_global_={preset}", f"+experiment={interpolated}", f"hydra/launcher={launcher}",
    )  # fmt: skip
    for override in overrides:
        done = subprocess.run(
            [sys.executable, str(ROOT / "src" / "run.py"), "model=mlp", "device=cpu", override],
            cwd=tmp_path,
            env=child_env({"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}),
            capture_output=True,
            text=True,
            timeout=300,
        )
        said = _said(done).strip().splitlines()
        key = override.split("=")[0].lstrip("+").split("@")[0]
        assert done.returncode == 2 and len(said) == 1 and key in said[0], said
    assert not (tmp_path / "RAN").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow
def test_a_cell_started_where_a_module_shadows_a_library_imports_the_library(tmp_path) -> None:
    """A cell's process is started with -P: a `numpy.py` in the folder the user runs from is never imported in
    place of NumPy (before, `python -m trainbench.cell.worker` put that folder first on the cell's import path),
    nor a `torch.py` (which only cells import) through an empty PYTHONPATH entry, which means that folder whatever
    -P says (`export PYTHONPATH=$PYTHONPATH:/x` with nothing before; the user's own process takes it as Python
    does, hence torch here)."""
    from conftest import TINY, child_env

    import_path = os.environ.get("PYTHONPATH", str(ROOT / "src"))
    for shadowed, path in (("numpy", import_path), ("torch", os.pathsep + import_path)):
        (tmp_path / f"{shadowed}.py").write_text(f"open('RAN', 'w').write('{shadowed}.py ran')\nraise SystemExit(3)\n")
        done = subprocess.run(
            [sys.executable, str(ROOT / "src" / "run.py"), "model=mlp", "device=cpu", *TINY],
            cwd=tmp_path,
            env=child_env({"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "PYTHONPATH": path}),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert not (tmp_path / "RAN").exists()
        (tmp_path / f"{shadowed}.py").unlink()


@pytest.mark.slow
def test_a_joblib_sweeps_workers_import_no_module_from_the_users_folder(tmp_path) -> None:
    """The launcher's own workers (loky's, importing NumPy and psutil before any cell) run no `numpy.py` or
    `psutil.py` from the folder the sweep starts in (before, both ran in every worker and killed it)."""
    from conftest import TINY, child_env, runs_in

    for shadowed in ("numpy", "psutil", "yaml"):
        (tmp_path / f"{shadowed}.py").write_text(f"open('RAN-{shadowed}', 'w').write('ran')\nraise SystemExit(3)\n")
    store = tmp_path / "mlflow.db"
    done = subprocess.run(
        [sys.executable, str(ROOT / "src" / "run.py"), "-m", "model=mlp", "device=cpu", *TINY, "batch_size=16,32",
         "hydra/launcher=joblib"],
        cwd=tmp_path, env=child_env({"MLFLOW_TRACKING_URI": f"sqlite:///{store}"}), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.glob("RAN-*")) == []
    cells = [r for r in runs_in(f"sqlite:///{store}") if r.data.tags.get("trainbench.kind") == "cell"]
    assert sorted(r.data.tags.get("trainbench.outcome") for r in cells) == ["finished", "finished"]


def test_an_export_reads_no_file_outside_the_stores_folder_whatever_a_run_says(tmp_path) -> None:
    """A store is data from whoever wrote it: a run whose artifact location names another folder of this machine,
    a bucket, or an artifact that is a link out of its run's folder, must not copy what the user can read there into
    the export they share (2026-11-29: artifact_uri=file:///.../secret put id_rsa into the file); the store's own
    mlruns/ may be a link to another disk."""
    import json
    import sqlite3

    from mlflow.tracking import MlflowClient

    from trainbench.store.sharing import commands
    from trainbench.store.sharing.file_format import LEFT_OUT_TAG

    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "id_rsa").write_text("PRIVATE KEY MATERIAL")
    store = tmp_path / "theirs"
    store.mkdir()
    (tmp_path / "bigger-disk").mkdir()
    (store / "mlruns").symlink_to(tmp_path / "bigger-disk")  # the store's own artifacts, on another disk
    uri = f"sqlite:///{store / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("trainbench", artifact_location=(store / "mlruns").as_uri())
    ids = []
    for name in ("moved", "linked", "bucket"):
        run = client.create_run(experiment, run_name=name, tags={"trainbench.kind": "cell"})
        (tmp_path / "overrides.txt").write_text("model=mlp")
        client.log_artifact(run.info.run_id, str(tmp_path / "overrides.txt"))
        client.set_terminated(run.info.run_id)
        ids.append(run.info.run_id)
    linked_folder = Path(client.get_run(ids[1]).info.artifact_uri.removeprefix("file://"))
    (linked_folder / "key").symlink_to(secret / "id_rsa")
    with sqlite3.connect(store / "mlflow.db") as db:
        db.execute("update runs set artifact_uri = ? where run_uuid = ?", (secret.as_uri(), ids[0]))
        db.execute("update runs set artifact_uri = ? where run_uuid = ?", ("s3://their-bucket/x", ids[2]))
    out = tmp_path / "export.json"
    assert commands.export_main(["--uri", uri, "-o", str(out)]) == 0
    assert "PRIVATE KEY" not in out.read_text()
    runs = {r["run_name"]: r for r in json.loads(out.read_text())["runs"]}
    for refused in ("moved", "bucket"):  # a bucket would be read with the user's own cloud credentials
        assert runs[refused]["artifacts"] == {} and "outside the store" in runs[refused]["tags"][LEFT_OUT_TAG]
    assert list(runs["linked"]["artifacts"]) == ["overrides.txt"], runs["linked"]["artifacts"]
    assert "key (a link out of its run's folder)" in runs["linked"]["tags"][LEFT_OUT_TAG]


def test_a_shared_files_run_name_is_text_in_the_results_table_the_docs_site_publishes(tmp_path) -> None:
    """`trainbench results FILE` prints the markdown that results/*.md are pasted from and the docs site renders: a
    run name of `<img onerror=...>` or `[x](javascript:...)` in a colleague's file is text there, not a live tag
    or link (2026-11-29: the <img> reached the rendered page as it was)."""
    import json

    import markdown

    from conftest import child_env
    from test_conventions import one_cell_and_its_sweep

    document = one_cell_and_its_sweep(ROOT / "results" / "contributed" / "2026-11-26-nvidia-h100-80gb.json")
    hostile = '<img src=x onerror="alert(1)"> [click](javascript:alert(2)) `code`'
    document["runs"][-1]["run_name"] = hostile
    (tmp_path / "theirs.json").write_text(json.dumps(document))
    done = subprocess.run(
        [sys.executable, str(ROOT / "src" / "run.py"), "results", "theirs.json"], cwd=tmp_path,
        env=child_env({"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'none.db'}"}), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    page = markdown.markdown(done.stdout, extensions=["tables"])
    assert "<table>" in page and "alert(1)" in page and "click" in page, page  # the name is there, as text
    assert "<img" not in page and "<a " not in page and "<code>" not in page, page


def test_a_failed_runs_reason_is_text_on_its_mlflow_page() -> None:
    """A cell's failure reason can quote what the cell read (a data file's message, a folder's name); MLflow's UI
    renders the run's description as Markdown, so the reason there is text, never a tag or a link."""
    import markdown

    from trainbench.run_description import describe

    reason = '<img src=x onerror="alert(1)"> in [the data](javascript:alert(2))'
    page = markdown.markdown(describe({}, {}, {}, "failed", reason))
    assert "alert(1)" in page and "the data" in page, page
    assert "<img" not in page and "<a " not in page, page
    # masked before it is escaped: an escape's `&` does not end the secret early
    assert "r3tTAIL" not in describe({}, {}, {}, "failed", "refused: token=s3c<r3tTAIL")


@pytest.mark.slow
def test_trainbench_run_from_python_keeps_the_callers_folder_off_its_cells_import_path(tmp_path, monkeypatch) -> None:
    """trainbench.run() runs the sweep in the caller's process, never through the command line's start: its cells
    too import no `torch.py` from the folder through an empty PYTHONPATH entry, and the caller's environment is
    given back as it was."""
    import trainbench
    from conftest import TINY

    (tmp_path / "torch.py").write_text("open('RAN', 'w').write('torch.py ran')\nraise SystemExit(3)\n")
    callers = os.pathsep + os.environ.get("PYTHONPATH", str(ROOT / "src"))
    monkeypatch.setenv("PYTHONPATH", callers)
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    done = trainbench.run(
        ["model=mlp", "device=cpu", *TINY], tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", output="quiet",
        cwd=tmp_path,
    )  # fmt: skip
    assert [cell.outcome for cell in done.cells] == ["finished"], done.cells
    assert not (tmp_path / "RAN").exists()
    assert os.environ["PYTHONPATH"] == callers and "PYTHONSAFEPATH" not in os.environ
