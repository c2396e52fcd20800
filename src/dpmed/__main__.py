"""``python -m dpmed``: the ``dpmed`` command, for environments where the script is not on PATH."""

import sys

from dpmed.cli import main

if __name__ == "__main__":
    sys.exit(main())
