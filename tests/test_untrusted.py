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
