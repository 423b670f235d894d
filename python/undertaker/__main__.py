"""``python -m undertaker ARGS…``: the ``undertaker`` command of this package, exactly.

The process becomes the binary (``exec``), so its pid, stdio, signals and exit status
are the command's own.
"""

from __future__ import annotations

import os
import sys

from . import find_bin


def main() -> None:
    try:
        binary = find_bin()
    except FileNotFoundError as e:
        print(f"undertaker: {e}", file=sys.stderr)
        sys.exit(125)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os.execv(binary, [binary, *sys.argv[1:]])


if __name__ == "__main__":
    main()
