"""``python -m alkstore._cli``: the ``alkstore`` command without its console script."""

from __future__ import annotations

import sys

from alkstore._cli import main

sys.exit(main())
