"""A store error that spans several lines (SQLAlchemy's: the error, then `[SQL: ...]`, `[parameters: ...]` and a
link) is reported as its first line, at most 200 characters: one line of the terminal, as every expected outcome."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy

from trainbench.store import tracking
from trainbench.sweep import cell_run


def sql_error(folder: Path) -> sqlalchemy.exc.OperationalError:
    """A real one: SQLite refusing a statement on a real file."""
    engine = sqlalchemy.create_engine(f"sqlite:///{folder / 'store.db'}")
    with engine.connect() as connection, pytest.raises(sqlalchemy.exc.OperationalError) as raised:
        connection.execute(sqlalchemy.text("insert into metrics values (:value)"), {"value": "x" * 500})
    engine.dispose()
    return raised.value


def test_a_multi_line_sql_error_prints_one_line(tmp_path, capsys) -> None:
    error = sql_error(tmp_path)
    assert len(str(error).splitlines()) > 1  # what MLflow's SQL store passes on

    def failing_write() -> None:
        raise error

    cell_run._attempt(failing_write)  # a store write on the way out: reported, never raised
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("trainbench: could not write to the tracking store: (sqlite3.OperationalError) no such"), (
        line
    )
    assert "[SQL:" not in line and "xxxx" not in line


def test_a_long_first_line_is_cut_at_200_characters() -> None:
    assert tracking.private_line(RuntimeError("y" * 500 + "\nsecond")) == "y" * 200
    assert tracking.private_line(RuntimeError("")) == "RuntimeError"
