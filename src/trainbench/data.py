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
import pickle
import re
import shutil
import struct
import sys
import tarfile
import urllib.request
from dataclasses import dataclass, replace
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
MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "val": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


class DatasetMissing(RuntimeError):
    """The dataset is not on disk and could not be downloaded. str() says where it must be."""


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
    """The dataset `cfg` describes, capped to its num_samples / num_val_samples."""
    if isinstance(cfg, TextData):
        return _load_text(cfg, seed)
    if isinstance(cfg, SyntheticImages):
        train, val, classes = synthetic(cfg, seed)
        channels = cfg.channels
    else:
        assert isinstance(cfg, ImageFiles)
        train, val, classes = _read_images(cfg, seed)
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


def missing_files(cfg: DataConfig) -> tuple[str, Path, list[str], str] | None:
    """For a dataset read from files that are not all on disk: (what, folder, files expected, url); else None.
    Reads nothing but the folder listing, so the parent can check a whole sweep before its first cell."""
    if isinstance(cfg, ImageFiles) and cfg.loader == "cifar10":
        folder = Path(cfg.root).resolve() / "cifar-10-batches-py"
        expected = CIFAR10_FILES
        if not all((folder / name).exists() for name in expected):
            return "CIFAR-10", folder, expected, CIFAR10_URL
    if isinstance(cfg, ImageFiles) and cfg.loader == "mnist":
        folder = Path(cfg.root).resolve() / "MNIST" / "raw"
        expected = [name for pair in MNIST_FILES.values() for name in pair]
        if not all((folder / n).exists() or (folder / f"{n}.gz").exists() for n in expected):
            return "MNIST", folder, expected, MNIST_URL
    if isinstance(cfg, TextFiles):
        folder = Path(cfg.root).resolve() / "SST-2"
        if not all((folder / name).exists() for name in SST2_FILES):
            return "SST-2", folder, SST2_FILES, SST2_URL
    return None


def download(cfg: DataConfig) -> None:
    """Fetch a dataset's files now (the `trainbench download` command); raises DatasetMissing when offline."""
    if isinstance(cfg, TextFiles):
        sst2(Path(cfg.root), True, cfg.seq_len, cfg.vocab_size)
    elif isinstance(cfg, ImageFiles):
        _read_images(replace(cfg, download=True), 0)


def _load_text(cfg: TextData, seed: int) -> Dataset:
    if isinstance(cfg, TextFiles):
        train, val, classes = sst2(Path(cfg.root), cfg.download, cfg.seq_len, cfg.vocab_size)
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
    folder = root.resolve() / "SST-2"
    _ensure_unpacked("SST-2", folder, SST2_FILES, SST2_URL, None, download)

    def read(name: str) -> Split:
        sentences, labels = [], []
        with open(folder / name, encoding="utf-8") as tsv:
            header = tsv.readline().rstrip("\n").split("\t")
            text_column, label_column = header.index("sentence"), header.index("label")
            for number, line in enumerate(tsv, start=2):
                fields = line.rstrip("\n").split("\t")
                if len(fields) <= max(text_column, label_column) or not fields[label_column].isdigit():
                    raise ValueError(f"{folder / name}:{number}: expected 'sentence<TAB>label', got {line[:80]!r}")
                sentences.append(fields[text_column])
                labels.append(int(fields[label_column]))
        return Split(tokenize(sentences, seq_len, vocab_size), np.asarray(labels, dtype=np.int64))

    return read("train.tsv"), read("dev.tsv"), 2


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
    images = np.clip(bunch.images * (255.0 / 16.0), 0, 255).astype(np.uint8)[:, None]
    labels = bunch.target.astype(np.int64)
    x_train, x_val, y_train, y_val = train_test_split(
        images, labels, test_size=val_fraction, random_state=seed, stratify=labels
    )
    return Split(x_train, y_train), Split(x_val, y_val), 10


def cifar10(root: Path, download: bool) -> tuple[Split, Split, int]:
    """CIFAR-10 from the python-pickle batches in root/cifar-10-batches-py."""
    folder = root.resolve() / "cifar-10-batches-py"
    _ensure_unpacked("CIFAR-10", folder, CIFAR10_FILES, CIFAR10_URL, CIFAR10_MD5, download)

    def read(names: list[str]) -> Split:
        images, labels = [], []
        for name in names:
            with open(folder / name, "rb") as batch_file:
                batch = pickle.load(batch_file, encoding="bytes")
            images.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            labels.append(np.asarray(batch[b"labels"], dtype=np.int64))
        return Split(np.concatenate(images), np.concatenate(labels))

    return read(CIFAR10_FILES[:5]), read(CIFAR10_FILES[5:]), 10


def mnist(root: Path, download: bool) -> tuple[Split, Split, int]:
    """MNIST from the IDX files in root/MNIST/raw (torchvision's layout; plain or .gz)."""
    folder = root.resolve() / "MNIST" / "raw"
    names = [name for pair in MNIST_FILES.values() for name in pair]

    def path(name: str) -> Path | None:
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.exists():
                return candidate
        return None

    for name in names:
        if path(name) is None:
            if not download:
                raise DatasetMissing(_missing("MNIST", folder, names, MNIST_URL, "data.download=true"))
            _download(
                f"{MNIST_URL}{name}.gz",
                folder / f"{name}.gz",
                None,
                lambda why: _missing("MNIST", folder, names, MNIST_URL, why),
            )

    def found(name: str) -> Path:
        located = path(name)
        assert located is not None  # every file was found or downloaded above
        return located

    def read(split: str) -> Split:
        image_file, label_file = MNIST_FILES[split]
        images = read_idx(found(image_file))
        return Split(images[:, None].astype(np.uint8), read_idx(found(label_file)).astype(np.int64))

    return read("train"), read("val"), 10


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (the MNIST format): magic (0, 0, dtype, ndim), big-endian dims, then the data."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as idx:
        raw = idx.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path} is not an unsigned-byte IDX file")
    shape = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _ensure_unpacked(what: str, folder: Path, files: list[str], url: str, md5: str | None, download: bool) -> None:
    """`files` in `folder`, else download the archive at `url` next to the folder and unpack it there;
    offline or with download=false, raise DatasetMissing naming the folder and the files."""
    if all((folder / name).exists() for name in files):
        return
    if not download:
        raise DatasetMissing(_missing(what, folder, files, url, "data.download=true"))
    archive = folder.parent / url.rsplit("/", 1)[-1]
    _download(url, archive, md5, lambda why: _missing(what, folder, files, url, why))
    if archive.suffix == ".zip":
        import zipfile

        with zipfile.ZipFile(archive) as bundle:
            bundle.extractall(folder.parent)
    else:
        with tarfile.open(archive) as tar:
            tar.extractall(folder.parent, filter="data")


def _missing(what: str, folder: Path, files: list[str], url: str, remedy: str) -> str:
    return (
        f"{what} not found: expected {', '.join(files)} in {folder} "
        f"({remedy}; or download from {url} and place the files there)"
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
