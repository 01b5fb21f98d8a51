"""The files of datasets read from disk: where they are (DataFiles), how they get there (unpacked from an archive
in data.root, else downloaded and md5-checked), and the one-line errors when they are missing or broken.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainbench.config.schema import DataConfig, ImageFiles, TextFiles

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR10_FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"  # torchvision's mirror
SST2_URL = "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip"  # GLUE's own copy
SST2_FILES = ["train.tsv", "dev.tsv"]
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
        fetch(files, download=True)


def unreadable(error: Exception) -> str:
    if isinstance(error, gzip.BadGzipFile):
        return "is not a gzip file"
    if isinstance(error, EOFError):
        return f"is truncated ({error})"
    return f"cannot be read ({why_failed(error)})"


def why_failed(error: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0][:160]}" if text else type(error).__name__


def fetch(files: DataFiles, download: bool) -> None:
    """Every file in files.folder: as they are; else unpacked from the dataset's archive when one lies in
    data.root; else (download) fetched: the archive, md5-checked and unpacked, or (MNIST) each missing file.
    Offline or with download=false, DatasetMissing names the folder and the files."""
    missing = files.missing()
    if not missing:
        return
    archive = files.archive_on_disk()
    if archive is None and not download:
        raise DatasetMissing(missing_remedy(files, "data.download=true"))
    if archive is None and not files.archives:  # files fetched one by one, as .gz
        for name in missing:
            _download(
                f"{files.url}{name}.gz", files.folder / f"{name}.gz", None, lambda why: missing_remedy(files, why)
            )
        return
    if archive is None:
        archive = files.folder.parent / files.url.rsplit("/", 1)[-1]
        _download(files.url, archive, files.md5, lambda why: missing_remedy(files, why))
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
            raise _bad_archive(files, archive, f"{problem} ({why_failed(error)})") from None
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
    return DatasetMissing(f"{files.what}: could not extract {archive} into {archive.parent} ({why_failed(error)})")


def missing_remedy(files: DataFiles, remedy: str) -> str:
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
