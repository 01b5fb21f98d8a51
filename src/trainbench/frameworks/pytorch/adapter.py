"""PyTorch adapter: the only module that imports torch for a cell. gpu = CUDA (NVIDIA, or AMD through
ROCm), else Apple MPS.

The training step is what a careful hand-written loop does and no more. Inputs are prepared (scaled,
resized, normalised, laid out) once, on the device, before anything is timed, when they fit in a quarter
of its memory; otherwise each batch is prepared inside the step. Each step gathers its batch by index from
the epoch's permutation, runs forward, loss, backward and the optimizer, and keeps two things for the
epoch's figures: the loss tensor (no kernel) and the argmax of the logits (one kernel); the sums are taken
once, after the epoch's timed block. Nothing in a step reads a value back to the host.

data.pipeline=loader (LoaderTrainer) replaces the resident split by a torch.utils.data.DataLoader with
`data.loader_workers` worker processes preparing each sample on the host (trainbench.data.HostSamples: PIL
resize as torchvision's Resize, / 255, normalise), pinned memory on CUDA, persistent workers; each batch is
copied to the device inside the timed epoch (non_blocking when pinned), and the time each step waited for
its batch is the epoch's input_wait_s.

optimize.* selects how a step runs: eager; `compile` (torch.compile of forward + loss + argmax, with
`compile_mode`, by default the model's own: reduce-overhead, i.e. with CUDA graphs, for the launch-bound
transformers and for ResNet-50; `coordinate_descent_tuning` has Inductor tune its Triton kernels);
`fused_optimizer`; `capture` (CUDA: the whole step, batch gather included, recorded once as a CUDA graph and
replayed per batch; used for the MLPs, whose steps are short and static and where launch overhead is most of the
time). Every choice in force is tagged.

On Apple MPS no events are recorded between timed steps (they are not free there: step_clock), peak memory
comes from one more step probed after the measurements, and the ops that ran on the CPU instead are tagged
(trainbench.frameworks.pytorch.mps).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainbench.frameworks.base import uses_loader
from trainbench.frameworks.pytorch import PyTorchConfig, distributed, mps

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig, DeviceConfig, ModelConfig
    from trainbench.data import Dataset, Split

# Must be set before torch is imported: ops MPS lacks then fall back to the CPU instead of raising.
_FALLBACK = "PYTORCH_ENABLE_MPS_FALLBACK"

PREPARED_SHARE = 0.25  # prepare all inputs up front when they take at most this share of device memory
KEPT_LOGITS_BYTES = 256 * 2**20  # an epoch's logits kept for one argmax after it, when no larger than this
# torch.compile modes that record CUDA graphs, each with the mode that compiles the same way without them
MODE_WITHOUT_GRAPHS = {"reduce-overhead": "default", "max-autotune": "max-autotune-no-cudagraphs"}
CUDA_GRAPH_MODES = tuple(MODE_WITHOUT_GRAPHS)
CAPTURE_WARMUP_STEPS = 3  # eager steps on a side stream before capture, as PyTorch's CUDA-graph recipe asks


class Adapter:
    name = "pytorch"

    def __init__(self, cell: CellConfig) -> None:
        framework = cell.framework
        assert isinstance(framework, PyTorchConfig)
        if framework.mps_fallback:
            os.environ.setdefault(_FALLBACK, "1")
        import torch

        self.torch = torch
        self.cell = cell
        self.device = torch.device("cpu")
        self.backend = "cpu"  # as select_device returned it: what the figures measure (device.type in a real cell)
        # Before any op runs: PyTorch warns only of the first op that falls back to the CPU.
        self.fallback_ops = mps.FallbackOps().install()
        # The step the task got last (a training step, an inference pass, a product): the MPS memory probe
        # runs it once more after the measurements (trainbench.frameworks.pytorch.mps).
        self.probe_step: Callable[[], None] | None = None
        self._probe: mps.Probe | None = None
        self.autocast = {"bfloat16": torch.bfloat16, "float16": torch.float16, None: None}[cell.precision.autocast]
        self.compile_reason: str | None = None
        self.world = distributed.World.from_environment()  # one rank of a data-parallel cell, or the only one

    # -- device -------------------------------------------------------------------------------
    def select_device(self, device: DeviceConfig) -> str:
        from trainbench.frameworks.base import DeviceUnavailable

        torch = self.torch
        if device.name == "cpu":
            backend = "cpu"
        elif torch.cuda.is_available():
            backend = "cuda"
        elif torch.backends.mps.is_available():
            backend = "mps"
        elif device.name == "gpu":
            raise DeviceUnavailable(f"{_no_cuda_reason(torch)}; {_no_mps_reason(torch)}")
        else:
            backend = "cpu"
        self.device = torch.device(backend)
        self.backend = backend
        if self.world.size > 1:
            self.device = distributed.join(torch, backend, self.world)
        precision = self.cell.precision
        if precision.tf32 and precision.autocast is None and backend != "cuda":
            raise DeviceUnavailable(
                f"precision=tf32 needs an NVIDIA GPU (Ampere or newer); this cell got {backend}, "
                "which computes fp32: use precision=fp32"
            )
        tf32 = bool(precision.tf32) and backend == "cuda"
        # "fp32" means true fp32: PyTorch would otherwise use TF32 for cuDNN convolutions by default.
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        torch.backends.cudnn.benchmark = self.cell.framework.cudnn_benchmark  # type: ignore[attr-defined]
        torch.manual_seed(self.cell.seed)
        if self.cell.optimize.compile and backend == "mps":
            self.compile_reason = "torch.compile's MPS backend is a prototype: the model runs eagerly on MPS"
        return backend

    def version(self) -> str:
        return str(self.torch.__version__)

    def versions(self) -> dict[str, str]:
        import torchvision

        torch = self.torch
        tags = {"sw.torch": torch.__version__, "sw.torchvision": torchvision.__version__}
        if self.cell.model.input == "text":
            import transformers

            tags["sw.transformers"] = transformers.__version__
        if self.device.type == "cuda":
            if torch.version.hip:
                tags["sw.rocm"] = torch.version.hip
            else:
                tags["sw.cuda"] = torch.version.cuda or ""
                tags["sw.cudnn"] = str(torch.backends.cudnn.version())
        return tags

    def flags(self) -> dict[str, str]:
        torch = self.torch
        tags = {
            "trainbench.tf32": str(torch.backends.cuda.matmul.allow_tf32).lower(),
            "trainbench.autocast": str(self.autocast).replace("torch.", "") if self.autocast else "none",
            "trainbench.compile": str(self.compiles()).lower(),
            "trainbench.channels_last": str(self.channels_last()).lower(),
            "trainbench.fused_optimizer": str(self.fused()).lower(),
            "trainbench.capture": str(self.captures()).lower(),
            "torch.cudnn_benchmark": str(torch.backends.cudnn.benchmark).lower(),
            "torch.matmul_precision": torch.get_float32_matmul_precision(),
            "torch.mps_fallback": os.environ.get(_FALLBACK, ""),
        }
        if self.compiles():
            tags["torch.compile_mode"] = self.compile_mode()
            tags["torch.coordinate_descent_tuning"] = str(self.tunes_kernels()).lower()
        if self.compile_reason:
            tags["trainbench.compile_reason"] = self.compile_reason
        if self.world.size > 1:
            tags.update(distributed.tags(self.world, self.device))
        return tags

    def synchronize(self) -> None:
        if self.backend == "cuda":
            self.torch.cuda.synchronize()
        elif self.backend == "mps":
            self.torch.mps.synchronize()
        if self.world.size > 1:
            distributed.barrier(self.torch, self.device)

    def num_devices(self) -> int:
        return self.world.size

    def step_clock(self) -> Any:
        from trainbench.timing import HostClock

        if self.backend == "cuda":
            return EventClock(self.torch.cuda.Event, "CUDA events between steps")
        if self.backend == "mps":
            # MPS has events, but they are not free: recording one ends kernel coalescing, commits the command
            # buffer and waits on the stream's dispatch queue (PyTorch's MPSEvent.mm), and their times are host
            # times taken in completion callbacks. Between steps they would slow the very block they time: the
            # task takes its percentiles from a separate synchronized pass instead.
            return None
        return HostClock()

    def peak_device_memory_mb(self) -> float | None:
        if self.backend == "cuda":
            return float(self.torch.cuda.max_memory_allocated()) / 2**20
        if self.backend == "mps":  # no peak counter on MPS: one more step, read after every op
            return self._mps_probe().largest_bytes / 2**20
        return None

    def batch_memory_mb(self) -> tuple[float, float] | None:
        torch = self.torch
        if self.backend == "cuda":
            # The caching allocator's reserved pool against what it could grow to: free memory plus its pool
            # (other processes and the CUDA context are outside both).
            free, _ = torch.cuda.mem_get_info(self.device)
            reserved = torch.cuda.memory_reserved(self.device)
            return torch.cuda.max_memory_reserved(self.device) / 2**20, (free + reserved) / 2**20
        if self.backend == "mps":
            peak = self.peak_device_memory_mb()
            return None if peak is None else (peak, torch.mps.recommended_max_memory() / 2**20)
        return None

    def reset_device_memory(self, model: Any) -> bool:
        """CUDA, one process, eager steps: PyTorch frees every block of a step that ran out of memory once nothing
        refers to its tensors (the caller lets go of the error first). Not under torch.compile or CUDA graphs
        (Dynamo's caches and the graphs' memory pools outlive a probe), nor data-parallel (a rank that runs out
        leaves the others waiting in a collective), nor on MPS (untested) or a CPU (the OOM killer ends the
        process)."""
        import gc

        torch = self.torch
        if self.backend != "cuda" or self.world.size > 1 or self.compiles() or self.captures():
            return False
        self.probe_step = None  # the last step's closure holds its batch and optimizer
        if model is not None:
            model.zero_grad(set_to_none=True)
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)
        return True

    def closing_tags(self) -> dict[str, str]:
        if self.backend == "cuda":
            return {"memory.source": "torch.cuda.max_memory_allocated"}
        if self.backend != "mps":
            return {}
        probe = self._mps_probe()
        self.fallback_ops.ops |= probe.fallback_ops
        return {"memory.source": probe.source, **self.fallback_ops.tags()}

    def _mps_probe(self) -> mps.Probe:
        if self._probe is None:
            self._probe = mps.probe(self.torch, self.probe_step, self.synchronize)
        return self._probe

    def device_indices(self) -> list[int]:
        if self.device.type != "cuda":
            return []
        return list(range(self.world.local_size)) if self.world.size > 1 else [self.device.index or 0]

    # -- model --------------------------------------------------------------------------------
    def build_model(self, model: ModelConfig, data: Dataset) -> Any:
        from trainbench.frameworks.pytorch import models

        self.torch.manual_seed(self.cell.seed)
        network = models.build(model, data).to(self.device)
        if self.channels_last():
            network = network.to(memory_format=self.torch.channels_last)
        return network

    def num_parameters(self, model: Any) -> int:
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

    def flops_per_sample(self, model: Any, data: Dataset, training: bool = True) -> float | None:
        """FLOPs per sample counted by torch.utils.flop_counter on a two-sample batch (training: forward +
        backward). In eval mode so BatchNorm statistics are not touched; the count is the same."""
        from torch.utils.flop_counter import FlopCounterMode

        from trainbench.frameworks.pytorch import models

        torch = self.torch
        inputs, labels = self._resident(data.train.first(2))
        model.eval()
        counter = FlopCounterMode(display=False, custom_mapping=models.flop_formulas())
        with counter:
            if training:
                models.loss_function(self.cell.model)(model(self.prepare(inputs, data)).float(), labels).backward()
            else:
                with torch.no_grad():
                    model(self.prepare(inputs, data))
        model.zero_grad(set_to_none=True)
        model.train()
        return counter.get_total_flops() / len(labels)

    def trainer(self, model: Any, data: Dataset, cell: CellConfig) -> Trainer:
        if self.world.size > 1:
            from trainbench.frameworks.pytorch.data_parallel import DataParallelTrainer

            return DataParallelTrainer(self, model, data, cell)
        trainer = LoaderTrainer(self, model, data, cell) if uses_loader(cell) else Trainer(self, model, data, cell)
        self.probe_step = trainer.probe_step
        return trainer

    # -- matmul -------------------------------------------------------------------------------
    def matmul_step(self, n: int, shape: str, fresh_operands: bool = False) -> Callable[[], None]:
        torch = self.torch
        dtype = self._matmul_dtype()
        generator = torch.Generator(device=self.device).manual_seed(self.cell.seed)
        a_shape, b_shape = ((n, n), (n, n)) if shape == "square" else ((1, n), (n, 1))
        out = torch.empty((a_shape[0], b_shape[1]), device=self.device, dtype=dtype)
        if fresh_operands:

            def draw_and_multiply() -> None:
                a = torch.randn(a_shape, device=self.device, dtype=dtype, generator=generator)
                b = torch.randn(b_shape, device=self.device, dtype=dtype, generator=generator)
                torch.matmul(a, b, out=out)

            return draw_and_multiply
        a = torch.randn(a_shape, device=self.device, dtype=dtype, generator=generator)
        b = torch.randn(b_shape, device=self.device, dtype=dtype, generator=generator)

        def multiply() -> None:
            torch.matmul(a, b, out=out)

        self.probe_step = multiply
        return multiply

    def matmul_element_bytes(self) -> int:
        return int(self.torch.finfo(self._matmul_dtype()).bits // 8)

    def _matmul_dtype(self) -> Any:
        from trainbench.frameworks.base import DeviceUnavailable

        torch = self.torch
        dtype = self.autocast or torch.float32
        try:  # the first product tells whether this device implements the dtype at all
            torch.ones((2, 2), device=self.device, dtype=dtype) @ torch.ones((2, 2), device=self.device, dtype=dtype)
        except (RuntimeError, TypeError) as error:
            reason = str(error).splitlines()[0]
            raise DeviceUnavailable(f"{dtype} matmul not supported on {self.device.type}: {reason}") from None
        return dtype

    # -- inputs -------------------------------------------------------------------------------
    def _resident(self, split: Split) -> tuple[Any, Any]:
        """The split's inputs and labels on the device, as stored (uint8 images: 4x smaller than float)."""
        torch = self.torch
        return torch.from_numpy(split.inputs).to(self.device), torch.from_numpy(split.labels).to(self.device)

    def prepare(self, inputs: Any, data: Dataset) -> Any:
        """uint8 images on the device -> the float input the model takes (scaled, resized, channels,
        normalised, laid out). Token ids go to the model as they are."""
        if data.kind == "text":
            return inputs
        torch = self.torch
        x = inputs.float().div_(255.0)
        if data.needs_resize:
            x = torch.nn.functional.interpolate(
                x, size=(data.image_size, data.image_size), mode="bilinear", align_corners=False
            )
        if x.shape[1] != data.channels:
            x = x.expand(-1, data.channels, -1, -1)
        shape = (1, -1, 1, 1)
        mean = torch.tensor(data.mean, device=self.device).view(shape)
        std = torch.tensor(data.std, device=self.device).view(shape)
        x = (x - mean) / std
        return x.contiguous(memory_format=torch.channels_last if self.channels_last() else torch.contiguous_format)

    def prepared_split(self, split: Split, data: Dataset) -> tuple[Any, Any, bool]:
        """(inputs, labels, prepared): the whole split prepared once when it fits in PREPARED_SHARE of the
        device's memory, else stored as uint8 and prepared per batch inside the step."""
        from trainbench.frameworks.pytorch import models

        inputs, labels = self._resident(split)
        if data.kind == "text":
            return inputs, labels, True
        if models.prepared_bytes(len(labels), data) > PREPARED_SHARE * self._device_memory_bytes():
            return inputs, labels, False
        chunks = [self.prepare(inputs[start : start + 1024], data) for start in range(0, len(labels), 1024)]
        if not chunks:
            return inputs.float(), labels, True
        layout = self.torch.channels_last if self.channels_last() else self.torch.contiguous_format
        return self.torch.cat(chunks).contiguous(memory_format=layout), labels, True

    def _device_memory_bytes(self) -> int:
        torch = self.torch
        if self.device.type == "cuda":
            return int(torch.cuda.get_device_properties(self.device).total_memory)
        if self.device.type == "mps":
            return int(torch.mps.recommended_max_memory())
        import psutil

        return int(psutil.virtual_memory().total)

    # -- optimize.* as it applies here --------------------------------------------------------
    def compiles(self) -> bool:
        return bool(self.cell.optimize.compile) and self.device.type != "mps" and not self.captures()

    def compile_mode(self) -> str:
        one_cuda_gpu = self.device.type == "cuda" and self.world.size == 1
        return self.cell.optimize.torch_compile_mode(self.cell.model, one_cuda_gpu)

    def tunes_kernels(self) -> bool:
        """Inductor's coordinate-descent tuning is in force: asked for, or part of a max-autotune mode."""
        return bool(self.cell.optimize.coordinate_descent_tuning) or self.compile_mode().startswith("max-autotune")

    def compiled(self, function: Any, graphs: bool = True) -> Any:
        """torch.compile in the cell's mode (graphs=False: the same mode without CUDA graphs). Inductor reads
        its tuning switch when it compiles, from a process-wide config: one cell per process makes that safe.

        dynamic=False: every batch size gets a graph of its own, as a bare loop that sees one size has. By
        default the second size seen (the inference task's batch after its batch-1 latency pass, an epoch's
        partial last batch) recompiles into a graph generic in the batch size, which then also serves the
        timed batches, with kernels not specialised to them and, under CUDA graphs, a new recording in the
        next epoch."""
        if self.cell.optimize.coordinate_descent_tuning:
            import torch._inductor.config as inductor_config

            inductor_config.coordinate_descent_tuning = True
        mode = self.compile_mode()
        if not graphs:
            mode = MODE_WITHOUT_GRAPHS.get(mode, mode)
        return self.torch.compile(function, mode=mode, dynamic=False)

    def graphs_compiled(self) -> bool:
        """torch.compile records CUDA graphs (cudagraph trees): the step's outputs live in the graph's memory
        pool, which the next step overwrites."""
        return self.compiles() and self.device.type == "cuda" and self.compile_mode() in CUDA_GRAPH_MODES

    def captures(self) -> bool:
        """Whole-step CUDA graphs: for the MLPs on CUDA (small, static, launch-bound). Not with fp16, whose
        dynamic loss scaling decides on the host whether to step, nor data-parallel (DDP's all-reduce)."""
        from trainbench.config.schema import MlpModel

        torch = self.torch
        return (
            bool(self.cell.optimize.capture)
            and self.device.type == "cuda"
            and self.world.size == 1
            and isinstance(self.cell.model, MlpModel)
            and self.autocast != torch.float16
        )

    def fused(self) -> bool:
        # Fused optimizers: CUDA for SGD/Adam/AdamW; MPS for Adam/AdamW only.
        wanted = bool(self.cell.optimize.fused_optimizer)
        return wanted and (self.device.type == "cuda" or (self.device.type == "mps" and self.cell.optim.name != "sgd"))

    def channels_last(self) -> bool:
        from trainbench.config.schema import VisionModel

        on = bool(self.cell.optimize.channels_last) and isinstance(self.cell.model, VisionModel)
        return on and self.device.type != "mps"  # MPS converts NHWC back internally: no gain measured there

    def autocast_context(self, cache: bool = True) -> contextlib.AbstractContextManager[Any]:
        """torch.autocast when mixed precision is on; a no-op otherwise (entering a disabled autocast still
        costs a few microseconds per step)."""
        if self.autocast is None:
            return contextlib.nullcontext()
        return self.torch.autocast(self.device.type, dtype=self.autocast, cache_enabled=cache)


