"""Image datasets: synthetic images, scikit-learn's digits, CIFAR-10's pickled batches and MNIST's IDX files, each
read and checked as it is read (a batch unpickled with a restricted unpickler, an IDX header against its length).
"""

from __future__ import annotations

import gzip
import math
import os
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np

from trainbench.config.schema import SyntheticImages
from trainbench.data.arrays import Split
from trainbench.data.files import CIFAR10_FILES, MNIST_FILES, DataFiles, dataset_files, fetch, unreadable, why_failed

DIGITS_SAMPLES = 1797  # scikit-learn's bundled 8x8 digits


def synthetic(cfg: SyntheticImages, seed: int) -> tuple[Split, Split, int]:
    """Random images; with `learnable`, each class is a fixed coarse pattern plus noise.

    The patterns are 4x4 per channel, upsampled: a rule a linear model can learn, so training on them
    reaches high accuracy in a few epochs, while `learnable: false` (noise, random labels) cannot.
    """
    rng = np.random.default_rng(seed)
    size, channels, classes = cfg.image_size, cfg.channels, cfg.num_classes
    n_train, n_val = cfg.num_samples or 8192, cfg.num_val_samples or 0
    patterns = rng.uniform(-1.0, 1.0, size=(classes, channels, 4, 4)).astype(np.float32)

    def make(n: int) -> Split:
        labels = rng.integers(0, classes, size=n, dtype=np.int64)
        images = np.empty((n, channels, size, size), dtype=np.uint8)
        for start in range(0, n, 256):  # in chunks: 224 px float intermediates are large
            chunk = labels[start : start + 256]
            # float32 draws, in place: four times faster than float64 normals cast down
            pixels = rng.standard_normal((len(chunk), channels, size, size), dtype=np.float32)
            pixels *= 64.0
            pixels += 128.0
            if cfg.learnable:
                pixels += _upsample(patterns[chunk], size) * 16.0
            np.clip(pixels, 0, 255, out=pixels)
            images[start : start + 256] = pixels
        return Split(images, labels)

    return make(n_train), make(n_val), classes


def _upsample(patterns: np.ndarray, size: int) -> np.ndarray:
    """Nearest-neighbour upsampling of (N, C, 4, 4) to (N, C, size, size)."""
    index = (np.arange(size) * patterns.shape[-1]) // size
    return patterns[:, :, index][:, :, :, index]


def digits(val_fraction: float, seed: int) -> tuple[Split, Split, int]:
    """scikit-learn's 1,797 real 8x8 digits (pixel values 0-16), split stratified by class: the file and the split
    of sklearn.datasets.load_digits and train_test_split(stratify=..., random_state=seed), read without importing
    scikit-learn, which brings SciPy and pandas into the cell's start (results/2026-11-29-test-suite-time)."""
    with gzip.open(_digits_file()) as rows:
        data = np.loadtxt(rows, delimiter=",")
    assert data.shape == (DIGITS_SAMPLES, 65), data.shape
    images = np.clip(data[:, :-1].reshape(-1, 1, 8, 8) * (255.0 / 16.0), 0, 255).astype(np.uint8)
    labels = data[:, -1].astype(np.int64)
    train, val = _stratified_split(labels, math.ceil(val_fraction * DIGITS_SAMPLES), seed)
    return Split(images[train], labels[train]), Split(images[val], labels[val]), 10


def _digits_file() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("data=digits reads scikit-learn's bundled digits: pip install scikit-learn")
    return Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"


