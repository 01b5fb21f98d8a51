"""Bad dataset files are refused before a sweep's first cell (issue 28): exit 2 and one line naming the file,
what is wrong and what to do; no traceback, no run in the store. Files are written here in the real formats
(test_data's writers) and then damaged; nothing touches the network.

Most cases call trainbench.sweep.needed_files.fetch_or_refuse_missing_files, the function the sweep calls before
it creates any run; a few go through the real entry point, and its line is the in-process message exactly."""

from __future__ import annotations

import gzip
import pickle
import shutil
import struct
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
from test_data import write_cifar10, write_idx, write_mnist
from trainbench import cli, data
from trainbench.config import CONF_DIR, PlainError, validate
from trainbench.data import images as image_readers
from trainbench.store import tracking
from trainbench.sweep.needed_files import fetch_or_refuse_missing_files

CIFAR = "cifar-10-batches-py"
MNIST = Path("MNIST") / "raw"
CPU_CELL = ["device=cpu", "task.epochs=1", "batch_size=32", "tracking.system_metrics_interval_s=0"]


def cell(*overrides: str) -> Any:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return validate(compose("config", overrides=list(overrides)))


def overrides(dataset: str, root: Path) -> list[str]:
    model = ["model=distilbert", "model.seq_len=16"] if dataset == "sst2" else []
    return [*model, f"data={dataset}", f"data.root={root}", "data.download=false"]


def refusal(dataset: str, root: Path, *extra: str) -> str:
    """The one line the sweep's check refuses `dataset` in `root` with (as the entry point prints it, less
    `trainbench: `)."""
    return refusal_of(cell(*overrides(dataset, root), *extra))


def refusal_of(composed: Any) -> str:
    """The one line the sweep's check refuses an already composed cell with."""
    with pytest.raises(PlainError) as error:
        fetch_or_refuse_missing_files([composed])
    return str(error.value)


def write_sst2(root: Path, train: str = "sentence\tlabel\na charming journey\t1\nflat , dull\t0\n") -> None:
    folder = root / "SST-2"
    folder.mkdir(parents=True)
    (folder / "train.tsv").write_text(train)
    (folder / "dev.tsv").write_text("sentence\tlabel\na gorgeous film\t1\n")


def rewrite_batch(path: Path, change: Callable[[dict[bytes, Any]], None]) -> None:
    with open(path, "rb") as batch_file:
        batch = pickle.load(batch_file, encoding="bytes")
    change(batch)
    path.write_bytes(pickle.dumps(batch))


def cut(path: Path, keep: float = 0.5) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[: int(len(raw) * keep)])


GARBAGE = bytes(np.random.default_rng(7).integers(0, 256, 3000, dtype=np.uint8))
GZ = MNIST / "train-images-idx3-ubyte.gz"


