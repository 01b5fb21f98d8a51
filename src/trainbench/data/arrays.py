"""A dataset in memory, the same for every framework: inputs and int64 labels as NumPy arrays (image inputs uint8
(N, C, H, W); text inputs int64 token ids (N, seq_len) with 0 as padding), and the host-side image work that
data.pipeline=loader does inside the timed epoch (HostSamples, prepare_images).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
