"""MLflow plumbing, one module per concern: where the store is and opening it (`opening`), a store that fails
(`outage`: the guarded client, OutageWatch, StoreFailed), writing into runs and closing them (`writes`), what is
printed and recorded names no secret (`redaction`), and the code a run came from (`provenance`).
"""

from __future__ import annotations

from trainbench.store.tracking.opening import (
    HTTP_RETRY_DEFAULTS,
    configure_http_retries,
    configure_store_environment,
    default_store_folder,
    default_tracking_uri,
    experiment_id,
    open_store,
    resolve_tracking_uri,
)
from trainbench.store.tracking.outage import (
    DEFAULT_OUTAGE_S,
    OUTAGE,
    OutageWatch,
    StoreFailed,
    TrackingUnavailable,
    busy,
    client,
    store_fault,
    unanswered,
)
from trainbench.store.tracking.provenance import git_commit, installed_packages
from trainbench.store.tracking.redaction import (
    as_seen_here,
    one_line_store_errors,
    pasteable,
    private,
    private_line,
    quiet_loggers,
    quiet_logs,
    redact,
    redact_output,
    redact_paths,
    verbose,
)
from trainbench.store.tracking.writes import (
    MAX_PARAM_LENGTH,
    MAX_TAG_LENGTH,
    RUN_STATUS,
    NullLog,
    RunLogger,
    close,
    log_metrics,
    log_params,
    set_tags,
)

__all__ = [
    "DEFAULT_OUTAGE_S",
    "HTTP_RETRY_DEFAULTS",
    "MAX_PARAM_LENGTH",
    "MAX_TAG_LENGTH",
    "NullLog",
    "OUTAGE",
    "OutageWatch",
    "RUN_STATUS",
    "RunLogger",
    "StoreFailed",
    "TrackingUnavailable",
    "as_seen_here",
    "busy",
    "client",
    "close",
    "configure_http_retries",
    "configure_store_environment",
    "default_store_folder",
    "default_tracking_uri",
    "experiment_id",
    "git_commit",
    "installed_packages",
    "log_metrics",
    "log_params",
    "one_line_store_errors",
    "open_store",
    "pasteable",
    "private",
    "private_line",
    "quiet_loggers",
    "quiet_logs",
    "redact",
    "redact_output",
    "redact_paths",
    "resolve_tracking_uri",
    "set_tags",
    "store_fault",
    "unanswered",
    "verbose",
]
