"""Dataset loaders on small files written here in the real formats (no network), fed the typed data configs
that conf/data/ composes to."""

from __future__ import annotations

import dataclasses
import gzip
import pickle
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
from conftest import ROOT, TINY, child_env
from trainbench import data
from trainbench.config import CONF_DIR, validate
from trainbench.config.schema import DataConfig, ImageFiles, SyntheticImages


def data_config(*overrides: str, **changes: Any) -> DataConfig:
    """conf/data/ as a cell sees it (composed and judged), then `changes` applied to the typed config (values
    a test picks that the default model could not take, e.g. 224 px gray -> RGB)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cell = validate(compose("config", overrides=list(overrides)))
    return dataclasses.replace(cell.data, **changes)


def cifar10_config(root: Path, **changes: Any) -> DataConfig:
    return data_config("data=cifar10", f"data.root={root}", "data.download=false", **changes)


def write_cifar10(root: Path, per_batch: int = 20) -> np.ndarray:
    """The python-pickle batches of cifar-10-python.tar.gz: dicts of bytes keys, rows of 3072 uint8."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    first = None
    for name in data.CIFAR10_FILES:
        rows = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        first = rows if first is None else first
        batch = {
            b"batch_label": name.encode(),
            b"labels": list(rng.integers(0, 10, per_batch)),
            b"data": rows,
            b"filenames": [b"x.png"] * per_batch,
        }
        with open(folder / name, "wb") as out:
            pickle.dump(batch, out)
    return first


def write_idx(path: Path, array: np.ndarray, compress: bool) -> None:
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    payload = header + array.astype(np.uint8).tobytes()
    if compress:
        with gzip.open(f"{path}.gz", "wb") as out:
            out.write(payload)
    else:
        path.write_bytes(payload)


def write_mnist(root: Path, train: int = 30, test: int = 10, compress: bool = True) -> None:
    folder = root / "MNIST" / "raw"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for (images, labels), n in zip(data.MNIST_FILES.values(), (train, test), strict=True):
        write_idx(folder / images, rng.integers(0, 256, (n, 28, 28)), compress)
        write_idx(folder / labels, rng.integers(0, 10, n), compress)


def test_the_data_choices_compose_to_their_kinds() -> None:
    assert isinstance(data_config("data=cifar10"), ImageFiles)
    assert isinstance(data_config("data=synthetic"), SyntheticImages)
    assert data_config("data=mnist").loader == "mnist" and data_config("data=digits").loader == "digits"


def test_cifar10_reads_the_pickle_batches(tmp_path: Path) -> None:
    first_rows = write_cifar10(tmp_path)
    loaded = data.load(cifar10_config(tmp_path), seed=0)
    assert loaded.train.inputs.shape == (100, 3, 32, 32) and loaded.val.inputs.shape == (20, 3, 32, 32)
    # Rows are channel-major (1024 red, 1024 green, 1024 blue), as the CIFAR page documents.
    assert np.array_equal(loaded.train.inputs[0, 1].ravel(), first_rows[0, 1024:2048])
    assert loaded.input_shape == (3, 32, 32) and loaded.num_classes == 10
    assert loaded.mean == [0.4914, 0.4822, 0.4465]  # conf/data/cifar10.yaml's statistics, per channel


def test_num_samples_takes_a_fixed_subset(tmp_path: Path) -> None:
    write_cifar10(tmp_path)
    full = data.load(cifar10_config(tmp_path), seed=0)
    capped = data.load(cifar10_config(tmp_path, num_samples=7, num_val_samples=3), seed=5)
    assert len(capped.train) == 7 and len(capped.val) == 3
    assert np.array_equal(capped.train.inputs, full.train.inputs[:7])


