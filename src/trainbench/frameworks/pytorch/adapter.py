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

optimize.compile and the framework's own knobs (trainbench.frameworks.pytorch.PyTorchConfig, `auto` following
optimize=fast) select how a step runs: eager; `compile` (torch.compile of forward + loss + argmax, with
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
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainbench.frameworks.base import NO_DEVICE_EVENTS, uses_loader
from trainbench.frameworks.pytorch import PyTorchConfig, distributed, mps
from trainbench.frameworks.pytorch.trainer import LoaderTrainer, Trainer

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig, DeviceConfig, ModelConfig
    from trainbench.data import Dataset, Split
    from trainbench.frameworks.base import AfterTask, BuiltModel, Description, Matmul, StepClock

# Must be set before torch is imported: ops MPS lacks then fall back to the CPU instead of raising.
_FALLBACK = "PYTORCH_ENABLE_MPS_FALLBACK"

PREPARED_SHARE = 0.25  # prepare all inputs up front when they take at most this share of device memory
# torch.compile modes that record CUDA graphs, each with the mode that compiles the same way without them
MODE_WITHOUT_GRAPHS = {"reduce-overhead": "default", "max-autotune": "max-autotune-no-cudagraphs"}
CUDA_GRAPH_MODES = tuple(MODE_WITHOUT_GRAPHS)


class Adapter:
    """`frameworks.base.Framework` on PyTorch (bind, describe, build, trainer, matmul), and what this package's
    trainers ask of the cell's settings as they apply on the bound device (compile, capture, channels_last, inputs).
    Its Device and Trainers are held to their protocols at the end of this module."""

    name = "pytorch"

    def __init__(self, cell: CellConfig) -> None:
        framework = cell.framework
        assert isinstance(framework, PyTorchConfig)
        if framework.mps_fallback:
            os.environ.setdefault(_FALLBACK, "1")
        import torch

        self.torch = torch
        self.cell = cell
        self.config = framework
        self.device = torch.device("cpu")  # until bind: where tensors go (this rank's GPU, data-parallel)
        # Before any op runs: PyTorch warns only of the first op that falls back to the CPU.
        self.fallback_ops = mps.FallbackOps().install()
        # The step the task got last (a training step, an inference pass, a product): the MPS memory probe
        # runs it once more after the measurements (trainbench.frameworks.pytorch.mps).
        self.probe_step: Callable[[], None] | None = None
        self.autocast = {"bfloat16": torch.bfloat16, "float16": torch.float16, None: None}[cell.precision.autocast]
        self.compile_reason: str | None = None
        self.world = distributed.World.from_environment()  # one rank of a data-parallel cell, or the only one

    def import_ahead(self) -> None:
        """What the cell would import later, imported while a prestarted cell's process waits for its run
        (trainbench.frameworks.preload): every optimizer's constructor imports torch._dynamo, for seconds."""
        if self.cell.task.name != "matmul":  # the one task that builds no optimizer
            import torch._dynamo  # noqa: F401

    # -- the contract (trainbench.frameworks.base.Framework) ---------------------------------------------------
    def bind(self, device: DeviceConfig) -> TorchDevice:
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
        torch.backends.cudnn.benchmark = self.config.cudnn_benchmark
        torch.manual_seed(self.cell.seed)
        if self.cell.optimize.compile and backend == "mps":
            self.compile_reason = "torch.compile's MPS backend is a prototype: the model runs eagerly on MPS"
        return TorchDevice(self, backend)

    def describe(self) -> Description:
        from trainbench.frameworks.base import Description

        return Description(str(self.torch.__version__), {**self._versions(), **self._flags()})

    def _versions(self) -> dict[str, str]:
        import importlib.metadata

        torch = self.torch
        # torchvision's version as installed, not imported: importing it costs seconds of every cell's start, and
        # cells of MLPs and transformers never load it.
        tags = {"sw.torch": torch.__version__, "sw.torchvision": importlib.metadata.version("torchvision")}
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

    def _flags(self) -> dict[str, str]:
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
            # As PyTorch reports them in this process: what OMP_NUM_THREADS, MKL_NUM_THREADS (threads.* params)
            # or a CPU affinity left it.
            "trainbench.intra_op_threads": str(torch.get_num_threads()),
            "trainbench.inter_op_threads": str(torch.get_num_interop_threads()),
        }
        if self.compiles():
            tags["torch.compile_mode"] = self.compile_mode()
            tags["torch.coordinate_descent_tuning"] = str(self.tunes_kernels()).lower()
        if self.compile_reason:
            tags["trainbench.compile_reason"] = self.compile_reason
        if self.world.size > 1:
            tags.update(distributed.tags(self.world, self.device))
        return tags

    def build(self, model: ModelConfig, data: Dataset) -> BuiltModel:
        from trainbench.frameworks.base import BuiltModel
        from trainbench.frameworks.pytorch import models

        self.torch.manual_seed(self.cell.seed)
        network = models.build(model, data).to(self.device)
        if self.channels_last():
            network = network.to(memory_format=self.torch.channels_last)
        trainable = sum(p.numel() for p in network.parameters() if p.requires_grad)
        return BuiltModel(network, trainable, lambda training: self._flops_per_sample(network, data, training))

    def _flops_per_sample(self, network: Any, data: Dataset, training: bool) -> float:
        """FLOPs per sample counted by torch.utils.flop_counter on a two-sample batch (training: forward +
        backward). In eval mode so BatchNorm statistics are not touched; the count is the same."""
        from torch.utils.flop_counter import FlopCounterMode

        from trainbench.frameworks.pytorch import models

        torch = self.torch
        inputs, labels = self._resident(data.train.first(2))
        network.eval()
        counter = FlopCounterMode(display=False, custom_mapping=models.flop_formulas())
        with counter:
            if training:
                models.loss_function(self.cell.model)(network(self.prepare(inputs, data)).float(), labels).backward()
            else:
                with torch.no_grad():
                    network(self.prepare(inputs, data))
        network.zero_grad(set_to_none=True)
        network.train()
        return counter.get_total_flops() / len(labels)

    def trainer(self, network: Any, data: Dataset, cell: CellConfig) -> Trainer:
        if self.world.size > 1:
            from trainbench.frameworks.pytorch.data_parallel import DataParallelTrainer

            return DataParallelTrainer(self, network, data, cell)
        trainer = LoaderTrainer(self, network, data, cell) if uses_loader(cell) else Trainer(self, network, data, cell)
        self.probe_step = trainer.probe_step
        return trainer

    def matmul(self, n: int, shape: str, fresh_operands: bool = False) -> Matmul:
        from trainbench.frameworks.base import Matmul

        torch = self.torch
        dtype = self._matmul_dtype()
        element_bytes = int(torch.finfo(dtype).bits // 8)
        generator = torch.Generator(device=self.device).manual_seed(self.cell.seed)
        a_shape, b_shape = ((n, n), (n, n)) if shape == "square" else ((1, n), (n, 1))
        out = torch.empty((a_shape[0], b_shape[1]), device=self.device, dtype=dtype)
        if fresh_operands:

            def draw_and_multiply() -> None:
                a = torch.randn(a_shape, device=self.device, dtype=dtype, generator=generator)
                b = torch.randn(b_shape, device=self.device, dtype=dtype, generator=generator)
                torch.matmul(a, b, out=out)

            return Matmul(draw_and_multiply, element_bytes)
        a = torch.randn(a_shape, device=self.device, dtype=dtype, generator=generator)
        b = torch.randn(b_shape, device=self.device, dtype=dtype, generator=generator)

        def multiply() -> None:
            torch.matmul(a, b, out=out)

        self.probe_step = multiply
        return Matmul(multiply, element_bytes)

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
        with warnings.catch_warnings():
            # Files read without a copy are read-only; nothing writes them (prepare() makes its float copy).
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
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

    # -- optimize.compile and the framework's knobs as they apply here --------------------------------------------------------
    def compiles(self) -> bool:
        return bool(self.cell.optimize.compile) and self.device.type != "mps" and not self.captures()

    def compile_mode(self) -> str:
        return self.config.torch_compile_mode(self.cell.model, self.device.type == "cuda")

    def tunes_kernels(self) -> bool:
        """Inductor's coordinate-descent tuning is in force: asked for, or part of a max-autotune mode."""
        return self.config.coordinate_descent_tuning or self.compile_mode().startswith("max-autotune")

    def compiled(self, function: Any, graphs: bool = True) -> Any:
        """torch.compile in the cell's mode (graphs=False: the same mode without CUDA graphs). Inductor reads
        its tuning switch when it compiles, from a process-wide config: one cell per process makes that safe.

        dynamic=False: every batch size gets a graph of its own, as a bare loop that sees one size has. By
        default the second size seen (the inference task's batch after its batch-1 latency pass, an epoch's
        partial last batch) recompiles into a graph generic in the batch size, which then also serves the
        timed batches, with kernels not specialised to them and, under CUDA graphs, a new recording in the
        next epoch."""
        if self.config.coordinate_descent_tuning:
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
            self.config.wants("capture", self.cell.optimize)
            and self.device.type == "cuda"
            and self.world.size == 1
            and isinstance(self.cell.model, MlpModel)
            and self.autocast != torch.float16
        )

    def fused(self) -> bool:
        # Fused optimizers: CUDA for SGD/Adam/AdamW; MPS for Adam/AdamW only.
        wanted = self.config.wants("fused_optimizer", self.cell.optimize)
        return wanted and (self.device.type == "cuda" or (self.device.type == "mps" and self.cell.optim.name != "sgd"))

    def channels_last(self) -> bool:
        from trainbench.config.schema import VisionModel

        on = self.config.wants("channels_last", self.cell.optimize) and isinstance(self.cell.model, VisionModel)
        return on and self.device.type != "mps"  # MPS converts NHWC back internally: no gain measured there

    def autocast_context(self, cache: bool = True) -> contextlib.AbstractContextManager[Any]:
        """torch.autocast when mixed precision is on; a no-op otherwise (entering a disabled autocast still
        costs a few microseconds per step)."""
        if self.autocast is None:
            return contextlib.nullcontext()
        return self.torch.autocast(self.device.type, dtype=self.autocast, cache_enabled=cache)


