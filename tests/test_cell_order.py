"""The cell order (trainbench.runner.order): made once by the sweep's owner, it reaches a launcher's job through
Hydra's own override grammar unchanged, and a job on another machine judges its cell again."""

from __future__ import annotations

import base64
import dataclasses

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from trainbench.config import ConfigError
from trainbench.config.compose import cells_for
from trainbench.runner import order as orders
from trainbench.runner.order import CellOrder, StoreAddress

# A store URI with the characters Hydra's grammar gives meaning to (`:`, `=`, `,`, quotes, `$`).
ADDRESS = StoreAddress("postgresql://u:p@host:5432/db?a=1,b='x'&c=${y}", "7", "abc123", "abc123")


def an_order(*overrides: str) -> CellOrder:
    (cell,) = cells_for(["device=cpu", *overrides])
    return CellOrder(cell, ("device=cpu", *overrides), ADDRESS, index=2, total=3, name_suffix=" seed=1", kinds=("a",))


def test_an_order_crosses_hydras_override_grammar_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    made = an_order("model=mlp", "batch_size=16")
    override = OverridesParser.create().parse_override(orders.launcher_override(made))
    assert override.key_or_group == f"hydra.job.env_set.{orders.ORDER_ENV}"
    monkeypatch.setenv(orders.ORDER_ENV, override.value())
    received = orders.received(judge=True)
    assert received == made
    assert received.name == "pytorch-mlp-cpu-bs16 seed=1"
    assert received.name_on("cuda") == "pytorch-mlp-cuda-bs16 seed=1"


def test_a_job_elsewhere_judges_the_cell_again() -> None:
    made = an_order("model=mlp")
    broken = dataclasses.replace(made, cell=dataclasses.replace(made.cell, batch_size=0))
    packed = base64.urlsafe_b64encode(broken.to_json().encode()).decode()
    assert CellOrder.from_json(base64.urlsafe_b64decode(packed).decode()).cell.batch_size == 0  # the owner's own
    with pytest.raises(ConfigError, match="batch_size"):
        CellOrder.from_json(broken.to_json(), judge=True)


def test_where_a_cell_is_recorded_is_not_part_of_its_config() -> None:
    (cell,) = cells_for(["device=cpu"])
    assert not hasattr(cell, "launch") and not hasattr(cell, "debug")
    with pytest.raises(ConfigError, match="launch"):
        cells_for(["launch.index=3"])
    with pytest.raises(ConfigError, match="debug"):
        cells_for(["debug.inject_fault=abort"])