# (case, dataset, MNIST compressed, the damage done in root, the file the line must name, what it must say)
CASES: list[tuple[str, str, bool, Callable[[Path], None], Path, str]] = [
    (
        "cifar-truncated",
        "cifar10",
        True,
        lambda r: cut(r / CIFAR / "data_batch_3"),
        Path(CIFAR) / "data_batch_3",
        "is truncated",
    ),
    (
        "cifar-garbage",
        "cifar10",
        True,
        lambda r: (r / CIFAR / "data_batch_2").write_bytes(GARBAGE),
        Path(CIFAR) / "data_batch_2",
        "does not unpickle",
    ),
    (
        "cifar-empty",
        "cifar10",
        True,
        lambda r: (r / CIFAR / "test_batch").write_bytes(b""),
        Path(CIFAR) / "test_batch",
        "is empty",
    ),
    (
        "cifar-no-data-key",
        "cifar10",
        True,
        lambda r: rewrite_batch(r / CIFAR / "data_batch_1", lambda b: b.pop(b"data")),
        Path(CIFAR) / "data_batch_1",
        "no `data` entry",
    ),
    (
        "cifar-wrong-shape",
        "cifar10",
        True,
        lambda r: rewrite_batch(
            r / CIFAR / "data_batch_4", lambda b: b.update({b"data": np.zeros((20, 1000), np.uint8)})
        ),
        Path(CIFAR) / "data_batch_4",
        "uint8 20 x 1000",
    ),
    (
        "cifar-label-count",
        "cifar10",
        True,
        lambda r: rewrite_batch(r / CIFAR / "data_batch_5", lambda b: b.update({b"labels": [1] * 10})),
        Path(CIFAR) / "data_batch_5",
        "10 labels for 20 images",
    ),
    ("mnist-gz-truncated", "mnist", True, lambda r: cut(r / GZ), GZ, "is truncated"),
    (
        "mnist-gz-garbage",
        "mnist",
        True,
        lambda r: (r / MNIST / "train-labels-idx1-ubyte.gz").write_bytes(GARBAGE),
        MNIST / "train-labels-idx1-ubyte.gz",
        "is not a gzip file",
    ),
    (
        "mnist-truncated",
        "mnist",
        False,
        lambda r: cut(r / MNIST / "t10k-images-idx3-ubyte"),
        MNIST / "t10k-images-idx3-ubyte",
        "is truncated: its header says 10 x 28 x 28",
    ),
    (
        "mnist-too-short",
        "mnist",
        False,
        lambda r: (r / MNIST / "t10k-labels-idx1-ubyte").write_bytes(b"\x00\x00"),
        MNIST / "t10k-labels-idx1-ubyte",
        "too short for an IDX file",
    ),
    (
        "mnist-wrong-magic",
        "mnist",
        False,
        lambda r: (r / MNIST / "train-images-idx3-ubyte").write_bytes(b"PK\x03\x04" + GARBAGE),
        MNIST / "train-images-idx3-ubyte",
        "is not an IDX file",
    ),
    (
        "mnist-wrong-type",
        "mnist",
        False,
        lambda r: (r / MNIST / "train-labels-idx1-ubyte").write_bytes(
            struct.pack(">HBBI", 0, 0x0D, 1, 30) + bytes(120)
        ),
        MNIST / "train-labels-idx1-ubyte",
        "IDX type 0x0d",
    ),
    (
        "mnist-swapped",
        "mnist",
        True,
        lambda r: shutil.copy(r / MNIST / "t10k-labels-idx1-ubyte.gz", r / MNIST / "t10k-images-idx3-ubyte.gz"),
        MNIST / "t10k-images-idx3-ubyte.gz",
        "has 1 dimension(s); an MNIST images file has 3",
    ),
    (
        "mnist-label-count",
        "mnist",
        True,
        lambda r: write_idx(r / MNIST / "train-labels-idx1-ubyte", np.zeros(12), True),
        MNIST / "train-labels-idx1-ubyte.gz",
        "holds 12 labels for the 30 images of train-images-idx3-ubyte.gz",
    ),
    (
        "mnist-label-range",
        "mnist",
        True,
        lambda r: write_idx(r / MNIST / "t10k-labels-idx1-ubyte", np.full(10, 200), True),
        MNIST / "t10k-labels-idx1-ubyte.gz",
        "labels up to 200",
    ),
    (
        "sst2-garbage",
        "sst2",
        True,
        lambda r: (r / "SST-2" / "train.tsv").write_bytes(b"\xff\xfe" + GARBAGE),
        Path("SST-2") / "train.tsv",
        "is not UTF-8 text",
    ),
    (
        "sst2-no-header",
        "sst2",
        True,
        lambda r: (r / "SST-2" / "dev.tsv").write_text("a gorgeous film\t1\n"),
        Path("SST-2") / "dev.tsv",
        "no `sentence` and `label` columns",
    ),
    (
        "sst2-truncated",
        "sst2",
        True,
        lambda r: (r / "SST-2" / "train.tsv").write_text("sentence\tlabel\nfine\t1\nflat , du"),
        Path("SST-2") / "train.tsv",
        "ends mid-row (truncated?)",
    ),
]


