"""Datasets as NumPy arrays, the same for every framework: inputs and int64 labels. Image inputs are
uint8 (N, C, H, W); text inputs are int64 token ids (N, seq_len) with 0 as padding.

Loading happens once, in the cell's process, before anything is timed. With data.pipeline=device (the
default) adapters move the arrays to the device once and do the per-batch work there (scale to [0, 1],
resize, gray -> RGB, normalise), so a training epoch measures the model and not a Python data pipeline.
With data.pipeline=loader that work happens on the host, per sample or per batch, in loader workers, inside
the timed epoch (HostSamples, prepare_images): what a user of a real dataset runs. Keras adapters transpose
to NHWC; that is the only difference between frameworks.

The modules: `arrays` (Dataset, Split, HostSamples), `loading` (load, check_files), `files` (where a dataset's files
are, fetching them), `images` and `text` (each dataset's reader).
"""

from __future__ import annotations

from trainbench.data.arrays import Dataset, HostSamples, Split, prepare_images, resize_bilinear
from trainbench.data.files import (
    CIFAR10_FILES,
    CIFAR10_MD5,
    CIFAR10_URL,
    MNIST_FILES,
    MNIST_URL,
    SST2_FILES,
    SST2_URL,
    DataFiles,
    DatasetBroken,
    DatasetError,
    DatasetMissing,
    archive_on_disk,
    dataset_files,
    download,
    extract_archive,
    fetch,
    files_of,
    missing_files,
    missing_remedy,
)
from trainbench.data.images import DIGITS_SAMPLES, cifar10, cifar10_batch, digits, mnist, mnist_checked, synthetic
from trainbench.data.loading import check_counts, check_files, load
from trainbench.data.text import (
    CLS_ID,
    FIRST_WORD_ID,
    MARKERS_PER_SEQUENCE,
    PAD_ID,
    SEP_ID,
    UNK_ID,
    sst2,
    sst2_rows,
    synthetic_text,
    tokenize,
)

__all__ = [
    "CIFAR10_FILES",
    "CIFAR10_MD5",
    "CIFAR10_URL",
    "CLS_ID",
    "DIGITS_SAMPLES",
    "DataFiles",
    "Dataset",
    "DatasetBroken",
    "DatasetError",
    "DatasetMissing",
    "FIRST_WORD_ID",
    "HostSamples",
    "MARKERS_PER_SEQUENCE",
    "MNIST_FILES",
    "MNIST_URL",
    "PAD_ID",
    "SEP_ID",
    "SST2_FILES",
    "SST2_URL",
    "Split",
    "UNK_ID",
    "archive_on_disk",
    "check_counts",
    "check_files",
    "cifar10",
    "cifar10_batch",
    "dataset_files",
    "digits",
    "download",
    "extract_archive",
    "fetch",
    "files_of",
    "load",
    "missing_files",
    "missing_remedy",
    "mnist",
    "mnist_checked",
    "prepare_images",
    "resize_bilinear",
    "sst2",
    "sst2_rows",
    "synthetic",
    "synthetic_text",
    "tokenize",
]