def test_missing_cifar10_offline_names_the_folder_and_files(tmp_path: Path) -> None:
    cfg = cifar10_config(tmp_path)
    with pytest.raises(data.DatasetMissing) as error:
        data.load(cfg, seed=0)
    message = str(error.value)
    assert str(tmp_path / "cifar-10-batches-py") in message
    assert "data_batch_1" in message and "test_batch" in message and "\n" not in message
    # What the sweep checks before its first cell, without reading the files: the same folder and files.
    what, folder, files, _ = data.missing_files(cfg)
    assert (what, folder, files) == ("CIFAR-10", tmp_path / "cifar-10-batches-py", data.CIFAR10_FILES)
    write_cifar10(tmp_path)
    assert data.missing_files(cfg) is None


@pytest.mark.parametrize("compress", [True, False])
def test_mnist_reads_idx_files_and_converts_gray_to_rgb_at_224(tmp_path: Path, compress: bool) -> None:
    write_mnist(tmp_path, compress=compress)
    cfg = data_config(
        "data=mnist",
        f"data.root={tmp_path}",
        "data.download=false",
        "data.num_samples=12",
        image_size=224,
        grayscale_to_rgb=True,
    )
    assert data.missing_files(cfg) is None  # plain or .gz, either is on disk
    loaded = data.load(cfg, seed=0)
    assert loaded.train.inputs.shape == (12, 1, 28, 28)  # stored native; resized per batch on the device
    assert loaded.input_shape == (3, 224, 224) and loaded.needs_resize
    assert loaded.mean == [0.1307] * 3
    assert len(loaded.val) == 10


def test_missing_mnist_offline_names_the_files(tmp_path: Path) -> None:
    cfg = data_config("data=mnist", f"data.root={tmp_path}", "data.download=false")
    with pytest.raises(data.DatasetMissing, match="train-images-idx3-ubyte.*t10k-labels-idx1-ubyte"):
        data.load(cfg, seed=0)


def test_digits_is_real_and_split_by_class() -> None:
    loaded = data.load(data_config("data=digits"), seed=0)
    assert len(loaded.train) + len(loaded.val) == 1797
    assert len(loaded.val) == pytest.approx(0.2 * 1797, abs=1)  # val_fraction 0.2
    assert set(np.unique(loaded.val.labels)) == set(range(10))
    assert loaded.train.inputs.max() > 200  # 0-16 scaled to bytes
    assert loaded.input_shape == (1, 8, 8) and not loaded.needs_resize


