"""task=matmul: achievable matrix-multiply throughput, per size n.

Each size: warm-up products, then `steps` products as one block (one synchronization at each end), so a
small product's figure is not its launch-and-wait latency. Per size (step = n): `block_time_s`, the block's
seconds, and `matmul_time_ms`, one product's share of it. What a product is follows `operands`:
- resident (default): random operands drawn once per size, before timing; the block times the products
  alone: `tflops` (and `gbytes_per_s` for the vector shape) per size, `peak_tflops` the best, a log-x plot.
- per_product: new random operands drawn on the device for every product, inside the block, as a
  `timeit(number=steps)` of "draw two random operands, multiply" times them (the Hackintosh blog's
  CPU-vs-GPU chart, conf/experiment/matmul_vector_study.yaml): `block_time_s` is that timeit's total. The
  draws dominate a vector product, so no FLOPs or bandwidth rate is derived from it.
The dtype follows `precision`: fp32 (TF32 off), tf32, mixed_bf16 -> bf16 operands, mixed_fp16 -> fp16
operands. Model, data and optimizer play no part (and are not recorded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from trainbench.config.errors import need
from trainbench.config.registry import schema
from trainbench.config.schema import need_count, whole
from trainbench.tasks.base import DeviceInfo, Task, utilisation

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig
    from trainbench.frameworks.base import Framework, RunLog

SHAPES = ("square", "vector")
OPERANDS = ("resident", "per_product")
# Square products up to 16384 (the published GEMM sweeps); on a CPU 4096 already takes seconds per product.
# The vector product 1 x n @ n x 1 goes from 10^2 to 10^8 elements, as in the published CPU-vs-GPU chart.
DEFAULT_SIZES = {"square": [2**k for k in range(7, 15)], "vector": [10**k for k in range(2, 9)]}
CPU_SQUARE_LIMIT = 4096
# The largest product any device holds: three n x n operands in fp32 within 141 GB (an H200) -> n <= 2^17.
MAX_SIZE = {"square": 2**17, "vector": 2**33}


@schema("task", "matmul")
@dataclass
class MatmulTask(Task):
    uses_model: ClassVar[bool] = False
    unused_groups: ClassVar[tuple[str, ...]] = ("model", "data", "optim")
    timed_region: ClassVar[str] = "steps"
    setting_tags: ClassVar[dict[str, str]] = {"trainbench.matmul_shape": "shape"}
    headline: ClassVar[str | None] = "peak_tflops"  # its total time is the whole sweep of sizes'
    shape: str = "square"  # square: n x n @ n x n (2 n^3 FLOPs) | vector: 1 x n @ n x 1 (2 n FLOPs, memory-bound)
    sizes: list[int] | None = None  # null: square 128..16384 (CPU: up to 4096); vector 10^2..10^8
    warmup_steps: int = 2  # untimed products per size
    steps: int = 10  # timed products per size, as one block
    operands: str = "resident"  # resident: drawn once per size, untimed | per_product: drawn anew inside the block

    def check(self, at: str) -> None:
        need(self.shape in SHAPES, f"{at}.shape", self.shape, f"choose one of {', '.join(SHAPES)}")
        need(self.operands in OPERANDS, f"{at}.operands", self.operands, f"choose one of {', '.join(OPERANDS)}")
        if self.sizes is not None:
            largest = MAX_SIZE.get(self.shape, 1)
            need(
                bool(self.sizes) and all(whole(n) and 1 <= n <= largest for n in self.sizes),
                f"{at}.sizes",
                self.sizes,
                f"a list of sizes from 1 to {largest:,} (no device holds larger {self.shape} products)",
            )
        need_count(self.warmup_steps, f"{at}.warmup_steps", 0, 10**5, "")
        need_count(self.steps, f"{at}.steps", 1, 10**6, "")

    def run_name(self, cell: CellConfig, backend: str) -> str:
        from trainbench.run_naming import run_name

        return run_name(
            framework=cell.framework.name,
            backend=backend,
            task=self.name,
            matmul_shape=self.shape,
            matmul_operands=self.operands,
            precision=cell.precision.name,
        )

    def tags(self, cell: CellConfig) -> dict[str, Any]:
        return {**super().tags(cell), "trainbench.model": "matmul", "trainbench.matmul_shape": self.shape}

    def run(self, framework: Framework, cell: CellConfig, log: RunLog, device: DeviceInfo) -> dict[str, Any]:
        from trainbench import progress
        from trainbench.timing import Timer, indexed, time_block

        sizes = self.sizes or [
            n
            for n in DEFAULT_SIZES[self.shape]
            if self.shape == "vector" or device.backend != "cpu" or n <= CPU_SQUARE_LIMIT
        ]
        per_product = self.operands == "per_product"
        sync = device.bound.synchronize
        points: list[tuple[int, float]] = []
        with Timer(sync) as total:
            for n in sizes:
                matmul = framework.matmul(n, self.shape, fresh_operands=per_product)
                product = indexed(matmul.step)
                time_block(product, self.warmup_steps, sync)
                block = time_block(product, self.steps, sync)
                seconds = block.seconds / block.steps
                metrics = {"block_time_s": block.seconds, "matmul_time_ms": seconds * 1000}
                if not per_product:  # a rate of the products alone: their operands were in place before
                    flops = 2.0 * n**3 if self.shape == "square" else 2.0 * n
                    metrics["tflops"] = flops / seconds / 1e12
                    if self.shape == "vector":  # memory-bound: what matters is how fast both operands stream in
                        metrics["gbytes_per_s"] = (2 * n + 1) * matmul.element_bytes / seconds / 1e9
                log.metrics(metrics, step=n)
                points.append((n, block.seconds if per_product else metrics["tflops"]))
                if per_product:
                    rate = f"{block.seconds:.4f} s for {block.steps} products, operands drawn inside"
                elif self.shape == "vector":
                    rate = f"{metrics['gbytes_per_s']:.2f} GB/s"
                else:
                    rate = f"{metrics['tflops']:.3f} TFLOPS"
                progress.line(f"matmul {self.shape} n={n}: {seconds * 1000:.3f} ms, {rate}")
        log.figure(_figure(points, cell, device.backend, self.shape, per_product, self.steps), "matmul.png")
        if per_product:  # the figure is each size's block_time_s; no rate applies
            return {"total_time_s": total.seconds}
        # peak_tflops: the best this device reached here (device_peak_tflops is the datasheet's figure).
        summary: dict[str, Any] = {"peak_tflops": max(t for _, t in points), "total_time_s": total.seconds}
        if self.shape == "square":  # the vector product is memory-bound: no FLOPs peak applies
            summary.update(utilisation(summary["peak_tflops"], device, cell.precision.name, log))
            summary.pop("achieved_tflops", None)  # that is peak_tflops here
        return summary


def _figure(
    points: list[tuple[int, float]], cell: CellConfig, backend: str, shape: str, per_product: bool, steps: int
) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    axes.plot([n for n, _ in points], [t for _, t in points], marker="o")
    axes.set_xscale("log")
    axes.set_xlabel("n" + (" (n x n @ n x n)" if shape == "square" else " (1 x n @ n x 1)"))
    if per_product:
        axes.set_yscale("log")
        axes.set_ylabel(f"seconds for {steps} products, operands drawn inside")
    else:
        axes.set_ylabel("TFLOPS (block of products)")
    axes.set_title(f"{cell.framework.name} {cell.precision.name} matmul on {backend}")
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    return figure
