"""A new local SQLite store begins as a copy of an empty one, instead of running MLflow's schema migrations.

MLflow creates a store's schema by running every one of its migrations on the new file (alembic), which takes
seconds to tens of seconds on a small machine: every user's first sweep would wait that long before its first
cell. The migrated, empty schema is instead made once per MLflow version and set of migrations, by MLflow's own
code, into the user's cache ($XDG_CACHE_HOME/trainbench, else ~/.cache/trainbench), and each new store is a copy
of it. MLflow accepts the copy as it would a store it made itself: the copy's alembic version is MLflow's head
and every table is there, so MLflow runs no migration; the default experiment (id 0) is left out of the template,
so MLflow creates it when it first opens the store, with the artifact location it would have given it.

Safe when several sweeps start at once: the template is written to a temporary file, synced and renamed into
place under a lock; a store is created by linking a finished copy to its name, which fails when the name exists,
so a store another process has just made is never written over. Anything unexpected (no cache folder, a damaged
template, another MLflow layout) falls back to MLflow's own creation.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import sqlite3
import sys
import tempfile
from pathlib import Path

SWITCH = "TRAINBENCH_STORE_TEMPLATE"  # `off`: new stores are made by MLflow's migrations (how the template is made)


def cache_folder() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trainbench"


def template_path() -> Path | None:
    """Where the empty store for the installed MLflow lives: named by MLflow's version and a hash of its migration
    files' names (so a changed head makes another template); None when MLflow's migrations cannot be found."""
    spec = importlib.util.find_spec("mlflow")  # finds the package without importing it (seconds)
    if spec is None or spec.origin is None:
        return None
    versions = Path(spec.origin).parent / "store" / "db_migrations" / "versions"
    try:
        migrations = sorted(p.name for p in versions.iterdir() if p.suffix == ".py")
        version = importlib.metadata.version("mlflow")
    except (OSError, importlib.metadata.PackageNotFoundError):
        return None
    if not migrations:
        return None
    heads = hashlib.sha256("\n".join(migrations).encode()).hexdigest()[:12]
    return cache_folder() / f"mlflow-schema-{version}-{heads}.db"


def create_from_template(database: Path) -> bool:
    """Make `database` (which must not exist) a copy of the empty migrated store; True when it did. False leaves
    the creation to MLflow: the file exists already, or no template could be had."""
    if os.environ.get(SWITCH, "").lower() == "off" or database.exists():
        return False
    template = template_path()
    if template is None:
        return False
    try:
        if not _usable(template):
            _make_template(template)
        if not _usable(template):
            return False
        return _copy_exclusively(template, database)
    except Exception:  # noqa: BLE001  (the cache is a shortcut: whatever fails there, MLflow makes the store itself)
        return False


def _usable(template: Path) -> bool:
    """Whether the template is a whole SQLite database with MLflow's schema version recorded."""
    if not template.is_file():
        return False
    try:
        connection = sqlite3.connect(f"file:{template}?mode=ro", uri=True)
        try:
            version = connection.execute("select version_num from alembic_version").fetchone()
            experiments = connection.execute("select count(*) from experiments").fetchone()
        finally:
            connection.close()
    except sqlite3.Error:
        return False
    return bool(version and version[0]) and experiments == (0,)


def _make_template(template: Path) -> None:
    """Create the template with MLflow's own code, once per machine and MLflow version, under a lock (a second
    process waits, then finds it made)."""
    from filelock import FileLock

    template.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(template) + ".lock", timeout=600):
        if _usable(template):
            return
        sys.stderr.write(
            "trainbench: creating MLflow's empty store schema once for this MLflow version (its migrations take "
            "a few seconds; later new stores are copies of it)\n"
        )
        with tempfile.TemporaryDirectory(dir=template.parent, prefix=".schema-") as folder:
            made = Path(folder) / "mlflow.db"
            _migrate(made, Path(folder))
            connection = sqlite3.connect(made)
            try:
                # MLflow creates the default experiment when it opens a store that lacks it, with its artifact
                # location under the folder it was started from: each store's own, not this temporary folder.
                with connection:
                    connection.execute("delete from experiments where experiment_id = 0")
                connection.execute("vacuum")
            finally:
                connection.close()
            _sync(made)
            os.replace(made, template)
            _sync_folder(template.parent)


def _migrate(database: Path, folder: Path) -> None:
    """An empty store at `database`, made by MLflow's store as it makes any new one (its artifact root `folder`:
    the default experiment, which points there, is dropped afterwards)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = SqlAlchemyStore(f"sqlite:///{database}", folder.as_uri())
    store.engine.dispose()


def _copy_exclusively(template: Path, database: Path) -> bool:
    """A whole copy of `template` appears at `database` at once, unless `database` exists by then."""
    handle, partial = tempfile.mkstemp(dir=database.parent, prefix=f".{database.name}.", suffix=".partial")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(handle, 0o666 & ~umask)  # as SQLite would have made the file
        with os.fdopen(handle, "wb") as out, template.open("rb") as source:
            while chunk := source.read(1 << 20):
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(partial, database)  # fails if the name exists: never over a store another process made
        except FileExistsError:
            return False
        _sync_folder(database.parent)
        return True
    finally:
        with contextlib.suppress(OSError):
            os.unlink(partial)


def _sync(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


def _sync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