class EventClock:
    """Device events recorded between steps on the current stream; elapsed times read after the block. The
    events are created before the block (reserve) and reused by later blocks: inside the block a mark is one
    record() call, as in a hand-written loop that times its steps."""

    def __init__(self, event_type: Any, source: str) -> None:
        self.event_type, self.source = event_type, source
        self._pool: list[Any] = []
        self._recorded = 0

    def reserve(self, marks: int) -> None:
        self._pool += [self.event_type(enable_timing=True) for _ in range(marks - len(self._pool))]

    def mark(self) -> None:
        if self._recorded == len(self._pool):  # more marks than reserved: still correct, one allocation
            self._pool.append(self.event_type(enable_timing=True))
        self._pool[self._recorded].record()
        self._recorded += 1

    def durations_s(self) -> list[float]:
        events, self._recorded = self._pool[: self._recorded], 0
        if events:
            events[-1].synchronize()
        return [earlier.elapsed_time(later) / 1000.0 for earlier, later in zip(events, events[1:], strict=False)]


class Trainer:
    """The model, its data, optimizer and loss, bound on the device: what the train, benchmark and inference
    tasks step through (trainbench.frameworks.base.Trainer)."""

    def __init__(self, adapter: Adapter, model: Any, data: Dataset, cell: CellConfig) -> None:
        from trainbench.frameworks.pytorch import models

        torch = adapter.torch
        self.adapter, self.model, self.data, self.cell, self.torch = adapter, model, data, cell, torch
        self.device = adapter.device
        self.batch_size = int(cell.batch_size)
        self.inputs, self.labels, self.prepared = self._training_split()
        self.samples_per_epoch = len(self.labels)
        self.steps_per_epoch = models.ceil_div(self.samples_per_epoch, self.batch_size)
        self.loss_fn = models.loss_function(cell.model)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = models.optimizer(params, cell.optim, fused=adapter.fused(), capturable=adapter.captures())
        self.scaler = torch.amp.GradScaler(self.device.type) if adapter.autocast == torch.float16 else None
        self.generator = torch.Generator(device=self.device).manual_seed(cell.seed)
        self.order = torch.arange(self.samples_per_epoch, device=self.device)
        self.keeps_logits = data.num_classes * self.samples_per_epoch * 4 <= KEPT_LOGITS_BYTES
        self.graphed = adapter.graphs_compiled()
        self._forward = self._forward_function(with_predictions=True)
        # An epoch's partial last batch is compiled without CUDA graphs. With them, its graph would run eagerly
        # in the first epoch and be recorded in the second (cudagraph trees record a graph on its second call),
        # inside a timed epoch: a capture and two host synchronizations. Without, it costs the first epoch's
        # compilation only, and once an epoch the launches a graph would save.
        partial = self.samples_per_epoch % self.batch_size != 0
        self._partial_forward = (
            self._forward_function(with_predictions=True, graphs=False) if self.graphed and partial else None
        )
        self._forward_loss_only: Callable[[Any, Any], tuple[Any, Any]] | None = None
        self._validation: tuple[Any, Any, bool] | None = None
        self._losses: list[Any] = []
        self._predictions: list[Any] = []
        self._captured: CapturedEpoch | None = None

    def _training_split(self) -> tuple[Any, Any, bool]:
        return self.adapter.prepared_split(self.data.train, self.data)

    # -- one step -----------------------------------------------------------------------------
    def _forward_function(self, with_predictions: bool, graphs: bool = True) -> Callable[[Any, Any], tuple[Any, Any]]:
        """forward + loss (+ what the epoch's accuracy needs): what torch.compile gets when compile is on.
        The accuracy needs either the logits (a view, no kernel: kept when an epoch's logits fit
        KEPT_LOGITS_BYTES, their argmax taken once after the epoch) or, when they do not fit or compile
        fuses it for free, their argmax. Autocast's weight cache is off under capture, as CUDA graphs require."""
        model, loss_fn, adapter = self.model, self.loss_fn, self.adapter
        mixed, cache = adapter.autocast is not None, not adapter.captures()
        argmax = with_predictions and (adapter.compiles() or not self.keeps_logits)

        def forward_loss(x: Any, y: Any) -> tuple[Any, Any]:
            logits = model(x)
            loss = loss_fn(logits.float() if mixed else logits, y)
            if not with_predictions:
                return loss, None
            return loss, (logits.argmax(1) if argmax else logits.detach())  # argmax: integers, no graph

        run = adapter.compiled(forward_loss, graphs) if adapter.compiles() else forward_loss

        def autocast_forward_loss(x: Any, y: Any) -> tuple[Any, Any]:
            # Autocast around the compiled function, as in PyTorch's AMP recipe: entered inside it, the compiled
            # DistilBERT step on an H100 spent 11% longer in GEMMs (results/2026-11-22-gpu, calls 11-12).
            with adapter.autocast_context(cache):
                return run(x, y)

        return autocast_forward_loss

    def _update(self, loss: Any) -> None:
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()

    def train_on(self, x: Any, y: Any) -> tuple[Any, Any]:
        partial_forward = self._partial_forward if len(y) != self.batch_size else None
        graphed = self.graphed and partial_forward is None
        self.optimizer.zero_grad(set_to_none=True)
        if graphed:
            self.torch.compiler.cudagraph_mark_step_begin()
        loss, predicted = (partial_forward or self._forward)(x, y)
        self._update(loss)
        if graphed:  # kept until the epoch ends, past the replays that reuse the graph's outputs
            return loss.detach().clone(), predicted.clone()
        return loss, predicted

    def _train_without_metrics(self, x: Any, y: Any) -> None:
        if self._forward_loss_only is None:
            self._forward_loss_only = self._forward_function(with_predictions=False)
        self.optimizer.zero_grad(set_to_none=True)
        if self.graphed:
            self.torch.compiler.cudagraph_mark_step_begin()
        loss, _ = self._forward_loss_only(x, y)
        self._update(loss)

    def _batch(self, index: int) -> tuple[Any, Any]:
        positions = self.order[index * self.batch_size : (index + 1) * self.batch_size]
        x = self.inputs[positions]
        if not self.prepared:
            x = self.adapter.prepare(x, self.data)
        return x, self.labels[positions]

    # -- the train task's epoch ---------------------------------------------------------------
    def begin_epoch(self, epoch: int) -> None:
        self.model.train()
        self.order = self.torch.randperm(self.samples_per_epoch, generator=self.generator, device=self.device)
        self._losses, self._predictions = [], []
        if self.adapter.captures() and self.steps_per_epoch > 1:
            if self._captured is None:
                self._captured = CapturedEpoch(self)
            self._captured.begin(self.order)

    def step(self, index: int) -> None:
        if self._captured is not None and self._captured.covers(index):
            self._captured.replay(index)
            return
        loss, predicted = self.train_on(*self._batch(index))
        self._losses.append(loss.detach())
        self._predictions.append(predicted)

    def probe_step(self) -> None:
        """A step as the epoch runs it, on its first batch, its outputs dropped: what the MPS memory probe runs
        after the last epoch (whose kept losses and logits are still held, as in its last step)."""
        self.train_on(*self._batch(0))

    def end_epoch(self) -> Any:
        from trainbench.frameworks.base import EpochResult

        torch = self.torch
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device, dtype=torch.long)
        if self._captured is not None:
            captured_loss, captured_correct = self._captured.sums()
            loss_sum, correct = loss_sum + captured_loss, correct + captured_correct
        if self._losses:
            first = self.steps_per_epoch - len(self._losses)  # the batches run eagerly (all, or the tail)
            sizes = [
                min(self.batch_size, self.samples_per_epoch - i * self.batch_size)
                for i in range(first, self.steps_per_epoch)
            ]
            eager_loss, eager_correct = self._eager_sums(sizes, self.labels[self.order[first * self.batch_size :]])
            loss_sum, correct = loss_sum + eager_loss, correct + eager_correct
        return EpochResult(loss_sum.item() / self.samples_per_epoch, correct.item() / self.samples_per_epoch)

    def _eager_sums(self, sizes: list[int], labels: Any, dtype: Any = None) -> tuple[Any, Any]:
        """(loss sum, correct predictions) of the eagerly run batches of `sizes` samples, from the losses and
        predictions kept as views during the epoch: the kernels run here, after the timed block."""
        torch = self.torch
        dtype = dtype or torch.float32
        weights = torch.tensor(sizes, device=self.device, dtype=dtype)
        loss_sum = (torch.stack([loss.to(dtype) for loss in self._losses]) * weights).sum()
        predicted = torch.cat(self._predictions)
        if predicted.dim() == 2:  # the kept logits: one argmax for the whole epoch
            predicted = predicted.argmax(1)
        return loss_sum, (predicted == labels).sum()

    def evaluate(self) -> tuple[float | None, float | None]:
        if len(self.data.val) == 0:
            return None, None
        torch = self.torch
        if self._validation is None:
            self._validation = self.adapter.prepared_split(self.data.val, self.data)
        inputs, labels, prepared = self._validation
        self.model.eval()
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device, dtype=torch.long)
        with torch.no_grad():
            for start in range(0, len(labels), self.batch_size):
                x, y = inputs[start : start + self.batch_size], labels[start : start + self.batch_size]
                if not prepared:
                    x = self.adapter.prepare(x, self.data)
                with self.adapter.autocast_context():
                    logits = self.model(x).float()
                loss_sum += self.loss_fn(logits, y) * len(y)
                correct += (logits.argmax(1) == y).sum()
        self.model.train()
        return loss_sum.item() / len(labels), correct.item() / len(labels)

    # -- the benchmark and inference tasks ----------------------------------------------------
    def resident_step(self) -> Callable[[], None]:
        """A training step on the first batch, kept on the device (captured as one CUDA graph under capture)."""
        x, y = self._batch(0)  # prepared here, once, outside the timed steps
        self.model.train()
        if self.adapter.captures():
            return capture_step(self.torch, lambda: self._train_without_metrics(x, y), self.optimizer)

        def one_step() -> None:
            self._train_without_metrics(x, y)

        self.adapter.probe_step = one_step
        return one_step

    def inference_step(self, batch_size: int) -> Callable[[], None]:
        torch = self.torch
        count = min(batch_size, len(self.labels))
        x = self.inputs[:count] if self.prepared else self.adapter.prepare(self.inputs[:count], self.data)
        self.model.eval()
        forward = self.model
        if self.adapter.compiles():
            forward = self.adapter.compiled(self.model)

        def predict() -> None:
            with torch.inference_mode(), self.adapter.autocast_context():
                forward(x)

        if self.adapter.captures():
            return capture_step(torch, predict, None)
        self.adapter.probe_step = predict
        return predict


