"""Per setting a sweep ran, the link that opens MLflow's own compare-runs page: this machine's run next to the
other machines' runs of exactly that setting (trainbench.store.setting), across the user's experiment and the
experiment of published and contributed runs (trainbench.store.shared_runs).

The URL is the one MLflow 3.17's UI builds when you select runs and press Compare
(`#/compare-runs?runs=[ids]&experiments=[ids]`, JSON lists), so it opens with no clicks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from trainbench.measure import hardware
from trainbench.store.runs import COMPARED_RUNS, SETTING_NAME_TAG, search_all, setting_name
from trainbench.store.setting import setting, setting_key

MAX_OTHERS = 7  # one run per other machine and framework, the latest; more columns than this do not read


@dataclass(frozen=True)
class SideBySide:
    setting_name: str
    run_ids: list[str]  # this machine's first
    experiment_ids: list[str]

    def url(self, ui_base: str) -> str:
        return compare_url(ui_base, self.run_ids, self.experiment_ids)


def compare_url(ui_base: str, run_ids: list[str], experiment_ids: list[str]) -> str:
    runs, experiments = json.dumps(run_ids), json.dumps(experiment_ids)
    return f"{ui_base.rstrip('/')}/#/compare-runs?runs={quote(runs, safe='')}&experiments={quote(experiments, safe='')}"


def side_by_side(client: Any, experiment_ids: list[str], mine: set[str]) -> list[SideBySide]:
    """One entry per setting of the runs `mine` that another machine also ran, in the order of `mine`'s names."""
    runs = search_all(client, experiment_ids, COMPARED_RUNS)
    by_setting: dict[Any, list[Any]] = {}
    for run in runs:
        key = setting_key(setting(run.data.params, run.data.tags))
        by_setting.setdefault(key, []).append(run)
    found = []
    for members in by_setting.values():
        own = [r for r in members if r.info.run_id in mine]
        if not own:
            continue
        here = {hardware.run_label(r.data.tags) for r in own}
        latest: dict[tuple[str, str], Any] = {}
        for run in sorted(members, key=lambda r: r.info.start_time or 0):
            label = hardware.run_label(run.data.tags)
            if label not in here:
                latest[(label, run.data.tags.get("trainbench.framework", ""))] = run
        if not latest:
            continue
        others = sorted(latest.values(), key=lambda r: hardware.run_label(r.data.tags))[:MAX_OTHERS]
        chosen = [own[-1], *others]
        name = own[-1].data.tags.get(SETTING_NAME_TAG) or setting_name(own[-1].data.tags, own[-1].data.params)
        experiments = sorted({r.info.experiment_id for r in chosen}, key=experiment_ids.index)
        found.append(SideBySide(name, [r.info.run_id for r in chosen], experiments))
    return sorted(found, key=lambda s: s.setting_name)
