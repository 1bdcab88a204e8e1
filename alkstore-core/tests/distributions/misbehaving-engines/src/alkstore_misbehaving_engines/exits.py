"""An engine module that exits the interpreter as it is imported."""

import sys

sys.exit(3)