def damaged(tmp_path: Path, dataset: str, compress: bool, damage: Callable[[Path], None]) -> Path:
    root = tmp_path / "data"
    if dataset == "cifar10":
        write_cifar10(root)
    elif dataset == "mnist":
        write_mnist(root, compress=compress)
    else:
        write_sst2(root)
    damage(root)
    return root


@pytest.mark.parametrize(
    ("dataset", "compress", "damage", "named", "said"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_bad_file_is_refused_in_one_line_naming_it(tmp_path, dataset, compress, damage, named, said) -> None:
    root = damaged(tmp_path, dataset, compress, damage)
    composed = cell(*overrides(dataset, root))  # once (a composition costs ~0.15 s): the check and the cell read it
    line = refusal_of(composed)
    assert "\n" not in line and "Traceback" not in line
    assert tracking.private(str(root / named)) in line, line
    assert said in line, line
    # what to do: fetch the dataset again
    assert f"`trainbench download data={dataset}`" in line and "data.download=true" in line, line
    # the cell's own reading says the same, never a bare UnpicklingError, KeyError, reshape or EOFError
    with pytest.raises(data.DatasetBroken) as read:
        data.load(composed.data, seed=0)
    assert tracking.private(str(read.value)) == line


class RunsACommand:
    """A pickle that, when loaded by `pickle.load`, runs a shell command (here: one that creates a file)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.system, (self.command,))


def test_a_batch_that_would_run_code_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """A CIFAR-10 batch is data: a pickle naming anything but the format's own types is refused in one line, and
    the command its `__reduce__` names never runs (it would create the marker file), in the check or the cell."""
    root, marker = tmp_path / "root", tmp_path / "ran"
    write_cifar10(root)
    batch = root / CIFAR / "data_batch_1"
    for payload in (RunsACommand(f"touch {marker}"), {b"data": RunsACommand(f"touch {marker}"), b"labels": []}):
        batch.write_bytes(pickle.dumps(payload))
        composed = cell(*overrides("cifar10", root))
        line = refusal_of(composed)
        with pytest.raises(data.DatasetBroken) as read:
            data.load(composed.data, seed=0)
        assert not marker.exists(), "the pickle's command ran"
        assert "\n" not in line and tracking.private(str(batch)) in line, line
        assert "refers to posix.system, which a CIFAR-10 batch never holds" in line, line
        assert tracking.private(str(read.value)) == line


def test_good_files_pass_and_hold_what_the_cells_read(tmp_path: Path) -> None:
    write_cifar10(tmp_path / "c")
    write_mnist(tmp_path / "gz", train=30, test=10, compress=True)
    write_mnist(tmp_path / "plain", train=30, test=10, compress=False)
    write_sst2(tmp_path / "t")
    for dataset, root, held in [
        ("cifar10", tmp_path / "c", (100, 20)),
        ("mnist", tmp_path / "gz", (30, 10)),
        ("mnist", tmp_path / "plain", (30, 10)),
        ("sst2", tmp_path / "t", (2, 1)),
    ]:
        config = cell(*overrides(dataset, root))
        fetch_or_refuse_missing_files([config])
        assert data.check_files(config.data) == held
        loaded = data.load(config.data, seed=0)
        assert (len(loaded.train), len(loaded.val)) == held


def test_the_check_reads_mnist_headers_and_labels_not_the_images(tmp_path: Path, monkeypatch) -> None:
    """Cheap: an images file is judged by its header against its length (a .gz's recorded length), never
    decompressed or decoded; the small labels files are read whole."""
    write_mnist(tmp_path, compress=True)
    read: list[str] = []
    original = image_readers._idx_data
    monkeypatch.setattr(
        image_readers, "_idx_data", lambda files, path, shape: read.append(path.name) or original(files, path, shape)
    )
    assert data.check_files(cell(*overrides("mnist", tmp_path)).data) == (30, 10)
    assert read == ["train-labels-idx1-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]


def test_a_gzip_of_several_members_is_measured_by_decompressing_it(tmp_path: Path) -> None:
    """A .gz whose trailer does not record the whole length (two gzip members) is not refused for that."""
    write_mnist(tmp_path, compress=True)
    images = tmp_path / MNIST / "train-images-idx3-ubyte.gz"
    payload = gzip.decompress(images.read_bytes())
    images.write_bytes(gzip.compress(payload[:1000]) + gzip.compress(payload[1000:]))
    assert data.check_files(cell(*overrides("mnist", tmp_path)).data) == (30, 10)


# -- sample counts ------------------------------------------------------------------------------------------
def test_num_samples_beyond_the_files_is_refused_with_the_count_they_hold(tmp_path: Path) -> None:
    write_mnist(tmp_path, train=30, test=10)
    line = refusal("mnist", tmp_path, "data.num_samples=64")
    assert line == (
        f"data.num_samples=64 is more than the 30 training samples of MNIST in {tracking.private(str(tmp_path / MNIST))}: "
        "use data.num_samples=30 or fewer (null: all of them)"
    )
    assert "data.num_val_samples=10 or fewer" in refusal("mnist", tmp_path, "data.num_val_samples=11")
    # the cell says the same when it reads them, never trains on fewer than asked
    with pytest.raises(data.DatasetBroken) as read:
        data.load(cell(*overrides("mnist", tmp_path), "data.num_samples=64").data, seed=0)
    assert tracking.private(str(read.value)) == line
    fetch_or_refuse_missing_files([cell(*overrides("mnist", tmp_path), "data.num_samples=30")])  # all of them: fine


def test_digits_counts_are_known_without_loading_and_refused_beyond() -> None:
    for fraction in ("0.2", "0.33"):
        config = cell("data=digits", f"data.val_fraction={fraction}").data
        loaded = data.load(config, seed=0)
        assert data.check_files(config) == (len(loaded.train), len(loaded.val))
    with pytest.raises(PlainError, match=r"data.num_samples=5000 is more than the 1,437 training samples of digits"):
        fetch_or_refuse_missing_files([cell("data=digits", "data.num_samples=5000")])


# -- archives in data.root ----------------------------------------------------------------------------------
def cifar10_tarball(root: Path, name: str = "cifar-10-python.tar.gz", arcname: str = CIFAR) -> Path:
    """The archive the download fetches, made from files written in its format."""
    write_cifar10(root / "source")
    archive = root / name
    with tarfile.open(archive, "w:gz" if name.endswith(".gz") else "w") as tar:
        tar.add(root / "source" / CIFAR, arcname=arcname)
    shutil.rmtree(root / "source")
    return archive


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


def test_an_archive_in_data_root_is_extracted_instead_of_downloaded(tmp_path: Path, capsys) -> None:
    archive = cifar10_tarball(tmp_path)
    fetch_or_refuse_missing_files([cell(*overrides("cifar10", tmp_path))])  # download=false: extracting is local
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [
        f"trainbench: CIFAR-10 is not in {tracking.private(str(tmp_path / CIFAR))}: extracting it from "
        f"{tracking.private(str(archive))}"
    ]
    assert all((tmp_path / CIFAR / name).is_file() for name in data.CIFAR10_FILES)
    assert archive.exists() and leftovers(tmp_path) == []  # kept, as the download keeps it; no staging folder


def test_an_archive_fills_in_only_what_the_folder_lacks(tmp_path: Path) -> None:
    cifar10_tarball(tmp_path, name="cifar-10-python.tar")  # the .tar some browsers leave of the .tar.gz
    (tmp_path / CIFAR).mkdir()
    kept = tmp_path / CIFAR / "data_batch_1"
    write_cifar10(tmp_path / "mine")
    shutil.copy(tmp_path / "mine" / CIFAR / "data_batch_1", kept)
    before = kept.read_bytes()
    assert data.archive_on_disk(cell(*overrides("cifar10", tmp_path)).data) == tmp_path / "cifar-10-python.tar"
    fetch_or_refuse_missing_files([cell(*overrides("cifar10", tmp_path))])
    assert kept.read_bytes() == before and all((tmp_path / CIFAR / n).is_file() for n in data.CIFAR10_FILES)


def test_sst2_zip_is_extracted(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "SST-2.zip", "w") as bundle:
        bundle.writestr("SST-2/train.tsv", "sentence\tlabel\nfine\t1\n")
        bundle.writestr("SST-2/dev.tsv", "sentence\tlabel\ndull\t0\n")
    fetch_or_refuse_missing_files([cell(*overrides("sst2", tmp_path))])
    assert data.check_files(cell(*overrides("sst2", tmp_path)).data) == (1, 1)


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda a: cut(a, 0.6), "is truncated"),
        (lambda a: a.write_bytes(GARBAGE), "cannot be extracted"),
        (lambda a: a.write_bytes(b""), "cannot be extracted"),
    ],
    ids=["truncated", "garbage", "empty"],
)
def test_a_corrupt_archive_is_refused_naming_it(tmp_path: Path, damage, said) -> None:
    archive = cifar10_tarball(tmp_path)
    damage(archive)
    line = refusal("cifar10", tmp_path)
    assert line.startswith(f"CIFAR-10: archive {tracking.private(str(archive))} {said}"), line
    assert "delete it and run `trainbench download data=cifar10`" in line and "\n" not in line
    assert not (tmp_path / CIFAR).exists() and leftovers(tmp_path) == []  # nothing half-extracted


def test_an_archive_without_the_dataset_is_refused_naming_it(tmp_path: Path) -> None:
    archive = cifar10_tarball(tmp_path, arcname="something-else")
    line = refusal("cifar10", tmp_path)
    assert line.startswith(f"CIFAR-10: archive {tracking.private(str(archive))} holds no {CIFAR}/data_batch_1")


def test_bad_files_extracted_from_an_archive_say_how_to_extract_them_again(tmp_path: Path) -> None:
    archive = cifar10_tarball(tmp_path)
    fetch_or_refuse_missing_files([cell(*overrides("cifar10", tmp_path))])
    cut(tmp_path / CIFAR / "test_batch")
    line = refusal("cifar10", tmp_path)
    folder, shown = tracking.private(str(tmp_path / CIFAR)), tracking.private(str(archive))
    assert line.endswith(
        f"; delete {folder} to extract {shown} again, or delete both and run `trainbench download data=cifar10`"
    )


# -- `trainbench download` ----------------------------------------------------------------------------------
def test_download_extracts_a_local_archive_and_checks_what_is_there(tmp_path: Path, capsys) -> None:
    cifar10_tarball(tmp_path)
    assert cli.download(["data=cifar10", f"data.root={tmp_path}"]) == 0  # no network: the archive is here
    assert "cifar10: extracted into" in capsys.readouterr().out
    cut(tmp_path / CIFAR / "data_batch_2")
    assert cli.download(["data=cifar10", f"data.root={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data_batch_2 is truncated" in err[0]


def test_the_python_api_extracts_checks_and_names_what_is_there(tmp_path: Path) -> None:
    """trainbench.download is `trainbench download`: what it did and where the files are; a damaged file is
    BadInput naming it, one line."""
    import trainbench

    archive = cifar10_tarball(tmp_path)
    settings = ["data=cifar10", f"data.root={tmp_path}"]
    done = trainbench.download(settings, output="quiet")
    assert (done.dataset, done.done, done.folder, done.archive) == ("cifar10", "extracted", tmp_path / CIFAR, archive)
    assert trainbench.download(settings).done == "present"  # nothing fetched again
    cut(tmp_path / CIFAR / "data_batch_2")
    with pytest.raises(trainbench.BadInput) as refused:
        trainbench.download(settings)
    assert "data_batch_2 is truncated" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(trainbench.BadInput, match="data"):
        trainbench.download(["data=nosuch"])


# -- through the entry point --------------------------------------------------------------------------------
SWEPT = ["cifar-garbage", "mnist-gz-truncated", "mnist-truncated"]


@pytest.mark.slow
@pytest.mark.parametrize("case", SWEPT)
def test_the_sweep_stops_with_exit_2_and_the_same_one_line(trainbench, tmp_path: Path, case: str) -> None:
    _, dataset, compress, damage, named, _ = next(c for c in CASES if c[0] == case)
    root = damaged(tmp_path, dataset, compress, damage)
    result = trainbench(*overrides(dataset, root), *CPU_CELL)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [f"trainbench: {refusal(dataset, root)}"]
    assert "Traceback" not in result.stdout + result.stderr
    assert result.runs() == []  # nothing recorded


@pytest.mark.slow
def test_fifty_labels_for_two_hundred_images_is_refused_not_truncated(trainbench, tmp_path: Path) -> None:
    """The issue's case: it used to finish, exit 0, training on 50 samples instead of the 64 asked."""
    write_mnist(tmp_path / "data", train=200, test=10)
    write_idx(tmp_path / "data" / MNIST / "train-labels-idx1-ubyte", np.zeros(50), True)
    sweep = ["-m", "batch_size=16,32"]  # a sweep: not even its parent run is created
    result = trainbench(
        *sweep, *overrides("mnist", tmp_path / "data"), "data.num_samples=64", *CPU_CELL[:2], CPU_CELL[3]
    )
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    assert "train-labels-idx1-ubyte.gz holds 50 labels for the 200 images of train-images-idx3-ubyte.gz" in line
    assert "Traceback" not in result.stdout and result.runs() == []


@pytest.mark.slow
def test_a_tarball_in_data_root_is_extracted_and_trains(trainbench, tmp_path: Path) -> None:
    cifar10_tarball(tmp_path / "data")
    result = trainbench(*overrides("cifar10", tmp_path / "data"), *CPU_CELL)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "trainbench: CIFAR-10 is not in " in result.stdout and "extracting it from " in result.stdout
    (run,) = result.runs()
    assert run.data.tags["trainbench.outcome"] == "finished"
    assert run.data.params["data.num_samples"] == "100"  # every file read: 5 batches of 20


def test_data_prefetched_by_a_prestarted_cell_is_the_data_it_would_have_loaded(tmp_path: Path) -> None:
    """A prestarted cell's process starts loading its data while its framework imports (data.loading.prefetch):
    the cell then trains on exactly the images and labels a plain load gives, another seed's load is not served
    from it, and a dataset that cannot be read fails the cell's load with the same line as without it."""
    from trainbench.data import loading

    synthetic = cell("data.num_samples=300", "data.num_val_samples=40").data
    plain = data.load(synthetic, seed=3)
    loading.prefetch(synthetic, 3)
    served = data.load(synthetic, seed=3)
    for got, want in ((served.train, plain.train), (served.val, plain.val)):
        assert np.array_equal(got.inputs, want.inputs) and np.array_equal(got.labels, want.labels)
    loading.prefetch(synthetic, 3)
    other = data.load(synthetic, seed=4)
    assert not np.array_equal(other.train.inputs, plain.train.inputs)
    assert np.array_equal(other.train.inputs, data.load(synthetic, seed=4).train.inputs)

    missing = cell(*overrides("cifar10", tmp_path / "nothing")).data
    with pytest.raises(data.DatasetMissing) as unprefetched:
        data.load(missing, seed=0)
    loading.prefetch(missing, 0)
    with pytest.raises(data.DatasetMissing) as prefetched:
        data.load(missing, seed=0)
    assert str(prefetched.value) == str(unprefetched.value)
