"""Datasets as NumPy arrays, the same for every framework: inputs and int64 labels. Image inputs are
uint8 (N, C, H, W); text inputs are int64 token ids (N, seq_len) with 0 as padding.

Loading happens once, in the cell's process, before anything is timed. With data.pipeline=device (the
default) adapters move the arrays to the device once and do the per-batch work there (scale to [0, 1],
resize, gray -> RGB, normalise), so a training epoch measures the model and not a Python data pipeline.
With data.pipeline=loader that work happens on the host, per sample or per batch, in loader workers, inside
the timed epoch (HostSamples, prepare_images): what a user of a real dataset runs. Keras adapters transpose
to NHWC; that is the only difference between frameworks.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import pickle
import re
import shutil
import struct
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainbench.config.schema import DataConfig, ImageFiles, SyntheticImages, SyntheticText, TextData, TextFiles

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR10_FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"  # torchvision's mirror
SST2_URL = "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip"  # GLUE's own copy
SST2_FILES = ["train.tsv", "dev.tsv"]
# BERT's special token ids (bert-base-uncased vocabulary), kept so hashed text looks like WordPiece ids.
PAD_ID, UNK_ID, CLS_ID, SEP_ID = 0, 100, 101, 102
FIRST_WORD_ID = 1000  # ids below are BERT's special and unused tokens
MARKERS_PER_SEQUENCE = 8
DIGITS_SAMPLES = 1797  # scikit-learn's bundled 8x8 digits
MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "val": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


class DatasetError(RuntimeError):
    """A dataset read from files cannot be used. str() is one line: which folder or file, what is wrong, what
    to do."""


class DatasetMissing(DatasetError):
    """The dataset is not on disk and could not be downloaded. str() says where it must be."""


class DatasetBroken(DatasetError):
    """A dataset's file (or its archive) is on disk but unusable: empty, truncated, not its format, counts that
    disagree; or the config asks for more samples than the files hold. str() names the file, what is wrong and
    what to do (check_files raises it before a sweep's first cell)."""


@dataclass
class Split:
    inputs: np.ndarray  # images: uint8 (N, C, H, W); text: int64 token ids (N, seq_len)
    labels: np.ndarray  # int64 (N,)

    def __len__(self) -> int:
        return len(self.labels)

    def first(self, n: int | None) -> Split:
        return self if n is None else Split(self.inputs[:n], self.labels[:n])


@dataclass
class Dataset:
    name: str
    train: Split
    val: Split
    num_classes: int
    mean: list[float]
    std: list[float]
    image_size: int  # what the model sees, after any resize
    channels: int  # what the model sees, after any gray -> RGB
    kind: str = "image"  # image | text
    seq_len: int = 0  # text: tokens per sequence
    vocab_size: int = 0  # text: token ids are below this
    padded: bool = False  # text: some sequences end in padding (id 0), so attention must mask it

    @property
    def input_shape(self) -> tuple[int, ...]:
        """(C, H, W) of one image input; (seq_len,) of one text input."""
        if self.kind == "text":
            return (self.seq_len,)
        return (self.channels, self.image_size, self.image_size)

    @property
    def needs_resize(self) -> bool:
        return self.kind == "image" and self.train.inputs.shape[-1] != self.image_size


def prepare_images(images: np.ndarray, data: Dataset, channels_last: bool) -> np.ndarray:
    """uint8 (N, C, H, W) images -> the model's float32 input, on the host: scaled to [0, 1], resized
    (bilinear, as F.interpolate(align_corners=False) without antialiasing), gray -> RGB, normalised; NHWC
    when `channels_last`. The same steps in the same order as the PyTorch adapter does them on the device."""
    x = images.astype(np.float32) / 255.0
    if x.shape[-1] != data.image_size or x.shape[-2] != data.image_size:
        x = resize_bilinear(x, data.image_size)
    if x.shape[1] != data.channels:
        x = np.repeat(x, data.channels // x.shape[1], axis=1)
    x = (x - np.asarray(data.mean, np.float32)[:, None, None]) / np.asarray(data.std, np.float32)[:, None, None]
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1) if channels_last else x)


