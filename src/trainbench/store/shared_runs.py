"""Other machines' runs in the store: the published rows and results/contributed/, kept in an experiment of their own.

A sweep ends by comparing its cells with other machines'; those runs live in the experiment SHARED_EXPERIMENT of
the same store, so the MLflow UI shows them next to the user's runs (and the user's experiment stays theirs).
They are imported by the project's own importers (trainbench.references for the CSV, trainbench.store.sharing for the
export files), in a process of their own (composing each reference's command uses Hydra, which the sweep's process
is running), and only when the files changed: a hash of their bytes is kept as the experiment tag MARKER_TAG, so
the check a sweep makes when nothing changed reads a few hundred kilobytes and one experiment.

    python -m trainbench.store.shared_runs [--uri URI]    # import now if the files changed (what a sweep does)
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainbench.locations import module_command
from trainbench.store import tracking
from trainbench.store.sources import SHARED_EXPERIMENT, contributed_files

MARKER_TAG = "trainbench.shared_files_hash"
SWITCH = "TRAINBENCH_SHARED_RUNS"  # `off`: sweeps leave the store as it is (the test suite sets it; CI, air-gapped)
IMPORT_FORMAT = "1"  # bump when what an import writes changes, so that stores import again


def published_csv() -> Path:
    from trainbench.references.reading import DEFAULT_CSV

    return Path(DEFAULT_CSV)


def files_hash() -> str:
    """What the import would write, as a hash of the files it reads (names and bytes)."""
    digest = hashlib.sha256(IMPORT_FORMAT.encode())
    for path in [published_csv(), *contributed_files()]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def up_to_date(client: Any) -> bool:
    found = client.get_experiment_by_name(SHARED_EXPERIMENT)
    return found is not None and found.tags.get(MARKER_TAG) == files_hash()


def refresh(client: Any, uri: str) -> str | None:
    """Import the published and contributed runs when their files changed since the last import; a line saying
    what was done, or None when nothing had changed. Never raises: the comparison is a convenience."""
    if os.environ.get(SWITCH, "").lower() == "off":
        return None
    try:
        if up_to_date(client):
            return None
    except Exception as error:
        return f"trainbench: could not check the other machines' runs: {tracking.private_line(error, 160)}"
    print(f"Importing other machines' runs (published, results/contributed/) into experiment {SHARED_EXPERIMENT}")
    try:
        done = subprocess.run(
            module_command("trainbench.store.shared_runs", "--uri", uri),
            capture_output=True,
            text=True,
            timeout=600,
        )
    except (subprocess.SubprocessError, OSError) as error:
        return f"trainbench: other machines' runs not imported: {tracking.private_line(error)}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"trainbench: other machines' runs not imported: {tracking.private(last)[:200]}"
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else None


@contextlib.contextmanager
def one_import_at_a_time(uri: str) -> Iterator[None]:
    """Two sweeps that end together on one local store import once: the second waits, then finds the marker."""
    if not uri.startswith("sqlite:///"):
        yield  # a server: the importers themselves skip what is already there
        return
    import fcntl

    lock = Path(uri.removeprefix("sqlite:///") + ".shared-import.lock")
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def import_all(client: Any, uri: str) -> str:
    from trainbench.references.loading import load
    from trainbench.references.writing import write
    from trainbench.store.sharing import file_format, importing

    experiment_id = tracking.experiment_id(client, SHARED_EXPERIMENT, uri)
    marker = files_hash()  # before reading: a file changed meanwhile is imported next time
    published = write(load(published_csv()), client, experiment_id)
    files = [file_format.load(path) for path in contributed_files()]
    summaries = importing.import_files(client, experiment_id, files)
    client.set_experiment_tag(experiment_id, MARKER_TAG, marker)
    return (
        f"Other machines' runs in experiment {SHARED_EXPERIMENT}: published {published.created} new, "
        f"{published.replaced} replaced, {published.unchanged} unchanged; contributed "
        f"{sum(s.imported for s in summaries)} new from {len(files)} file(s)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainbench.store.shared_runs", description=__doc__)
    parser.add_argument("--uri", help="tracking store (default: as a sweep resolves it)")
    args = parser.parse_args(argv)
    uri = tracking.resolve_tracking_uri(args.uri)
    client = tracking.open_store(uri)
    with one_import_at_a_time(uri):
        if up_to_date(client):
            print(f"Other machines' runs in experiment {SHARED_EXPERIMENT} are up to date")
            return 0
        print(import_all(client, uri))
    return 0


if __name__ == "__main__":
    sys.exit(main())
