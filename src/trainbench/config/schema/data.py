"""The data group: synthetic or file-backed images and text, and how batches reach the device (data.pipeline)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from omegaconf import MISSING

from trainbench.config.errors import need
from trainbench.config.registry import schema
from trainbench.config.schema.base import (
    MAX_IMAGE_SIZE,
    MAX_SAMPLES,
    MAX_SEQ_LEN,
    Choice,
    finite,
    need_count,
    need_optional_count,
)

PIPELINES = ("device", "loader")


@dataclass
class DataConfig(Choice):
    input: ClassVar[str] = "image"  # what the data gives: image | text
    num_samples: int | None = None  # training samples (synthetic: generated; real: the first N; null: all)
    num_val_samples: int | None = None
    # device: the whole split moved to the device once, batches gathered there (no input pipeline timed);
    # loader: a host input pipeline with workers feeds every step (what users of real datasets run): each
    # sample scaled, resized and normalised on the host, each batch copied to the device inside the epoch
    pipeline: str = "device"
    loader_workers: int = 4  # pipeline=loader: workers preparing samples on the host (0: in the training loop)

    def check(self, at: str) -> None:
        need_optional_count(self.num_samples, f"{at}.num_samples", 1, MAX_SAMPLES)
        need_optional_count(self.num_val_samples, f"{at}.num_val_samples", 0, MAX_SAMPLES)
        need(self.pipeline in PIPELINES, f"{at}.pipeline", self.pipeline, f"choose one of {', '.join(PIPELINES)}")
        need_count(self.loader_workers, f"{at}.loader_workers", 0, 256, "e.g. data.loader_workers=4")


@dataclass
class ImageData(DataConfig):
    image_size: int = 32  # what the model sees; anything else than the stored size resizes every batch
    mean: list[float] = field(default_factory=lambda: [0.5])  # per channel, after scaling pixels to [0, 1]
    std: list[float] = field(default_factory=lambda: [0.25])
    scale_only: bool = False  # true: pixels / 255 only (Keras' usual preprocessing), mean and std unused

    def check(self, at: str) -> None:
        super().check(at)
        need_count(self.image_size, f"{at}.image_size", 1, MAX_IMAGE_SIZE, "e.g. data.image_size=224")
        need(all(finite(s) and s > 0 for s in self.std), f"{at}.std", self.std, "every value must be > 0")
        need(all(finite(m) for m in self.mean), f"{at}.mean", self.mean, "every value must be a finite number")

    def channels_given(self) -> int:
        raise NotImplementedError

    def check_per_channel(self, at: str, source: str) -> None:
        """mean and std: one value for every channel or one per channel, as many in both. Run once the channel
        count is known to be valid; `source` says where that count comes from, as the user can change it."""
        channels = self.channels_given()
        counts = (1,) if channels == 1 else (1, channels)
        takes = (
            "1 value each"
            if channels == 1
            else f"1 value each (the same for every channel) or {channels} (one per channel)"
        )
        mean, std = self.mean[0] if self.mean else 0.5, self.std[0] if self.std else 0.25
        example = f"e.g. {at}.mean=[{mean:g}] {at}.std=[{std:g}]"
        for key, values in (("mean", self.mean), ("std", self.std)):
            need(
                len(values) in counts,
                f"{at}.{key}",
                values,
                f"{source}: {at}.mean and {at}.std take {takes}, {example}",
            )
        need(
            len(self.std) == len(self.mean),
            f"{at}.std",
            self.std,
            f"needs as many values as {at}.mean ({len(self.mean)}), {example}",
        )


@schema("data", "synthetic_images")
@dataclass
class SyntheticImages(ImageData):
    """Images generated in memory: no disk, no network."""

    channels: int = 3
    num_classes: int = 10
    learnable: bool = True  # each class drawn around its own pattern, so accuracy is a real check
    num_samples: int | None = 8192
    num_val_samples: int | None = 1024

    def check(self, at: str) -> None:
        super().check(at)
        need_count(self.channels, f"{at}.channels", 1, 64, "e.g. data.channels=3")
        need_count(self.num_classes, f"{at}.num_classes", 2, 100_000, "e.g. data.num_classes=10")
        self.check_per_channel(at, f"{at}.channels={self.channels}")
        need(self.num_samples is not None, f"{at}.num_samples", None, "synthetic data needs a sample count")

    def channels_given(self) -> int:
        return self.channels


# What each real image dataset holds: channels, stored size, classes. Facts, not settings.
IMAGE_DATASETS = {"cifar10": (3, 32, 10), "mnist": (1, 28, 10), "digits": (1, 8, 10)}


@schema("data", "image_files")
@dataclass
class ImageFiles(ImageData):
    """A real image dataset read from files (downloaded when absent and allowed), or bundled (digits)."""

    loader: str = MISSING  # cifar10 | mnist | digits
    root: str = "data"  # folder holding the dataset's own folder (relative to where you launch)
    download: bool = True
    grayscale_to_rgb: bool = False  # repeat a gray channel three times (ImageNet-style models expect RGB)
    val_fraction: float = 0.2  # digits only: the stratified validation share

    def check(self, at: str) -> None:
        super().check(at)
        need(self.loader in IMAGE_DATASETS, f"{at}.loader", self.loader, f"choose one of {', '.join(IMAGE_DATASETS)}")
        need(
            finite(self.val_fraction) and 0 < self.val_fraction < 1,
            f"{at}.val_fraction",
            self.val_fraction,
            "must be between 0 and 1",
        )
        gray = IMAGE_DATASETS[self.loader][0] == 1 and not self.grayscale_to_rgb
        self.check_per_channel(
            at,
            f"{at}={self.name} gives {self.channels_given()}-channel images"
            + (f" (3-channel ones with {at}.grayscale_to_rgb=true)" if gray else ""),
        )

    def channels_given(self) -> int:
        stored = IMAGE_DATASETS[self.loader][0]
        return 3 if self.grayscale_to_rgb and stored == 1 else stored

    @property
    def num_classes(self) -> int:
        return IMAGE_DATASETS[self.loader][2]


@dataclass
class TextData(DataConfig):
    input: ClassVar[str] = "text"
    seq_len: int = 128  # tokens per sequence (padded or truncated); follows the model's
    vocab_size: int = 30522  # token ids are below this; follows the model's

    def check(self, at: str) -> None:
        super().check(at)
        need_count(self.seq_len, f"{at}.seq_len", 2, MAX_SEQ_LEN, "(a [CLS] token and at least one more)")
        need_count(self.vocab_size, f"{at}.vocab_size", 1100, 10**7, "")


@schema("data", "synthetic_text")
@dataclass
class SyntheticText(TextData):
    num_classes: int = 2
    learnable: bool = True  # each sequence hides marker tokens of its class
    num_samples: int | None = 2048
    num_val_samples: int | None = 256

    def check(self, at: str) -> None:
        super().check(at)
        need_count(self.num_classes, f"{at}.num_classes", 2, 100_000, "")
        need(self.num_samples is not None, f"{at}.num_samples", None, "synthetic data needs a sample count")


@schema("data", "text_files")
@dataclass
class TextFiles(TextData):
    loader: str = MISSING  # sst2
    root: str = "data"
    download: bool = True

    def check(self, at: str) -> None:
        super().check(at)
        need(self.loader == "sst2", f"{at}.loader", self.loader, "sst2")

    @property
    def num_classes(self) -> int:
        return 2
