"""The old name of :mod:`storages.tools.cli.main`, kept for the ``checkpoint-storages`` script of
an install made before the move (its entry point names ``storages.cli:main``) and for ``python -m
storages.cli``.

Unlike the other old paths this one does not warn: what imports it is a script the operator did
not write and can only renew by reinstalling, and a warning would reach every command's stderr.
"""

from __future__ import annotations

from .tools.cli.main import *  # noqa: F403
from .tools.cli.main import __all__ as __all__

if __name__ == "__main__":
    import sys

    sys.exit(main())  # noqa: F405
