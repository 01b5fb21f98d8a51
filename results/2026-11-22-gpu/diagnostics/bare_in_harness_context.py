"""Diagnostic: the bare loop, run after importing what a harness cell imports (config, Hydra/OmegaConf, the
PyTorch adapter, the benchmark task, the runner's worker) and with the worker's parent-watch thread running."""
import runpy, sys, os, threading, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]  # the repository
sys.path[:0] = [str(ROOT / "src")]
import hydra, omegaconf  # noqa
import trainbench.config, trainbench.frameworks.pytorch.adapter, trainbench.tasks.benchmark, trainbench.runner.worker  # noqa
if os.environ.get("DIAG_WATCH"):
    parent = os.getppid()
    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
    threading.Thread(target=watch, daemon=True).start()
sys.argv = [str(ROOT / "benchmarks" / "bare_loops.py"), *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