class LoaderTrainer(Trainer):
    """data.pipeline=loader: batches from a torch.utils.data.DataLoader, prepared on the host by its workers
    and copied to the device inside the timed epoch. The iterator is made by the epoch's first step, so
    starting the workers (the first epoch; later ones reuse them) is timed too, as a training loop pays it."""

    def _training_split(self) -> tuple[Any, Any, bool]:
        return None, self.torch.from_numpy(self.data.train.labels), True  # the split stays on the host

    def __init__(self, adapter: Adapter, model: Any, data: Dataset, cell: CellConfig) -> None:
        from trainbench.data import HostSamples

        super().__init__(adapter, model, data, cell)
        torch = self.torch
        workers = cell.data.loader_workers
        self.pinned = self.device.type == "cuda"
        self.loader = torch.utils.data.DataLoader(
            HostSamples(data.train, data),
            batch_size=self.batch_size,
            shuffle=True,
            num_workers=workers,
            generator=torch.Generator().manual_seed(cell.seed),
            pin_memory=self.pinned,
            persistent_workers=workers > 0,
        )
        self._batches: Any = None
        self._labels: list[Any] = []
        self.input_wait_s = 0.0

    def begin_epoch(self, epoch: int) -> None:
        self.model.train()
        self._batches, self._losses, self._predictions, self._labels = None, [], [], []
        self.input_wait_s = 0.0

    def step(self, index: int) -> None:
        import time

        if self._batches is None:
            self._batches = iter(self.loader)
        waiting = time.perf_counter()
        x, y = next(self._batches)
        self.input_wait_s += time.perf_counter() - waiting
        x = x.to(self.device, non_blocking=self.pinned)
        if self.adapter.channels_last():
            x = x.contiguous(memory_format=self.torch.channels_last)
        y = y.to(self.device, non_blocking=self.pinned)
        loss, predicted = self.train_on(x, y)
        self._losses.append(loss.detach())
        self._predictions.append(predicted)
        self._labels.append(y)

    def probe_step(self) -> None:
        x, y = next(iter(self.loader))
        self.train_on(x.to(self.device), y.to(self.device))

    def end_epoch(self) -> Any:
        from trainbench.frameworks.base import EpochResult

        loss_sum, correct = self._eager_sums([len(y) for y in self._labels], self.torch.cat(self._labels))
        count = self.samples_per_epoch
        return EpochResult(loss_sum.item() / count, correct.item() / count, self.input_wait_s)


