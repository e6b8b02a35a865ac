"""Where the course is.

The tooling works on the course it is run in: the working directory or
its nearest ancestor holding ``nbgrader_config.py`` and ``solutions/``,
or the folder given with ``--root``; never the folder the tooling is
installed in.
"""

from pathlib import Path

MARKERS = ("nbgrader_config.py", "solutions")


def is_course(folder):
    """Whether ``folder`` holds a course (its config and its sources)."""
    return all((Path(folder) / marker).exists() for marker in MARKERS)


def course_root(root=None):
    """The course's folder: ``root`` itself when given, else the working
    directory or its nearest ancestor that holds a course."""
    if root is not None:
        root = Path(root).resolve()
        if not is_course(root):
            raise ValueError(
                f"--root {root} is not a course: expected a folder holding "
                f"{' and '.join(MARKERS)}/"
            )
        return root
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if is_course(folder):
            return folder
    raise ValueError(
        f"no course in {here} or above it (a folder holding "
        f"{' and '.join(MARKERS)}/): run from the course or pass --root"
    )
