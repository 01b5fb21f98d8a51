"""Compare local cells with each other and with published reference runs: tables, plots, one HTML page.

    python src/report.py                                  # experiment trainbench -> outputs/report/
    python src/report.py --sweep RUN_ID                   # one sweep, with the references of its models
    python src/report.py --model resnet50 --baseline "NVIDIA A100-SXM4-80GB" --out my-report/
    python src/report.py --filter "tags.`hw.label` = 'Apple M1 Max GPU'"

Writes report.md, report.html (self-contained), report.json and the plots (with their data as .json) into
--out (default outputs/report, git-ignored), and logs them as a run `trainbench.kind=report`.
See trainbench/report/.
"""

import sys

from trainbench.report import cli

if __name__ == "__main__":
    sys.exit(cli.main())