class CapturedEpoch:
    """The full batches of an epoch as one CUDA graph replayed per batch, as a hand-written whole-step capture
    does it (benchmarks/bare_loops.py's graph variant): before each replay the batch's sample positions are
    copied into the graph's static index buffer; the graph gathers the batch, runs forward, backward and the
    optimizer step, and writes the logits to their samples' rows. A last partial batch runs eagerly on the
    same weights, gradients and optimizer state.

    Every kernel here is paid on each of the epoch's steps (the seed MLP's step is ~260 us on an H100, a small
    kernel 1-3 us), so the metrics cost one kernel beyond a bare graph's: the logits written to their rows.
    The loss and accuracy are computed from those rows after the timed block, by the step's own loss function.
    (The earlier form, with an in-graph step counter and loss sum, ran 0.3% slower on an H100; the logits'
    copy costs 1.5-2%: results/2026-11-24-h100, calls 65-66.) When an epoch's logits are too large to keep
    (KEPT_LOGITS_BYTES), the graph keeps their argmax and sums the loss instead: two kernels and the argmax."""

    def __init__(self, trainer: Trainer) -> None:
        torch = trainer.torch
        self.trainer, self.torch = trainer, torch
        size, device = trainer.batch_size, trainer.device
        self.full_steps = trainer.samples_per_epoch // size
        self.order = torch.arange(trainer.samples_per_epoch, device=device)
        # The epoch's full batches as rows of the permutation (a view): row i is what replay(i) copies in.
        self.batches = self.order[: self.full_steps * size].view(self.full_steps, size)
        self.positions = self.batches[0].clone()  # the graph's static index buffer
        self.loss_sum: Any = None if trainer.keeps_logits else torch.zeros((), device=device)
        # Row i: the prediction for sample i (logits or their argmax), made in the first warm-up run, whose
        # shape and dtype it takes; the warm-ups run before the capture records any address.
        self.predictions: Any = None
        self.graph = _record(torch, self._body, trainer.optimizer)
        self.begin(self.order)

    def _body(self) -> None:
        trainer, positions = self.trainer, self.positions
        x = trainer.inputs.index_select(0, positions)
        if not trainer.prepared:
            x = trainer.adapter.prepare(x, trainer.data)
        y = trainer.labels.index_select(0, positions)
        loss, predicted = trainer._forward(x, y)
        loss.backward()
        trainer.optimizer.step()
        if self.predictions is None:
            shape = (self.trainer.samples_per_epoch, *predicted.shape[1:])
            self.predictions = self.torch.zeros(shape, dtype=predicted.dtype, device=predicted.device)
        self.predictions.index_copy_(0, positions, predicted.detach())
        if self.loss_sum is not None:
            self.loss_sum.add_(loss.detach(), alpha=trainer.batch_size)

    def begin(self, order: Any) -> None:
        self.order.copy_(order)
        if self.loss_sum is not None:
            self.loss_sum.zero_()

    def covers(self, index: int) -> bool:
        return index < self.full_steps

    def replay(self, index: int) -> None:
        self.positions.copy_(self.batches[index])
        self.graph.replay()

    def sums(self) -> tuple[Any, Any]:
        """(loss sum, correct predictions) over the captured batches: a few kernels once an epoch, after its
        timed block."""
        covered = self.batches.view(-1)
        predicted = self.predictions.index_select(0, covered)
        labels = self.trainer.labels.index_select(0, covered)
        loss_sum = self.loss_sum
        if predicted.dim() == 2:  # kept logits: the loss as each step computed it (a batch mean), summed
            loss_sum = self.trainer.loss_fn(predicted.float(), labels) * len(labels)
            predicted = predicted.argmax(1)
        return loss_sum, (predicted == labels).sum()