def _stratified_split(labels: np.ndarray, n_val: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train and validation indices as scikit-learn's StratifiedShuffleSplit draws them (its one split,
    RandomState(seed)): each class's share of either side rounded as its _approximate_mode rounds, the classes'
    members shuffled, then each side."""
    rng = np.random.RandomState(seed)
    _, by_class = np.unique(labels, return_inverse=True)
    counts = np.bincount(by_class)
    members = np.split(np.argsort(by_class, kind="mergesort"), np.cumsum(counts)[:-1])
    n_train = len(labels) - n_val
    train_counts = _approximate_mode(counts, n_train, rng)
    val_counts = _approximate_mode(counts - train_counts, n_val, rng)
    train: list[int] = []
    val: list[int] = []
    for i, class_members in enumerate(members):
        shuffled = class_members.take(rng.permutation(counts[i]), mode="clip")
        train.extend(shuffled[: train_counts[i]])
        val.extend(shuffled[train_counts[i] : train_counts[i] + val_counts[i]])
    return rng.permutation(train), rng.permutation(val)


def _approximate_mode(counts: np.ndarray, draws: int, rng: np.random.RandomState) -> np.ndarray:
    """Per class, its share of `draws` rounded down, then the draws left given to the largest remainders (ties
    drawn at random)."""
    continuous = counts / counts.sum() * draws
    floored = np.floor(continuous)
    need = int(draws - floored.sum())
    remainder = continuous - floored
    for value in np.sort(np.unique(remainder))[::-1]:
        if need <= 0:
            break
        (tied,) = np.where(remainder == value)
        now = min(len(tied), need)
        floored[rng.choice(tied, size=now, replace=False)] += 1
        need -= now
    return floored.astype(int)


def cifar10(root: Path, download: bool) -> tuple[Split, Split, int]:
    """CIFAR-10 from the python-pickle batches in root/cifar-10-batches-py."""
    files = dataset_files("cifar10", root)
    fetch(files, download)

    def read(names: list[str]) -> Split:
        images, labels = zip(*(cifar10_batch(files, files.folder / name) for name in names), strict=True)
        return Split(np.concatenate(images).reshape(-1, 3, 32, 32), np.concatenate(labels))

    return read(CIFAR10_FILES[:5]), read(CIFAR10_FILES[5:]), 10


# The only globals a CIFAR-10 batch's pickle names: NumPy's array (and scalar) reconstructors, under NumPy 1's
# module names (the published files, Python 2's cPickle) and NumPy 2's, protocols 2 to 5. Anything else, such
# as os.system in a `__reduce__`, would be called by pickle.load: a batch is data, so it is refused unloaded.
_BATCH_GLOBALS = {
    (module, name)
    for package in ("numpy.core", "numpy._core")
    for module, name in [
        (f"{package}.multiarray", "_reconstruct"),
        (f"{package}.multiarray", "scalar"),
        (f"{package}.numeric", "_frombuffer"),
    ]
} | {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}


class _ForeignType(pickle.UnpicklingError):
    """A pickle names a global a CIFAR-10 batch never holds."""


class _BatchUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists, bytes, str, numbers and NumPy arrays; refuses every other global before it is
    called."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _BATCH_GLOBALS:
            raise _ForeignType(f"it refers to {module}.{name}, which a CIFAR-10 batch never holds")
        return super().find_class(module, name)


def cifar10_batch(files: DataFiles, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One python-pickle batch: a dict whose `data` is N x 3072 uint8 (N images, channel-major 3 x 32 x 32) and
    whose `labels` (CIFAR-100's batches: `fine_labels`) are N classes 0-9. DatasetBroken names what is not."""
    if path.stat().st_size == 0:
        raise files.broken(path, "is empty")
    try:
        with open(path, "rb") as batch_file:
            batch = _BatchUnpickler(batch_file, encoding="bytes").load()
    except _ForeignType as foreign:
        raise files.broken(path, f"is not a CIFAR-10 python batch: {foreign}") from None
    except Exception as error:  # a damaged pickle raises nearly anything: EOFError, UnpicklingError, KeyError...
        if isinstance(error, EOFError) or "truncated" in str(error):
            raise files.broken(path, f"is truncated ({why_failed(error)})") from None
        raise files.broken(
            path, f"is not a CIFAR-10 python batch: it does not unpickle ({why_failed(error)})"
        ) from None
    if not isinstance(batch, dict):
        raise files.broken(path, f"holds a {type(batch).__name__}, not a CIFAR-10 batch (a dict)")
    data, labels = _entry(batch, "data"), _entry(batch, "labels", "fine_labels")
    keys = ", ".join(k.decode(errors="replace") if isinstance(k, bytes) else str(k) for k in batch)[:120]
    if data is None or labels is None:
        absent = "data" if data is None else "labels"
        raise files.broken(path, f"has no `{absent}` entry (its keys: {keys or 'none'})")
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2 and data.shape[1] == 3072):
        raise files.broken(path, f"has `data` of {_described(data)}; a CIFAR-10 batch's is N x 3072 uint8")
    try:
        labels = np.asarray(labels, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise files.broken(path, f"has `labels` of {_described(labels)}, not integers") from None
    if labels.ndim != 1:
        raise files.broken(path, f"has `labels` of {_described(labels)}; a CIFAR-10 batch's is one label per image")
    if len(labels) != len(data):
        raise files.broken(path, f"has {len(labels):,} labels for {len(data):,} images")
    if len(labels) and (labels.min() < 0 or labels.max() > 9):
        raise files.broken(path, f"has labels {labels.min()} to {labels.max()}; CIFAR-10's classes are 0 to 9")
    return data, labels


def _entry(batch: dict[Any, Any], *keys: str) -> Any:
    """batch[key] for the first of `keys` it has, as bytes (Python 2's pickles) or str; else None."""
    for key in keys:
        for form in (key.encode(), key):
            if form in batch:
                return batch[form]
    return None


def _described(value: Any) -> str:
    """An array as `uint8 100 x 1000`, a list as `a list of 100`, anything else as its type."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype} {' x '.join(str(n) for n in value.shape) or 'scalar'}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value):,}"
    return type(value).__name__


def mnist(root: Path, download: bool) -> tuple[Split, Split, int]:
    """MNIST from the IDX files in root/MNIST/raw (torchvision's layout; plain or .gz)."""
    files = dataset_files("mnist", root)
    fetch(files, download)

    def read(split: str) -> Split:
        images, shape, labels = mnist_checked(files, split)
        return Split(_idx_data(files, images, shape)[:, None], labels)

    return read("train"), read("val"), 10


def mnist_checked(files: DataFiles, split: str) -> tuple[Path, tuple[int, ...], np.ndarray]:
    """A split's images file and its shape (header checked against the file), and its labels: read, as many as
    the images, classes 0-9. Everything but decoding the images; DatasetBroken names the file that is wrong."""
    image_name, label_name = MNIST_FILES[split]
    images, labels = files.path(image_name), files.path(label_name)
    assert images is not None and labels is not None, "_fetch found or fetched every file"
    shape = _idx_shape(files, images, 3, "images")
    if shape[1:] != (28, 28):
        raise files.broken(images, f"holds {shape[1]} x {shape[2]} images; MNIST's are 28 x 28")
    count = _idx_shape(files, labels, 1, "labels")
    if count[0] != shape[0]:
        raise files.broken(labels, f"holds {count[0]:,} labels for the {shape[0]:,} images of {images.name}")
    values = _idx_data(files, labels, count).astype(np.int64)
    if len(values) and values.max() > 9:
        raise files.broken(labels, f"has labels up to {values.max()}; MNIST's classes are 0 to 9")
    return images, shape, values


def _idx_shape(files: DataFiles, path: Path, ndim: int, kind: str) -> tuple[int, ...]:
    """The shape an IDX file's header gives (magic 0, 0, 0x08 unsigned byte, `ndim`; then big-endian sizes),
    checked against the length of the data that follows: a plain file's size, a .gz's recorded length."""
    size = 4 + 4 * ndim
    try:
        with _open_idx(path) as idx:
            header = idx.read(size)
    except Exception as error:
        raise files.broken(path, unreadable(error)) from None
    if len(header) < 4:
        raise files.broken(path, "is empty" if not header else f"is too short for an IDX file ({len(header)} bytes)")
    zero, code, dims = struct.unpack(">HBB", header[:4])
    if zero != 0:
        raise files.broken(path, f"is not an IDX file (it starts {header[:4].hex()}; an IDX file starts 0000)")
    if code != 0x08:
        raise files.broken(path, f"holds IDX type 0x{code:02x}, not unsigned bytes (0x08)")
    if dims != ndim:
        raise files.broken(path, f"has {dims} dimension(s); an MNIST {kind} file has {ndim}")
    if len(header) < size:
        raise files.broken(path, "is truncated inside its header")
    shape = struct.unpack(f">{ndim}I", header[4:])
    expected = size + math.prod(shape)
    held = _idx_length(files, path, expected)
    if held != expected:
        said = f"its header says {' x '.join(f'{n:,}' for n in shape)} ({expected:,} bytes)"
        what = "is truncated" if held < expected else "is too long"
        raise files.broken(path, f"{what}: {said} but it holds {held:,}")
    return shape


def _open_idx(path: Path) -> Any:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _idx_length(files: DataFiles, path: Path, expected: int) -> int:
    """The bytes an IDX file holds: a plain file's size; a .gz's length as its trailer records it (mod 2**32)
    when that is the `expected` one, else as decompressing the whole stream finds it (a truncated or damaged
    stream: DatasetBroken)."""
    if path.suffix != ".gz":
        return path.stat().st_size
    with open(path, "rb") as raw:
        if raw.seek(0, os.SEEK_END) >= 4:
            raw.seek(-4, os.SEEK_END)
            if struct.unpack("<I", raw.read(4))[0] == expected % 2**32:
                return expected
    total = 0
    try:
        with gzip.open(path, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                total += len(block)
    except Exception as error:
        raise files.broken(path, unreadable(error)) from None
    return total


def _idx_data(files: DataFiles, path: Path, shape: tuple[int, ...]) -> np.ndarray:
    """The data of an IDX file whose header _idx_shape checked, as a uint8 array of `shape`."""
    try:
        with _open_idx(path) as idx:
            raw = idx.read()
        return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * len(shape)).reshape(shape)
    except Exception as error:  # changed since it was checked
        raise files.broken(path, unreadable(error)) from None
