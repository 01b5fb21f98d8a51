"""Loading the dataset a cell's config describes, once, in the cell's process, before anything is timed; and
checking a dataset's files as the cell will read them, so the sweep refuses bad files before its first cell.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from concurrent.futures import Future
from pathlib import Path

from trainbench.config.schema import DataConfig, ImageFiles, SyntheticImages, SyntheticText, TextData, TextFiles
from trainbench.data.arrays import Dataset, Split
from trainbench.data.files import (
    CIFAR10_FILES,
    MNIST_FILES,
    SST2_FILES,
    DatasetBroken,
    DatasetMissing,
    files_of,
    missing_remedy,
)
from trainbench.data.images import DIGITS_SAMPLES, cifar10, cifar10_batch, digits, mnist, mnist_checked, synthetic
from trainbench.data.text import PAD_ID, sst2, sst2_rows, synthetic_text

_prefetched: tuple[DataConfig, int, Future[Dataset]] | None = None


def prefetch(cfg: DataConfig, seed: int) -> None:
    """Start loading the dataset `load(cfg, seed)` will return, in a thread at the lowest CPU priority: in a
    prestarted cell's process it runs on the core the framework's import leaves idle (NumPy's generators and
    array arithmetic release the GIL), not in front of the sweep that is creating the run. Its error, if any, is
    raised by `load`, where it would have been. Generated data only: files are the sweep's to fetch or extract
    before its first cell (a second extraction at the same time would race it)."""
    global _prefetched
    if not isinstance(cfg, (SyntheticImages, SyntheticText)):
        return
    future: Future[Dataset] = Future()

    def work() -> None:
        if sys.platform == "linux":  # a thread's own nice value (Linux only): it takes only a core left idle
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        try:
            future.set_result(_load(cfg, seed))
        except BaseException as error:  # noqa: BLE001  handed to the loading thread, which raises it
            future.set_exception(error)

    threading.Thread(target=work, name="data-prefetch", daemon=True).start()
    _prefetched = (cfg, seed, future)


def load(cfg: DataConfig, seed: int) -> Dataset:
    """The dataset `cfg` describes, capped to its num_samples / num_val_samples (files: never to more than they
    hold; DatasetBroken then, as check_counts says before the sweep); the prefetched one if it is this same one."""
    global _prefetched
    ahead, _prefetched = _prefetched, None
    if ahead is not None and ahead[0] == cfg and ahead[1] == seed:
        return ahead[2].result()
    return _load(cfg, seed)


def _load(cfg: DataConfig, seed: int) -> Dataset:
    if isinstance(cfg, TextData):
        return _load_text(cfg, seed)
    if isinstance(cfg, SyntheticImages):
        train, val, classes = synthetic(cfg, seed)
        channels = cfg.channels
    else:
        assert isinstance(cfg, ImageFiles)
        train, val, classes = _read_images(cfg, seed)
        check_counts(cfg, (len(train), len(val)))
        channels = cfg.channels_given()
    train, val = train.first(cfg.num_samples), val.first(cfg.num_val_samples)
    mean, std = list(cfg.mean), list(cfg.std)
    if cfg.scale_only:  # pixels / 255 and nothing else (Keras' usual preprocessing)
        mean, std = [0.0], [1.0]
    if channels != len(mean):  # gray -> RGB repeats the gray statistics per channel
        mean, std = mean * channels, std * channels
    return Dataset(cfg.name, train, val, classes, mean, std, cfg.image_size, channels)


def _read_images(cfg: ImageFiles, seed: int) -> tuple[Split, Split, int]:
    if cfg.loader == "cifar10":
        return cifar10(Path(cfg.root), cfg.download)
    if cfg.loader == "mnist":
        return mnist(Path(cfg.root), cfg.download)
    return digits(cfg.val_fraction, seed)


def check_files(cfg: DataConfig) -> tuple[int, int] | None:
    """Every file of a dataset read from files, checked as the cell will read it, and cheaply: CIFAR-10's batches
    unpickled (all that reading them costs: about 5 ms per 10,000 images) and their `data` and labels checked;
    MNIST's IDX headers checked against their files' lengths (a .gz's recorded length; decompressed only when
    that disagrees) and the labels read, not the images; SST-2's rows split into sentence and label, not
    tokenised. Returns the (training, validation) samples the files hold. Raises DatasetBroken naming the first
    bad file, what is wrong and what to do; DatasetMissing when a file is not on disk. None for generated data."""
    if isinstance(cfg, ImageFiles) and cfg.loader == "digits":
        return _digits_held(cfg.val_fraction)
    files = files_of(cfg)
    if files is None:
        return None
    if files.missing():
        raise DatasetMissing(missing_remedy(files, "data.download=true"))
    if files.name == "cifar10":
        counts = [len(cifar10_batch(files, files.folder / name)[1]) for name in CIFAR10_FILES]
        return sum(counts[:5]), counts[5]
    if files.name == "mnist":
        train, val = (len(mnist_checked(files, split)[2]) for split in MNIST_FILES)
        return train, val
    train, val = (len(sst2_rows(files, files.folder / name)[1]) for name in SST2_FILES)
    return train, val


def check_counts(cfg: DataConfig, held: tuple[int, int]) -> None:
    """The files hold some training samples, and at least data.num_samples / num_val_samples of them: a cell
    never silently trains or validates on fewer than asked. DatasetBroken says how many they hold."""
    files = files_of(cfg)
    if files is not None:
        where = f"{files.what} in {files.folder}"
    else:
        assert isinstance(cfg, ImageFiles)
        where = f"{cfg.name} (scikit-learn's {DIGITS_SAMPLES:,} digits, data.val_fraction={cfg.val_fraction})"
    train, val = held
    if train == 0:
        assert files is not None  # digits always holds samples
        raise DatasetBroken(f"{where} holds no training samples; {files.fix()}")
    asked = (
        ("num_samples", cfg.num_samples, train, "training"),
        ("num_val_samples", cfg.num_val_samples, val, "validation"),
    )
    for key, wanted, count, kind in asked:
        if wanted is not None and wanted > count:
            raise DatasetBroken(
                f"data.{key}={wanted} is more than the {count:,} {kind} samples of {where}: "
                f"use data.{key}={count} or fewer (null: all of them)"
            )


def _digits_held(val_fraction: float) -> tuple[int, int]:
    """What digits() splits scikit-learn's digits into: the validation share rounded up, as train_test_split does."""
    val = math.ceil(val_fraction * DIGITS_SAMPLES)
    return DIGITS_SAMPLES - val, val


def _load_text(cfg: TextData, seed: int) -> Dataset:
    if isinstance(cfg, TextFiles):
        train, val, classes = sst2(Path(cfg.root), cfg.download, cfg.seq_len, cfg.vocab_size)
        check_counts(cfg, (len(train), len(val)))
    else:
        assert isinstance(cfg, SyntheticText)
        train, val, classes = synthetic_text(cfg, seed)
    train, val = train.first(cfg.num_samples), val.first(cfg.num_val_samples)
    padded = bool((train.inputs == PAD_ID).any() or (val.inputs == PAD_ID).any())
    return Dataset(
        cfg.name,
        train,
        val,
        classes,
        [],
        [],
        0,
        0,
        kind="text",
        seq_len=cfg.seq_len,
        vocab_size=cfg.vocab_size,
        padded=padded,
    )