def _record(torch: Any, body: Callable[[], None], optimizer: Any) -> Any:
    """PyTorch's whole-network capture recipe: a few eager runs on a side stream (allocations, cuBLAS
    handles, optimizer state), then gradients set to None so backward allocates them from the graph's pool,
    then one recorded run. (The forward's autocast runs without its weight cache under capture.)"""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(CAPTURE_WARMUP_STEPS):
            if optimizer is not None:
                optimizer.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        body()
    return graph


def capture_step(torch: Any, body: Callable[[], Any], optimizer: Any) -> Callable[[], None]:
    """`body` (a train step on a fixed batch, or a forward pass) recorded once as a CUDA graph."""
    return _record(torch, body, optimizer).replay


def _no_cuda_reason(torch: Any) -> str:
    if torch.version.cuda is None and torch.version.hip is None:
        return f"no CUDA device (this torch {torch.__version__} is built without CUDA)"
    return f"no CUDA device (torch {torch.__version__} built for CUDA {torch.version.cuda} found none)"


def _no_mps_reason(torch: Any) -> str:
    if not torch.backends.mps.is_built():
        return "MPS not available (this torch is not built with MPS: Apple silicon macOS only)"
    return "MPS not available (needs macOS 12.3+ on Apple silicon)"


if TYPE_CHECKING:
    from trainbench.frameworks import base
    from trainbench.frameworks.pytorch.data_parallel import DataParallelTrainer

    def _held_to_the_contract(
        adapter: Adapter,
        trainer: Trainer,
        loader_trainer: LoaderTrainer,
        data_parallel_trainer: DataParallelTrainer,
        event_clock: EventClock,
    ) -> None:
        """trainbench.frameworks.load imports adapters by name, so no call site ties them to the contract: this
        does. mypy checks each class against the Protocol it stands for and names any member it lacks."""
        _adapter: base.Framework = adapter
        _trainer: base.Trainer = trainer
        _loader_trainer: base.Trainer = loader_trainer
        _data_parallel_trainer: base.Trainer = data_parallel_trainer
        _event_clock: base.StepClock = event_clock