@pytest.mark.parametrize(("val_fraction", "seed"), [(0.2, 0), (0.2, 7), (0.1, 1234), (0.5, 3)])
def test_digits_are_scikit_learns_own_split_read_without_importing_it(val_fraction: float, seed: int) -> None:
    """The same images and the same stratified split as load_digits() with train_test_split: a run recorded
    before trainbench read the file itself validated on the same samples."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    images = np.clip(bunch.images * (255.0 / 16.0), 0, 255).astype(np.uint8)[:, None]
    x_train, x_val, y_train, y_val = train_test_split(
        images, bunch.target, test_size=val_fraction, random_state=seed, stratify=bunch.target
    )
    loaded = data.load(data_config("data=digits", val_fraction=val_fraction), seed=seed)
    assert np.array_equal(loaded.train.inputs, x_train) and np.array_equal(loaded.train.labels, y_train)
    assert np.array_equal(loaded.val.inputs, x_val) and np.array_equal(loaded.val.labels, y_val)


def test_a_digits_cell_does_not_import_scikit_learn() -> None:
    probe = "from trainbench.data.images import digits; digits(0.2, 0); import sys; print('sklearn' in sys.modules)"
    env = child_env({"PYTHONPATH": str(ROOT / "src")})
    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
    assert imported.stdout.strip() == "False"


def test_synthetic_learnable_labels_depend_on_the_images() -> None:
    cfg = data_config("data=synthetic", image_size=16, num_classes=4, num_samples=400, num_val_samples=40)
    loaded = data.load(cfg, seed=0)
    images, labels = loaded.train.inputs.astype(float), loaded.train.labels
    class_means = np.stack([images[labels == c].mean(axis=0) for c in range(4)])
    # Nearest class mean classifies learnable data well above the 25% of chance...
    distances = ((images[:, None] - class_means[None]) ** 2).sum(axis=(2, 3, 4))
    assert (distances.argmin(axis=1) == labels).mean() > 0.9
    # ...and the same generator is reproducible from the seed.
    assert np.array_equal(data.load(cfg, seed=0).train.inputs, loaded.train.inputs)
    # Noise with random labels is the counterpart: nearest class mean is then at chance.
    noise = data.load(dataclasses.replace(cfg, learnable=False), seed=0)
    noise_means = np.stack([noise.train.inputs[noise.train.labels == c].astype(float).mean(axis=0) for c in range(4)])
    held_out = noise.val.inputs.astype(float)
    guesses = ((held_out[:, None] - noise_means[None]) ** 2).sum(axis=(2, 3, 4)).argmin(axis=1)
    assert (guesses == noise.val.labels).mean() < 0.6


def test_download_fetches_checks_and_unpacks_the_archive(tmp_path: Path) -> None:
    """The real download path, fed from a file:// URL: the archive is fetched, its md5 checked, unpacked."""
    import hashlib
    import tarfile

    source = tmp_path / "source"
    write_cifar10(source)
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    served = dataclasses.replace(data.dataset_files("cifar10", tmp_path / "data"), url=archive.as_uri(), md5=md5)
    data.fetch(served, download=True)
    target = tmp_path / "data" / "cifar-10-batches-py"
    assert served.folder == target and all((target / name).exists() for name in data.CIFAR10_FILES)
    assert len(data.load(cifar10_config(tmp_path / "data"), seed=0).train) == 100

    other = dataclasses.replace(served, folder=tmp_path / "other" / "cifar-10-batches-py", md5="0" * 32)
    with pytest.raises(data.DatasetMissing, match="md5 mismatch"):
        data.fetch(other, download=True)
    corrupt = other.folder
    assert not corrupt.exists() and not list(corrupt.parent.glob("*.part"))  # nothing half-written left behind


# -- through the entry point ---------------------------------------------------------------------------
@pytest.mark.slow
def test_a_missing_dataset_stops_the_sweep_before_any_cell_naming_the_folder(trainbench, tmp_path: Path) -> None:
    result = trainbench("data=cifar10", f"data.root={tmp_path / 'nowhere'}", "data.download=false", *TINY)
    assert result.returncode == 2, result.stderr[-2000:]  # bad input: nothing ran
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("trainbench: CIFAR-10 not found")
    assert str(tmp_path / "nowhere" / "cifar-10-batches-py") in message and "data_batch_1" in message
    assert "data.download=false" in message
    assert result.runs() == []  # no run for a cell that could not start


@pytest.mark.slow
def test_cifar10_trains_end_to_end_from_local_files(trainbench, tmp_path: Path) -> None:
    write_cifar10(tmp_path / "cifar")
    result = trainbench(
        "data=cifar10",
        f"data.root={tmp_path / 'cifar'}",
        "data.download=false",
        "device=cpu",
        "task.epochs=1",
        "batch_size=32",
        "tracking.system_metrics_interval_s=0",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (cell,) = result.runs()
    params, metrics = cell.data.params, cell.data.metrics
    assert params["data.name"] == "cifar10"
    # num_samples: null means every file's images: the cell records what it really read (5 x 20, 1 x 20)
    assert params["data.num_samples"] == "100" and params["data.num_val_samples"] == "20"
    assert cell.data.tags["trainbench.samples_per_epoch"] == "100"
    # validated on exactly those 20 images: the accuracy is a whole number of them
    assert metrics["val_accuracy"] * 20 == pytest.approx(round(metrics["val_accuracy"] * 20))
    assert metrics["train_loss"] > 0 and metrics["epoch_time_s"] > 0
