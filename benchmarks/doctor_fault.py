"""Does `trainbench doctor` catch a synchronize that waits for nothing? A check of the checker, on a GPU machine.

python benchmarks/doctor_fault.py [--frameworks pytorch,jax] [--out DIR]

Runs the doctor twice through its real command: as installed, then with PyTorch's device synchronize patched to
return at once (a sitecustomize put first on the cells' PYTHONPATH: every process the doctor starts loads it).
The first must pass; the second must FAIL PyTorch's GPU timing, since its blocks then time the queueing alone.
Prints each run's timing lines and verdict, and keeps both outputs under --out. Exit 0 when both came out so,
1 when not, 2 when no PyTorch GPU cell ran (on a CPU a synchronize has nothing to wait for: no fault to catch).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

NO_WAIT = '''"""Written by benchmarks/doctor_fault.py: PyTorch's device synchronize returns at once."""
import importlib.abc
import importlib.machinery
import sys


def no_wait_synchronize(self):
    """The fault: returns at once, whatever the device has queued."""


class _NoWait(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "trainbench.frameworks.pytorch.adapter":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            module.TorchDevice.synchronize = no_wait_synchronize

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _NoWait())
'''


def doctor(frameworks: str, out: Path, pythonpath: str = "") -> tuple[int, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, str(ROOT / "src" / "run.py"), "doctor", "--frameworks", frameworks],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    out.write_text(done.stdout + done.stderr)
    return done.returncode, done.stdout


def timing_lines(stdout: str) -> list[str]:
    """The doctor's timing findings: "<status>  <subject>  timing  <figures>"."""
    return [
        line for line in stdout.splitlines() if line.split()[:1] in (["ok"], ["warn"], ["FAIL"]) and " timing " in line
    ]


def gpu_timing(stdout: str) -> str | None:
    """The PyTorch GPU cell's timing line, or None where no such cell ran."""
    return next(
        (line for line in timing_lines(stdout) if line.split()[1] == "PyTorch" and line.split()[2] != "CPU"), None
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="pytorch", help="the doctor's --frameworks for the sound run")
    parser.add_argument(
        "--out", type=Path, default=None, help="where to keep both outputs (default: a temporary folder)"
    )
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="doctor-fault-"))
    out.mkdir(parents=True, exist_ok=True)

    sound_rc, sound = doctor(args.frameworks, out / "sound.txt")
    faults = out / "no-wait"
    faults.mkdir(exist_ok=True)
    (faults / "sitecustomize.py").write_text(NO_WAIT)
    broken_rc, broken = doctor("pytorch", out / "synchronize-waits-for-nothing.txt", str(faults))

    for title, stdout, rc in (("as installed", sound, sound_rc), ("synchronize waits for nothing", broken, broken_rc)):
        print(f"== {title} (exit {rc})")
        print(*timing_lines(stdout), *(line for line in stdout.splitlines() if line.startswith("Verdict")), sep="\n")
    print(f"outputs: {out}")
    broken_line = gpu_timing(broken)
    if broken_line is None:
        print("doctor_fault: no PyTorch GPU cell ran, so there was no fault to catch: run it on a machine with a GPU")
        return 2
    caught = broken_line.startswith("FAIL") and broken_rc == 1
    print(
        f"doctor_fault: sound run {'passed' if sound_rc == 0 else 'FAILED'}; fault {'caught' if caught else 'MISSED'}"
    )
    return 0 if sound_rc == 0 and caught else 1


if __name__ == "__main__":
    sys.exit(main())
