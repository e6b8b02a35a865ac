"""Print, as uv's flags, the package sources pip is configured with here
(its configuration files and PIP_* variables): ``--index-url``,
``--extra-index-url`` and ``--find-links``, shell-quoted, on one line.

    python scripts/uv_sources.py
"""

import shlex
import subprocess
import sys


def uv_sources():
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                            capture_output=True, text=True).stdout
    flags, seen = [], set()
    for line in listed.splitlines():
        key, _, value = line.strip().partition("=")
        option = key.rsplit(".", 1)[-1]
        values = shlex.split(value.strip("'\""))
        if option == "index-url" and values:
            flags += ["--index-url", values[0]]
        elif option in ("extra-index-url", "find-links"):
            for found in values:
                if (option, found) not in seen:
                    seen.add((option, found))
                    flags += ["--" + option, found]
    return flags


if __name__ == "__main__":
    print(" ".join(shlex.quote(flag) for flag in uv_sources()))