class TorchDevice:
    """The device(s) a PyTorch cell runs on (trainbench.frameworks.base.Device): one CUDA GPU, MPS or the CPU,
    or this rank's GPU of a data-parallel cell, whose synchronize also waits for every rank."""

    def __init__(self, adapter: Adapter, backend: str) -> None:
        self.adapter = adapter  # its last step is what the MPS memory probe runs; its knobs decide `release`
        self.torch = adapter.torch
        self.device = adapter.device
        self.backend = backend
        self.world = adapter.world
        self.count = self.world.size
        self.gpu_indices: list[int] = []
        if self.device.type == "cuda":
            self.gpu_indices = list(range(self.world.local_size)) if self.world.size > 1 else [self.device.index or 0]
        self._probe: mps.Probe | None = None

    def synchronize(self) -> None:
        if self.backend == "cuda":
            self.torch.cuda.synchronize()
        elif self.backend == "mps":
            self.torch.mps.synchronize()
        if self.world.size > 1:
            distributed.barrier(self.torch, self.device)

    def step_clock(self) -> StepClock | None:
        from trainbench.measure.timing import HostClock

        if self.backend == "cuda":
            return EventClock(self.torch.cuda.Event, "CUDA events between steps")
        if self.backend == "mps":
            return None  # its events are not free: no_step_clock_why
        return HostClock()

    @property
    def no_step_clock_why(self) -> str:
        # MPS has events, but they are not free: recording one ends kernel coalescing, commits the command buffer
        # and waits on the stream's dispatch queue (PyTorch's MPSEvent.mm), and their times are host times taken in
        # completion callbacks. Between steps they would slow the very block they time: the task takes its
        # percentiles from a separate synchronized pass instead.
        if self.backend == "mps":
            return "MPS events are not free: recording one commits the command buffer"
        return NO_DEVICE_EVENTS

    def after_task(self) -> AfterTask:
        from trainbench.frameworks.base import AfterTask

        if self.backend == "cuda":
            peak = float(self.torch.cuda.max_memory_allocated()) / 2**20
            return AfterTask(peak, {"memory.source": "torch.cuda.max_memory_allocated"})
        if self.backend != "mps":
            return AfterTask(None, {})
        # no peak counter on MPS: one more step, read after every op
        probe = self._mps_probe()
        fallback_ops = self.adapter.fallback_ops
        fallback_ops.ops |= probe.fallback_ops
        return AfterTask(probe.largest_bytes / 2**20, {"memory.source": probe.source, **fallback_ops.tags()})

    def _mps_probe(self) -> mps.Probe:
        if self._probe is None:
            self._probe = mps.probe(self.torch, self.adapter.probe_step, self.synchronize)
        return self._probe

    def pool_mb(self) -> tuple[float, float] | None:
        torch = self.torch
        if self.backend == "cuda":
            # The caching allocator's reserved pool against what it could grow to: free memory plus its pool
            # (other processes and the CUDA context are outside both).
            free, _ = torch.cuda.mem_get_info(self.device)
            reserved = torch.cuda.memory_reserved(self.device)
            return torch.cuda.max_memory_reserved(self.device) / 2**20, (free + reserved) / 2**20
        if self.backend == "mps":
            return self._mps_probe().largest_bytes / 2**20, torch.mps.recommended_max_memory() / 2**20
        return None

    def release(self, network: Any) -> bool:
        """CUDA, one process, eager steps: PyTorch frees every block of a step that ran out of memory once nothing
        refers to its tensors (the caller lets go of the error first). Not under torch.compile or CUDA graphs
        (Dynamo's caches and the graphs' memory pools outlive a probe), nor data-parallel (a rank that runs out
        leaves the others waiting in a collective), nor on MPS (untested) or a CPU (the OOM killer ends the
        process)."""
        import gc

        torch = self.torch
        if self.backend != "cuda" or self.world.size > 1 or self.adapter.compiles() or self.adapter.captures():
            return False
        self.adapter.probe_step = None  # the last step's closure holds its batch and optimizer
        if network is not None:
            network.zero_grad(set_to_none=True)
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)
        return True


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
        device: TorchDevice,
        trainer: Trainer,
        loader_trainer: LoaderTrainer,
        data_parallel_trainer: DataParallelTrainer,
        event_clock: EventClock,
    ) -> None:
        """trainbench.frameworks.load imports adapters by name, so no call site ties them to the contract: this
        does. mypy checks each class against the Protocol it stands for and names any member it lacks."""
        _adapter: base.Framework = adapter
        _device: base.Device = device
        _trainer: base.Trainer = trainer
        _loader_trainer: base.Trainer = loader_trainer
        _data_parallel_trainer: base.Trainer = data_parallel_trainer
        _event_clock: base.StepClock = event_clock
