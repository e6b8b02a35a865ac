"""The course folder: its nbgrader settings, the submissions waiting in
``submitted/<student>/<assignment>/`` and, per assignment, a template (a
scratch course with a gradebook made by ``nbgrader generate_assignment``)
that each worker copies to grade one student."""

import functools
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from nbgrader.coursedir import CourseDirectory
from traitlets.config.loader import PyFileConfigLoader

CONFIG = "nbgrader_config.py"
STATE = "grading_state.json"
# Each assignment's template, kept between runs while its sources, the
# configuration and the grading settings stay the same (``source_hash``).
TEMPLATES = ".grading-templates"


@dataclass
class Course:
    root: Path
    db_url: str
    source: str
    release: str
    submitted: str
    autograded: str
    feedback: str

    def path(self, folder, *parts):
        return self.root / getattr(self, folder) / Path(*parts)


@dataclass
class Template:
    assignment: str
    course: Path  # scratch course root (config, source files, release)
    db: Path  # its SQLite gradebook, copied by each worker
    notebooks: dict  # notebook name (no suffix) -> released NotebookNode
    source_hash: str


def load_course(root, *, db_url=None):
    """Read ``nbgrader_config.py`` of the course at ``root``."""
    root = Path(root).resolve()
    if not (root / CONFIG).is_file():
        raise ValueError(f"expected a course folder with {CONFIG}, got "
                         f"{root}")
    config = PyFileConfigLoader(CONFIG, path=str(root)).load_config()
    coursedir = CourseDirectory(config=config, root=str(root))
    url = db_url or coursedir.db_url
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/"):
        url = prefix + str(root / url[len(prefix):])
    return Course(root, url, coursedir.source_directory,
                  coursedir.release_directory,
                  coursedir.submitted_directory,
                  coursedir.autograded_directory,
                  coursedir.feedback_directory)


def assignments(course):
    """Every assignment of the source folder (a folder with notebooks)."""
    folder = course.root / course.source
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir()
                  if p.is_dir() and any(p.glob("*.ipynb")))


def submissions(course, assignment_ids):
    """``[(assignment, student, folder)]`` in ``submitted/``, sorted."""
    found = []
    top = course.root / course.submitted
    if not top.is_dir():
        return found
    for student in sorted(p for p in top.iterdir() if p.is_dir()):
        for assignment in assignment_ids:
            folder = student / assignment
            if folder.is_dir():
                found.append((assignment, student.name, folder))
    return found


