"""Compare local cells with each other and with published reference runs: tables, plots, one HTML page.

    python src/report.py --out report/                              # everything in experiment trainbench
    python src/report.py --out report/ --sweep RUN_ID               # one sweep, with references of its models
    python src/report.py --out report/ --model resnet50 --baseline "NVIDIA A100-SXM4-80GB"
    python src/report.py --out report/ --filter "tags.`hw.label` = 'Apple M1 Max GPU'"

Writes report.md, report.html (self-contained), report.json and the plots (with their data as .json) into
--out, and logs them as a run `trainbench.kind=report`. See trainbench/report.py.
"""

import sys

from trainbench import report

if __name__ == "__main__":
    sys.exit(report.main())
