"""PyTorch adapter: the only module that imports torch. gpu = CUDA, else Apple MPS."""

from __future__ import annotations

import os

# Must be set before torch is imported: ops MPS lacks then fall back to the CPU instead of raising.
os.environ.setdefault("PYTORCH_ENABLE_MPS_FALLBACK", "1")

from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from trainbench import progress  # noqa: E402
from trainbench.data import Dataset, Split  # noqa: E402
from trainbench.frameworks.base import DeviceUnavailable, EpochStats, OnEpochEnd  # noqa: E402
from trainbench.timing import Timer  # noqa: E402

# Where each torchvision architecture keeps its last Linear layer (replaced when classes != 1000).
_HEADS = {"resnet": "fc", "mobilenet": "classifier.-1", "efficientnet": "classifier.-1",
          "vgg": "classifier.-1", "alexnet": "classifier.-1"}


class Adapter:
    name = "pytorch"

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.device = torch.device("cpu")
        self._mean_std: tuple[torch.Tensor, torch.Tensor] | None = None
        precision = cfg["precision"]
        self.autocast = {"bfloat16": torch.bfloat16, "float16": torch.float16, None: None}[precision["autocast"]]

    # -- device -------------------------------------------------------------------------------
    def select_device(self, requested: str) -> str:
        if requested == "cpu":
            backend = "cpu"
        elif torch.cuda.is_available():
            backend = "cuda"
        elif torch.backends.mps.is_available():
            backend = "mps"
        elif requested == "gpu":
            raise DeviceUnavailable(f"{_no_cuda_reason()}; {_no_mps_reason()}")
        else:
            backend = "cpu"
        self.device = torch.device(backend)
        tf32 = bool(self.cfg["precision"]["tf32"])
        # "fp32" means true fp32: PyTorch would otherwise use TF32 for cuDNN convolutions by default.
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        # Fixed shapes every step: let cuDNN pick its fastest algorithms during warm-up.
        torch.backends.cudnn.benchmark = True
        torch.manual_seed(self.cfg["seed"])
        return backend

    def versions(self) -> dict[str, str]:
        import torchvision

        tags = {"sw.torch": torch.__version__, "sw.torchvision": torchvision.__version__}
        if self.cfg["model"]["transformers"]:
            import transformers

            tags["sw.transformers"] = transformers.__version__
        if self.device.type == "cuda":
            tags["sw.cuda"] = torch.version.cuda or ""
            tags["sw.cudnn"] = str(torch.backends.cudnn.version())
        return tags

    def flags(self) -> dict[str, str]:
        return {
            "trainbench.tf32": str(torch.backends.cuda.matmul.allow_tf32).lower(),
            "trainbench.autocast": str(self.autocast).replace("torch.", "") if self.autocast else "none",
            "trainbench.compile": str(self._compiles()).lower(),
            "trainbench.channels_last": str(self._channels_last()).lower(),
            "torch.cudnn_benchmark": str(torch.backends.cudnn.benchmark).lower(),
            "torch.matmul_precision": torch.get_float32_matmul_precision(),
            "torch.mps_fallback": os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK", ""),
        }

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        elif self.device.type == "mps":
            torch.mps.synchronize()

    def peak_device_memory_mb(self) -> float | None:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated() / 2**20
        if self.device.type == "mps":  # no peak counter on MPS: what the driver holds at the end
            return torch.mps.driver_allocated_memory() / 2**20
        return None

    # -- model --------------------------------------------------------------------------------
    def build_model(self, model_cfg: dict[str, Any], data: Dataset) -> nn.Module:
        torch.manual_seed(self.cfg["seed"])
        if model_cfg["builder"] == "mlp":
            model = mlp(model_cfg, data)
        elif model_cfg["transformers"]:
            model = transformer_classifier(model_cfg, data.num_classes, data.padded)
        elif model_cfg["torchvision"]:
            model = torchvision_model(model_cfg, data.num_classes)
        else:
            raise ValueError(f"model `{model_cfg['name']}` names no PyTorch builder or torchvision constructor")
        model = model.to(self.device)
        if self._channels_last():
            model = model.to(memory_format=torch.channels_last)
        return model

    def num_parameters(self, model: nn.Module) -> int:
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

    def flops_per_sample(self, model: nn.Module, data: Dataset, cfg: dict[str, Any]) -> float | None:
        """Training FLOPs (forward + backward) per sample, counted by torch.utils.flop_counter on a
        two-sample batch. In eval mode so BatchNorm statistics are not touched; the count is the same."""
        from torch.utils.flop_counter import FlopCounterMode

        inputs, labels = self._resident(data.train.first(2))
        model.eval()
        counter = FlopCounterMode(display=False, custom_mapping={
            torch.ops.aten.convolution_backward: _convolution_backward_flops})
        with counter:
            _loss(cfg["model"]["output_activation"])(model(self._prepare(inputs, data)).float(), labels).backward()
        model.zero_grad(set_to_none=True)
        model.train()
        return counter.get_total_flops() / len(labels)

    # -- training -----------------------------------------------------------------------------
    def fit(self, model: nn.Module, data: Dataset, cfg: dict[str, Any], on_epoch_end: OnEpochEnd) -> None:
        images, labels = self._resident(data.train)
        val_images, val_labels = self._resident(data.val)
        step = self._train_step(model, cfg)
        batch_size, count = cfg["batch_size"], len(labels)
        shuffle = torch.Generator().manual_seed(cfg["seed"])
        for epoch in range(1, cfg["epochs"] + 1):
            order = torch.randperm(count, generator=shuffle).to(self.device)
            model.train()
            loss_sum = torch.zeros((), device=self.device)
            correct = torch.zeros((), device=self.device, dtype=torch.long)
            bar = progress.EpochBar((count + batch_size - 1) // batch_size, f"epoch {epoch}/{cfg['epochs']}")
            # Loss and accuracy accumulate on the device: reading them each step would synchronize.
            with Timer(self.synchronize) as timer:
                for start in range(0, count, batch_size):
                    index = order[start : start + batch_size]
                    target = labels[index]
                    loss, logits = step(self._prepare(images[index], data), target)
                    loss_sum += loss.detach().float() * len(index)
                    correct += (logits.detach().argmax(1) == target).sum()
                    bar.update()
            bar.close()
            val_loss, val_accuracy = self._evaluate(model, val_images, val_labels, data, batch_size)
            on_epoch_end(EpochStats(epoch, timer.seconds, count, loss_sum.item() / count,
                                    correct.item() / count, val_loss, val_accuracy))

    def resident_train_step(self, model: nn.Module, data: Dataset, cfg: dict[str, Any]) -> Callable[[], None]:
        images, labels = self._resident(data.train)
        batch = self._prepare(images[: cfg["batch_size"]], data)
        target = labels[: cfg["batch_size"]]
        step = self._train_step(model, cfg)
        model.train()

        def one_step() -> None:
            step(batch, target)

        return one_step

    # -- internals ----------------------------------------------------------------------------
    def _train_step(self, model: nn.Module, cfg: dict[str, Any]) -> Callable[[torch.Tensor, torch.Tensor], Any]:
        optimizer = _optimizer(model, cfg["optim"])
        loss_fn = _loss(cfg["model"]["output_activation"])
        forward = torch.compile(model) if self._compiles() else model
        scaler = torch.amp.GradScaler(self.device.type) if self.autocast == torch.float16 else None
        autocast_on = self.autocast is not None

        def step(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(self.device.type, dtype=self.autocast, enabled=autocast_on):
                logits = forward(x)
                loss = loss_fn(logits.float(), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            return loss, logits

        return step

    @torch.no_grad()
    def _evaluate(self, model: nn.Module, images: torch.Tensor, labels: torch.Tensor, data: Dataset,
                  batch_size: int) -> tuple[float | None, float | None]:
        if len(labels) == 0:
            return None, None
        model.eval()
        loss_fn = _loss(self.cfg["model"]["output_activation"])
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device, dtype=torch.long)
        for start in range(0, len(labels), batch_size):
            target = labels[start : start + batch_size]
            with torch.autocast(self.device.type, dtype=self.autocast, enabled=self.autocast is not None):
                logits = model(self._prepare(images[start : start + batch_size], data)).float()
            loss_sum += loss_fn(logits, target) * len(target)
            correct += (logits.argmax(1) == target).sum()
        return loss_sum.item() / len(labels), correct.item() / len(labels)

    def _resident(self, split: Split) -> tuple[torch.Tensor, torch.Tensor]:
        """The split's uint8 images and labels, moved to the device once (4x smaller than float)."""
        return (torch.from_numpy(split.inputs).to(self.device), torch.from_numpy(split.labels).to(self.device))

    def _prepare(self, inputs: torch.Tensor, data: Dataset) -> torch.Tensor:
        """uint8 image batch on the device -> normalised float input of the model's size and channels.
        Token ids go to the model as they are."""
        if data.kind == "text":
            return inputs
        x = inputs.float().div_(255.0)
        if data.needs_resize:
            x = F.interpolate(x, size=(data.image_size, data.image_size), mode="bilinear", align_corners=False)
        if x.shape[1] != data.channels:
            x = x.expand(-1, data.channels, -1, -1)
        mean, std = self._normalisation(data)
        x = (x - mean) / std
        if self._channels_last():
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    def _normalisation(self, data: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-channel mean and std on the device, made once: a host-to-device copy per batch would
        cost more than the normalisation itself on small models."""
        if self._mean_std is None:
            shape = (1, -1, 1, 1)
            self._mean_std = (torch.tensor(data.mean, device=self.device).view(shape),
                              torch.tensor(data.std, device=self.device).view(shape))
        return self._mean_std

    def _compiles(self) -> bool:
        return bool(self.cfg["compile"])

    def _channels_last(self) -> bool:
        model = self.cfg["model"]
        return bool(self.cfg["channels_last"]) and model["input"] == "image" and model["builder"] != "mlp"

    # -- matmul -------------------------------------------------------------------------------
    def matmul_step(self, n: int, shape: str) -> Callable[[], None]:
        """One product in the cell's precision: n x n @ n x n (square) or 1 x n @ n x 1 (vector)."""
        dtype = self._matmul_dtype()
        generator = torch.Generator(device=self.device).manual_seed(self.cfg["seed"])
        a_shape, b_shape = ((n, n), (n, n)) if shape == "square" else ((1, n), (n, 1))
        a = torch.randn(a_shape, device=self.device, dtype=dtype, generator=generator)
        b = torch.randn(b_shape, device=self.device, dtype=dtype, generator=generator)
        out = torch.empty((a_shape[0], b_shape[1]), device=self.device, dtype=dtype)

        def multiply() -> None:
            torch.matmul(a, b, out=out)

        return multiply

    def matmul_element_bytes(self) -> int:
        return torch.finfo(self._matmul_dtype()).bits // 8

    def _matmul_dtype(self) -> torch.dtype:
        precision = self.cfg["precision"]
        if precision["name"] == "tf32" and self.device.type != "cuda":
            raise DeviceUnavailable(f"TF32 is an NVIDIA tensor-core mode (Ampere or newer); {self.device.type} "
                                    "computes fp32: use precision=fp32")
        dtype = self.autocast or torch.float32
        try:  # the first product tells whether this device implements the dtype at all
            torch.ones((2, 2), device=self.device, dtype=dtype) @ torch.ones((2, 2), device=self.device, dtype=dtype)
        except (RuntimeError, TypeError) as error:
            reason = str(error).splitlines()[0]
            raise DeviceUnavailable(f"{dtype} matmul not supported on {self.device.type}: {reason}") from None
        return dtype


def mlp(model_cfg: dict[str, Any], data: Dataset) -> nn.Sequential:
    """Flatten -> (Linear + activation) per hidden layer -> Linear to the classes (logits)."""
    hidden = hidden_sizes(model_cfg)
    activation = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[model_cfg["activation"]]
    layers: list[nn.Module] = [nn.Flatten()]
    width = data.channels * data.image_size * data.image_size
    for units in hidden:
        layers += [nn.Linear(width, units), activation()]
        width = units
    layers.append(nn.Linear(width, data.num_classes))
    return nn.Sequential(*layers)


def hidden_sizes(model_cfg: dict[str, Any]) -> list[int]:
    if model_cfg["depth"] is not None:
        return [model_cfg["width"]] * model_cfg["depth"]
    return list(model_cfg["hidden_sizes"])


class LogitsOnly(nn.Module):
    """A transformers classifier behind the same interface as a vision model: token ids in, logits out.

    Padding (id 0) is masked out of attention only when the data has padding: an all-ones mask changes
    nothing in the result but makes scaled-dot-product attention leave its fastest (flash) kernel.
    """

    def __init__(self, classifier: nn.Module, mask_padding: bool) -> None:
        super().__init__()
        self.classifier = classifier
        self.mask_padding = mask_padding

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mask = (input_ids != 0).long() if self.mask_padding else None
        return self.classifier(input_ids=input_ids, attention_mask=mask).logits


def transformer_classifier(model_cfg: dict[str, Any], num_classes: int, mask_padding: bool = True) -> nn.Module:
    """A randomly initialised *ForSequenceClassification built from a config object (no hub access)."""
    import transformers

    family = model_cfg["transformers"]
    common = {"vocab_size": model_cfg["vocab_size"], "max_position_embeddings": model_cfg["max_position_embeddings"],
              "num_labels": num_classes}
    if family == "distilbert":
        config = transformers.DistilBertConfig(
            dim=model_cfg["hidden_size"], n_layers=model_cfg["num_layers"], n_heads=model_cfg["num_heads"],
            hidden_dim=model_cfg["intermediate_size"], **common)
        return LogitsOnly(transformers.DistilBertForSequenceClassification(config), mask_padding)
    if family == "bert":
        config = transformers.BertConfig(
            hidden_size=model_cfg["hidden_size"], num_hidden_layers=model_cfg["num_layers"],
            num_attention_heads=model_cfg["num_heads"], intermediate_size=model_cfg["intermediate_size"], **common)
        return LogitsOnly(transformers.BertForSequenceClassification(config), mask_padding)
    raise ValueError(f"model.transformers={family!r}: use distilbert or bert")


def torchvision_model(model_cfg: dict[str, Any], num_classes: int) -> nn.Module:
    import torchvision

    name = model_cfg["torchvision"]
    constructor = getattr(torchvision.models, name)
    if not model_cfg["pretrained"]:
        return constructor(weights=None, num_classes=num_classes)
    weights = torchvision.models.get_model_weights(name).DEFAULT
    cached = Path(torch.hub.get_dir()) / "checkpoints" / Path(weights.url).name
    if not cached.exists():
        raise FileNotFoundError(
            f"pretrained weights for {name} are not in the local cache: expected {cached} "
            f"(download {weights.url} there once when online, or set model.pretrained=false)"
        )
    model = constructor(weights=None)
    model.load_state_dict(torch.load(cached, map_location="cpu", weights_only=True))
    if num_classes != _num_outputs(model):
        _replace_head(model, name, num_classes)
    return model


def _num_outputs(model: nn.Module) -> int:
    return [m for m in model.modules() if isinstance(m, nn.Linear)][-1].out_features


def _replace_head(model: nn.Module, name: str, num_classes: int) -> None:
    """Swap the ImageNet classifier for a fresh one with `num_classes` outputs (fine-tuning setup)."""
    path = next(v for k, v in _HEADS.items() if name.startswith(k))
    parent_path, _, last = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    old = parent[int(last)] if last.lstrip("-").isdigit() else getattr(parent, last)
    new = nn.Linear(old.in_features, num_classes)
    if last.lstrip("-").isdigit():
        parent[int(last)] = new
    else:
        setattr(parent, last, new)


def _convolution_backward_flops(grad_out_shape: Any, x_shape: Any, w_shape: Any, _bias: Any, _stride: Any,
                                _padding: Any, _dilation: Any, transposed: bool, _output_padding: Any, _groups: Any,
                                output_mask: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """FLOPs of a convolution's backward pass: each gradient asked for (input, weight) costs one forward
    convolution. torch's own formula ignores `groups` and overcounts depthwise convolutions (MobileNetV2,
    EfficientNet) by the channel count."""
    from torch.utils.flop_counter import conv_flop_count

    forward = conv_flop_count(list(x_shape), list(w_shape), list(grad_out_shape), transposed)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


def _optimizer(model: nn.Module, optim: dict[str, Any]) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if optim["name"] == "sgd":
        return torch.optim.SGD(params, lr=optim["lr"], momentum=optim["momentum"], weight_decay=optim["weight_decay"])
    if optim["name"] == "adam":
        return torch.optim.Adam(params, lr=optim["lr"], weight_decay=optim["weight_decay"])
    return torch.optim.AdamW(params, lr=optim["lr"], weight_decay=optim["weight_decay"])


def _loss(output_activation: str | None) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    if output_activation is None:
        return F.cross_entropy
    if output_activation == "sigmoid":
        # The seed blog's head: sigmoid outputs fed to categorical cross-entropy, which (as in Keras)
        # first rescales the outputs to sum to one.
        def sigmoid_categorical(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            probs = torch.sigmoid(logits)
            probs = (probs / probs.sum(dim=1, keepdim=True)).clamp_min(1e-7)
            return F.nll_loss(probs.log(), target)

        return sigmoid_categorical
    raise ValueError(f"model.output_activation={output_activation!r}: use null (logits) or sigmoid")


def _no_cuda_reason() -> str:
    if torch.version.cuda is None:
        return f"no CUDA device (this torch {torch.__version__} is built without CUDA)"
    return f"no CUDA device (torch {torch.__version__} built for CUDA {torch.version.cuda} found none)"


def _no_mps_reason() -> str:
    if not torch.backends.mps.is_built():
        return "MPS not available (this torch is not built with MPS: Apple silicon macOS only)"
    return "MPS not available (needs macOS 12.3+ on Apple silicon)"