def hash_folder(folder, *extra):
    """SHA-256 of a folder's file names and bytes (and of ``extra``: more
    folders, or text)."""
    digest = hashlib.sha256()
    for item in extra:
        if isinstance(item, Path):
            item = hash_folder(item)
        digest.update(str(item).encode())
    folder = Path(folder)
    for path in sorted(folder.rglob("*")):
        if (path.is_file() and ".ipynb_checkpoints" not in path.parts
                and "__pycache__" not in path.parts):
            digest.update(str(path.relative_to(folder)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@functools.cache
def _alembic_head():
    """The head revision of nbgrader's gradebook migrations."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader import dbutil

    config = Config()
    config.set_main_option("script_location", dbutil.ALEMBIC_DIR)
    return ScriptDirectory.from_config(config).get_current_head()


def alembic_head_in_process():
    """nbgrader stamps each new gradebook with its schema's revision,
    which it asks of the ``alembic`` command (a Python process that
    takes seconds, and that must be on PATH); read it here, once."""
    import nbgrader.api

    nbgrader.api.get_alembic_version = _alembic_head


def generate_assignment(root, assignment, *, db_url=None):
    """``nbgrader generate_assignment ASSIGNMENT --force`` in the course at
    ``root``, run in this process (no interpreter to start and nbgrader
    to import each time): into the gradebook ``db_url``, or none when
    ``db_url`` is None. Raises with nbgrader's log on failure."""
    from nbgrader.apps import NbGraderAPI

    alembic_head_in_process()
    config = PyFileConfigLoader(CONFIG, path=str(root)).load_config()
    config.CourseDirectory.root = str(root)
    if db_url is None:  # nbgrader's --no-db
        config.GenerateAssignment.no_database = True
        config.SaveCells.enabled = False
    else:
        config.CourseDirectory.db_url = db_url
    api = NbGraderAPI(coursedir=CourseDirectory(config=config),
                      config=config)
    api.log.setLevel("ERROR")
    result = api.generate_assignment(assignment, force=True,
                                     create=db_url is not None)
    if not result["success"]:
        raise RuntimeError(
            f"nbgrader generate_assignment {assignment} failed:\n"
            f"{result.get('log', '')}{result.get('error', '')}"[-3000:])
    return result


def source_hash(course, assignment, *, settings=""):
    """What a grade depends on besides the submission: the assignment's
    source folder, the nbgrader configuration and the grading settings."""
    return hash_folder(course.root / course.source / assignment,
                       (course.root / CONFIG).read_text(), settings)


def make_template(course, assignment, scratch, *, source_hash):
    """Release ``assignment`` into a scratch course with its own gradebook.

    Workers copy this gradebook; the instructor's solutions stay out of
    the workers' courses (only the source folder's other files are
    copied there, as ``nbgrader autograde`` does). A template built by
    an earlier run from the same ``source_hash`` is reused (kept in
    ``TEMPLATES`` in the course folder): releasing takes a second.
    """
    import nbformat

    source = course.root / course.source / assignment
    if not source.is_dir():
        raise ValueError(f"expected assignment folder {source}")
    home = Path(scratch) / "templates" / assignment
    import nbgrader

    key = hashlib.sha256(f"{source_hash}/{nbgrader.__version__}".encode())
    kept = course.root / TEMPLATES / f"{assignment}-{key.hexdigest()[:16]}"
    if (kept / "done").is_file():
        shutil.copytree(kept, home)
        (home / "done").unlink()
    else:
        root = home / "course"
        shutil.copytree(source, root / course.source / assignment)
        shutil.copy(course.root / CONFIG, root / CONFIG)
        generate_assignment(root, assignment,
                            db_url=f"sqlite:///{home / 'gradebook.db'}")
        for path in (root / course.source / assignment).rglob("*.ipynb"):
            path.unlink()  # workers never see the solutions
        _keep_template(home, kept)
    root, db = home / "course", home / "gradebook.db"
    released = root / course.release / assignment
    notebooks = {p.stem: nbformat.read(p, as_version=4)
                 for p in sorted(released.glob("*.ipynb"))}
    return Template(assignment, root, db, notebooks, source_hash)


def _keep_template(home, kept):
    """Keep a copy of the template at ``home`` as ``kept``, in place of
    the assignment's older ones."""
    for old in kept.parent.glob(f"{kept.name[:-17]}-*"):
        if len(old.name) == len(kept.name):
            shutil.rmtree(old, ignore_errors=True)
    partial = kept.with_name(kept.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(home, partial)
    (partial / "done").touch()
    partial.rename(kept)


def register(course, template):
    """Record the assignment in the real gradebook (``generate_assignment``
    against ``course.db_url``, in the template's scratch course)."""
    scratch = template.course.parent / "register"
    if scratch.exists():
        shutil.rmtree(scratch)
    source = course.root / course.source / template.assignment
    shutil.copytree(source, scratch / course.source / template.assignment)
    shutil.copy(course.root / CONFIG, scratch / CONFIG)
    generate_assignment(scratch, template.assignment, db_url=course.db_url)
    shutil.rmtree(scratch)


def load_state(course):
    """What was graded before, for this gradebook: ``{key: entry}``."""
    path = course.root / STATE
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"assignments": {}, "submissions": {}}
    return state.get(_db_key(course), {"assignments": {},
                                       "submissions": {}})


def save_state(course, state):
    path = course.root / STATE
    try:
        everything = json.loads(path.read_text())
    except (OSError, ValueError):
        everything = {}
    everything[_db_key(course)] = state
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(everything, indent=1, sort_keys=True))
    tmp.replace(path)


def _db_key(course):
    """The gradebook URL without a password."""
    url = course.db_url
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        credentials, host = rest.rsplit("@", 1)
        url = f"{scheme}://{credentials.split(':', 1)[0]}@{host}"
    return url