class HostSamples:
    """A split as a map-style dataset for a host loader (torch.utils.data.DataLoader takes any object with
    __len__ and __getitem__): sample i as the model's float32 input, prepared on the host as torchvision's
    transforms do it: PIL bilinear resize when the stored size differs (torchvision's Resize), gray -> RGB
    (Grayscale(3)), / 255 (ToTensor), then (x - mean) / std (Normalize). CHW, or HWC when `channels_last`.
    Token ids are returned as they are. Plain Python and NumPy, so worker processes can pickle it."""

    def __init__(self, split: Split, data: Dataset, channels_last: bool = False) -> None:
        self.inputs, self.labels = split.inputs, split.labels
        self.kind, self.size, self.channels = data.kind, data.image_size, data.channels
        self.channels_last = channels_last
        self.mean = np.asarray(data.mean, np.float32)[:, None, None]
        self.std = np.asarray(data.std, np.float32)[:, None, None]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        label = int(self.labels[index])
        if self.kind == "text":
            return self.inputs[index], label
        image = self.inputs[index]  # uint8 (C, H, W)
        if image.shape[-1] != self.size or image.shape[-2] != self.size:
            from PIL import Image

            pil = Image.fromarray(image[0] if image.shape[0] == 1 else image.transpose(1, 2, 0))
            resized = np.asarray(pil.resize((self.size, self.size), Image.Resampling.BILINEAR))
            image = resized[None] if resized.ndim == 2 else resized.transpose(2, 0, 1)
        x = image.astype(np.float32) / 255.0
        if x.shape[0] != self.channels:
            x = np.repeat(x, self.channels // x.shape[0], axis=0)
        x = (x - self.mean) / self.std
        return np.ascontiguousarray(x.transpose(1, 2, 0) if self.channels_last else x), label


def resize_bilinear(x: np.ndarray, size: int) -> np.ndarray:
    """(N, C, H, W) float -> (N, C, size, size), half-pixel centres, edges clamped: torch's bilinear
    interpolation with align_corners=False."""

    def weights(source: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        position = np.clip((np.arange(size) + 0.5) * source / size - 0.5, 0, None)
        low = np.floor(position).astype(np.int64)
        high = np.minimum(low + 1, source - 1)
        return low, high, (position - low).astype(np.float32)

    rows_low, rows_high, row_weight = weights(x.shape[2])
    cols_low, cols_high, col_weight = weights(x.shape[3])
    rows = x[:, :, rows_low, :] * (1 - row_weight)[:, None] + x[:, :, rows_high, :] * row_weight[:, None]
    return rows[:, :, :, cols_low] * (1 - col_weight) + rows[:, :, :, cols_high] * col_weight


def load(cfg: DataConfig, seed: int) -> Dataset:
    """The dataset `cfg` describes, capped to its num_samples / num_val_samples (files: never to more than they
    hold; DatasetBroken then, as check_counts says before the sweep)."""
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


# -- the files on disk: where they are, how they get there, whether they can be read --------------------------


@dataclass(frozen=True)
class DataFiles:
    """A dataset read from files: what messages call it, its `data=NAME` (also its loader), the folder its
    files are read from, the files expected there, where the download fetches them, and the names its
    archive has when one lies in data.root (the folder's parent)."""

    what: str
    name: str
    folder: Path
    files: list[str]
    url: str
    md5: str | None = None
    archives: tuple[str, ...] = ()  # the download's own file first; empty: files are fetched one by one
    gzip_too: bool = False  # each file may also be NAME.gz (MNIST)

    def path(self, name: str) -> Path | None:
        """Where file `name` is read from: itself, else (gzip_too) NAME.gz; None when neither is there."""
        candidates = [self.folder / name, *([self.folder / f"{name}.gz"] if self.gzip_too else [])]
        return next((c for c in candidates if c.is_file()), None)

    def missing(self) -> list[str]:
        return [name for name in self.files if self.path(name) is None]

    def archive_on_disk(self) -> Path | None:
        return next((p for p in (self.folder.parent / a for a in self.archives) if p.is_file()), None)

    def broken(self, path: Path, problem: str) -> DatasetBroken:
        """`path` (a file of the dataset) is unusable: one line naming it, what is wrong, what to do."""
        return DatasetBroken(f"{self.what}: {path} {problem}; {self.fix()}")

    def fix(self) -> str:
        command = f"`trainbench download data={self.name}`"
        archive = self.archive_on_disk()
        if archive is not None:
            return f"delete {self.folder} to extract {archive} again, or delete both and run {command}"
        return f"delete {self.folder} and run {command} (or run again with data.download=true)"


def dataset_files(loader: str, root: Path) -> DataFiles:
    """The files of dataset `loader` (cifar10, mnist, sst2) under data.root `root`."""
    root = root.resolve()
    if loader == "cifar10":
        return DataFiles(
            "CIFAR-10",
            "cifar10",
            root / "cifar-10-batches-py",
            CIFAR10_FILES,
            CIFAR10_URL,
            CIFAR10_MD5,
            ("cifar-10-python.tar.gz", "cifar-10-python.tar"),  # .tar: what some browsers leave of the .tar.gz
        )
    if loader == "mnist":
        names = [name for pair in MNIST_FILES.values() for name in pair]
        return DataFiles("MNIST", "mnist", root / "MNIST" / "raw", names, MNIST_URL, gzip_too=True)
    assert loader == "sst2", loader
    return DataFiles("SST-2", "sst2", root / "SST-2", SST2_FILES, SST2_URL, archives=("SST-2.zip",))


def files_of(cfg: DataConfig) -> DataFiles | None:
    """The files `cfg` reads; None for data generated in memory or bundled with a package (digits)."""
    if isinstance(cfg, ImageFiles) and cfg.loader in ("cifar10", "mnist"):
        return dataset_files(cfg.loader, Path(cfg.root))
    if isinstance(cfg, TextFiles):
        return dataset_files(cfg.loader, Path(cfg.root))
    return None


def missing_files(cfg: DataConfig) -> tuple[str, Path, list[str], str] | None:
    """For a dataset read from files that are not all on disk: (what, folder, files expected, url); else None.
    Reads nothing but the folder listing, so the parent can check a whole sweep before its first cell."""
    files = files_of(cfg)
    if files is None or not files.missing():
        return None
    return files.what, files.folder, files.files, files.url


def archive_on_disk(cfg: DataConfig) -> Path | None:
    """The dataset's archive lying in data.root while its folder lacks files (the download's own file, e.g.
    cifar-10-python.tar.gz, put there by hand or left by an earlier download): extract_archive unpacks it."""
    files = files_of(cfg)
    return files.archive_on_disk() if files is not None and files.missing() else None


def extract_archive(cfg: DataConfig) -> Path:
    """Unpack archive_on_disk(cfg) into the dataset's folder, as the download does after fetching it; returns
    the archive. DatasetBroken names the archive when it cannot be read or lacks the dataset's files."""
    files = files_of(cfg)
    archive = archive_on_disk(cfg)
    assert files is not None and archive is not None, "extract_archive needs archive_on_disk(cfg)"
    _unpack(files, archive)
    return archive


def download(cfg: DataConfig) -> None:
    """Fetch a dataset's missing files now (the `trainbench download` command, and a sweep before its first cell):
    unpacked from an archive in data.root when there is one, else downloaded. Reads none of them: check_files
    does. Raises DatasetMissing when offline, DatasetBroken for an archive that cannot be extracted."""
    files = files_of(cfg)
    if files is not None:
        _fetch(files, download=True)


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
        raise DatasetMissing(_missing(files, "data.download=true"))
    if files.name == "cifar10":
        counts = [len(_cifar10_batch(files, files.folder / name)[1]) for name in CIFAR10_FILES]
        return sum(counts[:5]), counts[5]
    if files.name == "mnist":
        train, val = (len(_mnist_checked(files, split)[2]) for split in MNIST_FILES)
        return train, val
    train, val = (len(_sst2_rows(files, files.folder / name)[1]) for name in SST2_FILES)
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


def synthetic_text(cfg: SyntheticText, seed: int) -> tuple[Split, Split, int]:
    """Random token ids, [CLS] first; with `learnable`, each sequence hides a few marker tokens of its
    class (a bag-of-words rule any encoder learns in a few epochs)."""
    rng = np.random.default_rng(seed)
    seq_len, vocab, classes = cfg.seq_len, cfg.vocab_size, cfg.num_classes
    markers = FIRST_WORD_ID + np.arange(classes * 16).reshape(classes, 16)  # 16 marker ids per class

    def make(n: int) -> Split:
        tokens = rng.integers(FIRST_WORD_ID + markers.size, vocab, size=(n, seq_len), dtype=np.int64)
        tokens[:, 0] = CLS_ID
        labels = rng.integers(0, classes, size=n, dtype=np.int64)
        if cfg.learnable:
            count = min(MARKERS_PER_SEQUENCE, seq_len - 1)
            positions = 1 + np.argsort(rng.random((n, seq_len - 1)), axis=1)[:, :count]
            chosen = markers[labels[:, None], rng.integers(0, 16, size=(n, count))]
            np.put_along_axis(tokens, positions, chosen, axis=1)
        return Split(tokens, labels)

    return make(cfg.num_samples or 2048), make(cfg.num_val_samples or 0), classes


def sst2(root: Path, download: bool, seq_len: int, vocab_size: int) -> tuple[Split, Split, int]:
    """GLUE SST-2 from root/SST-2/{train,dev}.tsv, tokenised by hashing words (see tokenize)."""
    files = dataset_files("sst2", root)
    _fetch(files, download)

    def read(name: str) -> Split:
        sentences, labels = _sst2_rows(files, files.folder / name)
        return Split(tokenize(sentences, seq_len, vocab_size), np.asarray(labels, dtype=np.int64))

    return read("train.tsv"), read("dev.tsv"), 2


def _sst2_rows(files: DataFiles, path: Path) -> tuple[list[str], list[int]]:
    """A GLUE TSV's sentences and labels: UTF-8, a header naming the `sentence` and `label` columns, then one
    row per sentence with a label 0 or 1. DatasetBroken names the file (and the line) that is not."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise files.broken(
            path, f"is not UTF-8 text (byte {error.start:,} is 0x{error.object[error.start]:02x})"
        ) from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last row
    if not lines:
        raise files.broken(path, "is empty")
    header = lines[0].rstrip("\r").split("\t")
    if "sentence" not in header or "label" not in header:
        raise files.broken(
            path,
            f"has no `sentence` and `label` columns: its first line is {lines[0][:60]!r} (GLUE's: sentence<TAB>label)",
        )
    text_column, label_column = header.index("sentence"), header.index("label")
    sentences, labels = [], []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.rstrip("\r").split("\t")
        if len(fields) <= max(text_column, label_column) or fields[label_column] not in ("0", "1"):
            where = "ends mid-row (truncated?): its last line" if number == len(lines) else f"line {number}"
            raise files.broken(path, f"{where} is {line[:60]!r}, not 'sentence<TAB>label' with label 0 or 1")
        sentences.append(fields[text_column])
        labels.append(int(fields[label_column]))
    return sentences, labels


def tokenize(sentences: list[str], seq_len: int, vocab_size: int) -> np.ndarray:
    """[CLS] w1 w2 ... [SEP] [PAD]...: lower-cased words hashed (stable across runs and machines) into
    the ids a BERT vocabulary uses for words. Offline and tokenizer-file free: what a speed benchmark
    needs; the accuracy it allows is below a real WordPiece tokenizer's."""
    ids = np.full((len(sentences), seq_len), PAD_ID, dtype=np.int64)
    span = vocab_size - FIRST_WORD_ID
    for row, sentence in enumerate(sentences):
        words = re.findall(r"[\w']+|[^\w\s]", sentence.lower())[: seq_len - 2]
        hashed = [
            FIRST_WORD_ID + int.from_bytes(hashlib.blake2b(w.encode(), digest_size=4).digest(), "big") % span
            for w in words
        ]
        tokens = [CLS_ID, *hashed, SEP_ID]
        ids[row, : len(tokens)] = tokens
    return ids


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
    """scikit-learn's 1,797 real 8x8 digits (pixel values 0-16), split stratified by class."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    assert len(bunch.target) == DIGITS_SAMPLES
    images = np.clip(bunch.images * (255.0 / 16.0), 0, 255).astype(np.uint8)[:, None]
    labels = bunch.target.astype(np.int64)
    x_train, x_val, y_train, y_val = train_test_split(
        images, labels, test_size=val_fraction, random_state=seed, stratify=labels
    )
    return Split(x_train, y_train), Split(x_val, y_val), 10


def cifar10(root: Path, download: bool) -> tuple[Split, Split, int]:
    """CIFAR-10 from the python-pickle batches in root/cifar-10-batches-py."""
    files = dataset_files("cifar10", root)
    _fetch(files, download)

    def read(names: list[str]) -> Split:
        images, labels = zip(*(_cifar10_batch(files, files.folder / name) for name in names), strict=True)
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


def _cifar10_batch(files: DataFiles, path: Path) -> tuple[np.ndarray, np.ndarray]:
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
            raise files.broken(path, f"is truncated ({_why(error)})") from None
        raise files.broken(path, f"is not a CIFAR-10 python batch: it does not unpickle ({_why(error)})") from None
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
    _fetch(files, download)

    def read(split: str) -> Split:
        images, shape, labels = _mnist_checked(files, split)
        return Split(_idx_data(files, images, shape)[:, None], labels)

    return read("train"), read("val"), 10


def _mnist_checked(files: DataFiles, split: str) -> tuple[Path, tuple[int, ...], np.ndarray]:
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
        raise files.broken(path, _unreadable(error)) from None
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
        raise files.broken(path, _unreadable(error)) from None
    return total


def _idx_data(files: DataFiles, path: Path, shape: tuple[int, ...]) -> np.ndarray:
    """The data of an IDX file whose header _idx_shape checked, as a uint8 array of `shape`."""
    try:
        with _open_idx(path) as idx:
            raw = idx.read()
        return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * len(shape)).reshape(shape)
    except Exception as error:  # changed since it was checked
        raise files.broken(path, _unreadable(error)) from None


def _unreadable(error: Exception) -> str:
    if isinstance(error, gzip.BadGzipFile):
        return "is not a gzip file"
    if isinstance(error, EOFError):
        return f"is truncated ({error})"
    return f"cannot be read ({_why(error)})"


def _why(error: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0][:160]}" if text else type(error).__name__


def _fetch(files: DataFiles, download: bool) -> None:
    """Every file in files.folder: as they are; else unpacked from the dataset's archive when one lies in
    data.root; else (download) fetched: the archive, md5-checked and unpacked, or (MNIST) each missing file.
    Offline or with download=false, DatasetMissing names the folder and the files."""
    missing = files.missing()
    if not missing:
        return
    archive = files.archive_on_disk()
    if archive is None and not download:
        raise DatasetMissing(_missing(files, "data.download=true"))
    if archive is None and not files.archives:  # files fetched one by one, as .gz
        for name in missing:
            _download(f"{files.url}{name}.gz", files.folder / f"{name}.gz", None, lambda why: _missing(files, why))
        return
    if archive is None:
        archive = files.folder.parent / files.url.rsplit("/", 1)[-1]
        _download(files.url, archive, files.md5, lambda why: _missing(files, why))
    _unpack(files, archive)


def _unpack(files: DataFiles, archive: Path) -> None:
    """Extract `archive` (tar, any compression, or zip) next to the dataset's folder, and move into the folder
    whatever of it is not there yet; nothing half-extracted is left behind. DatasetBroken names the archive when
    it cannot be read or does not hold the folder's files."""
    import tempfile
    import zipfile

    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{archive.name}.", dir=archive.parent))
    except OSError as error:
        raise _cannot_write(files, archive, error) from None
    try:
        try:
            if archive.suffix == ".zip":
                with zipfile.ZipFile(archive) as bundle:
                    bundle.extractall(staging)
            else:
                with tarfile.open(archive) as tar:
                    tar.extractall(staging, filter="data")
        except Exception as error:  # a damaged archive raises EOFError, ReadError, BadZipFile, zlib.error...
            if isinstance(error, OSError) and error.errno is not None:  # the disk's fault (full, read-only)
                raise _cannot_write(files, archive, error) from None
            problem = "is truncated" if isinstance(error, EOFError) else "cannot be extracted"
            raise _bad_archive(files, archive, f"{problem} ({_why(error)})") from None
        unpacked = staging / files.folder.name
        lacking = [name for name in files.files if not (unpacked / name).is_file()]
        if lacking:
            raise _bad_archive(files, archive, f"holds no {files.folder.name}/{lacking[0]}")
        if not files.folder.exists():
            unpacked.rename(files.folder)
            return
        for entry in unpacked.iterdir():
            if not (files.folder / entry.name).exists():
                entry.rename(files.folder / entry.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _bad_archive(files: DataFiles, archive: Path, problem: str) -> DatasetBroken:
    return DatasetBroken(
        f"{files.what}: archive {archive} {problem}; delete it and run `trainbench download data={files.name}` "
        "(or run again with data.download=true)"
    )


def _cannot_write(files: DataFiles, archive: Path, error: OSError) -> DatasetMissing:
    return DatasetMissing(f"{files.what}: could not extract {archive} into {archive.parent} ({_why(error)})")


def _missing(files: DataFiles, remedy: str) -> str:
    return (
        f"{files.what} not found: expected {', '.join(files.files)} in {files.folder} "
        f"({remedy}; or download from {files.url} and place the files there)"
    )


def _download(url: str, target: Path, md5: str | None, explain: Any) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(target.suffix + ".part")
    try:
        with urllib.request.urlopen(url, timeout=30) as response, open(partial, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0)
            from tqdm import tqdm

            with tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                desc=target.name,
                file=sys.stdout,
                disable=not sys.stdout.isatty(),
            ) as bar:
                for block in iter(lambda: response.read(1 << 20), b""):
                    out.write(block)
                    bar.update(len(block))
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise DatasetMissing(explain(f"download failed: {error}")) from None
    if md5 is not None and _md5(partial) != md5:
        partial.unlink(missing_ok=True)
        raise DatasetMissing(explain(f"download of {url} was corrupt (md5 mismatch)"))
    shutil.move(partial, target)


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
