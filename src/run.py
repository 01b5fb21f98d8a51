"""trainbench: how fast does training run on this machine?

    python src/run.py                                   # one cell with the defaults (conf/config.yaml)
    python src/run.py model=resnet18 batch_size=32      # one cell, overridden
    python src/run.py -m device=cpu,gpu model=resnet50  # a sweep: one MLflow run per cell

Every cell runs in its own process and is recorded in MLflow; see README.md.
"""

from trainbench.stops import exit_quietly_on_stop

# A stop before the sweep takes charge of stops (Ctrl-C while Hydra loads): exit 130 / 143 / 129, no traceback.
with exit_quietly_on_stop():
    import hydra
    from omegaconf import DictConfig

    from trainbench import cli
    from trainbench.sweep.job import run_job


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def job(cfg: DictConfig) -> dict:
    return run_job(cfg)


if __name__ == "__main__":
    with exit_quietly_on_stop():
        cli.console(job)
