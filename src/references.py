"""Import published training-speed figures into MLflow as reference runs, next to your own cells.

    python src/references.py                               # references/published-results.csv -> experiment trainbench
    python src/references.py my-colleague.csv --experiment trainbench
    python src/references.py my-figures.csv --dry-run      # validate only

Same columns as references/published-results.csv; a bad row stops the import naming its line (exit 2),
and importing the same figures again changes nothing. See trainbench/references/.
"""

import sys

from trainbench.references import cli

if __name__ == "__main__":
    sys.exit(cli.main())
