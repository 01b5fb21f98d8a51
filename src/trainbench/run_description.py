"""A cell run's description: MLflow's `mlflow.note.content`, which the UI shows at the top of the run's page
(Markdown), so that the page leads with the run's figures rather than its tags:

    **1,204 ± 31 samples/s** (95%, 2 repeats) · finished
    mlp train, hidden [3000, 1000], synthetic 32 px, 8192 x 3 epochs, bs64, fp32, timed: epoch
    pytorch 2.9.1 on AMD EPYC 7763 CPU (64 cores) · 1.84 TFLOPS achieved, MFU 3.1% · compile 1.20 s · peak host
    memory 1.2 GiB

A cell that did not finish leads with its outcome and reason (`**unavailable**: no GPU visible to ...`). The
headline is quoted as every other screen quotes it (trainbench.figures); the setting is the run's
trainbench.setting_name. Written as the cell's run is closed, from what the run recorded.

Light on purpose: the sweep's process imports it (MLflow only through the client it is given).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainbench import figures, untrusted
from trainbench.measure import hardware
from trainbench.store.runs import setting_name

NOTE_TAG = "mlflow.note.content"  # MLflow's own: the run's description in the UI
MAX_REASON_CHARS = 500


def describe(
    tags: Mapping[str, str], params: Mapping[str, str], metrics: Mapping[str, float], outcome: str, reason: str | None
) -> str:
    """The description of a run with these tags, params and metrics, closed with `outcome` and `reason`."""
    headline = _headline(params, metrics, tags)
    if outcome == "finished" and headline:
        lines = [f"{headline} · finished"]
    else:
        # A reason can quote what a cell read (a data file's error, a path): text on the page, never HTML or a link;
        # its secrets masked first (masking stops at the `&` of an entity)
        first_line = (reason or "no reason recorded").strip().splitlines()[0][:MAX_REASON_CHARS]
        why = untrusted.markdown_text(untrusted.redact(first_line))
        lines = [f"**{outcome}**: {why}" + (f" · {headline}" if headline else "")]
    lines.append(setting_name(dict(tags), dict(params)))
    framework = f"{tags.get('trainbench.framework', '')} {tags.get('trainbench.framework_version', '')}".strip()
    ran = f"{framework} on {hardware.run_label(dict(tags))}" if framework else hardware.run_label(dict(tags))
    lines.append(" · ".join([ran, *_details(metrics)]))
    # Two spaces end a Markdown line without a paragraph between.
    return "  \n".join(line for line in lines if line)


def write(client: Any, run_id: str, outcome: str, reason: str | None) -> None:
    """Write the description of the run `run_id` from what it recorded (credentials and paths masked, as in its
    reason tag)."""
    from trainbench.store.tracking import private

    data = client.get_run(run_id).data
    client.set_tag(run_id, NOTE_TAG, private(describe(data.tags, data.params, data.metrics, outcome, reason)))


def _headline(params: Mapping[str, str], metrics: Mapping[str, float], tags: Mapping[str, str]) -> str:
    """samples/s with its interval and repeats (matmul: its peak TFLOPS), bold; empty when none was recorded."""
    value = metrics.get("samples_per_s")
    if value is not None:
        quoted = figures.quoted(
            value,
            figures.ci95(metrics, "samples_per_s"),
            figures.repeats(params, "samples_per_s"),
            figures.noisy(tags),
        )
        figure, _, details = quoted.partition(" (")
        return f"**{figure} samples/s**" + (f" ({details}" if details else "")
    peak = metrics.get("peak_tflops")
    return f"**{figures.number(peak)} TFLOPS peak**" if peak is not None else ""


def _details(metrics: Mapping[str, float]) -> list[str]:
    """The figures a reader looks for next, where the run recorded them."""
    out = []
    if "tokens_per_s" in metrics:
        out.append(f"{figures.number(metrics['tokens_per_s'])} tokens/s")
    if "achieved_tflops" in metrics:
        mfu = metrics.get("mfu")
        out.append(
            f"{figures.number(metrics['achieved_tflops'])} TFLOPS achieved"
            + (f", MFU {mfu * 100:.1f}%" if mfu is not None else "")
        )
    if "step_time_ms_p50" in metrics:
        out.append(f"step {figures.number(metrics['step_time_ms_p50'])} ms (median)")
    if "latency_ms_p50" in metrics:
        out.append(f"latency {figures.number(metrics['latency_ms_p50'])} ms (median, batch 1)")
    if "compile_time_s" in metrics:
        out.append(f"compile {figures.number(metrics['compile_time_s'])} s")
    for key, what in (("peak_device_memory_mb", "device"), ("peak_host_memory_mb", "host")):
        if key in metrics:
            out.append(f"peak {what} memory {metrics[key] / 1024:.1f} GiB")
            break
    return out
