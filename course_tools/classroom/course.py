"""The course folder: its nbgrader settings, the submissions waiting in
``submitted/<student>/<assignment>/`` and, per assignment, a template (a
scratch course with a gradebook made by ``nbgrader generate_assignment``)
that each worker copies to grade one student."""

import functools
import hashlib
import json
import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from nbgrader.coursedir import CourseDirectory
from traitlets.config.loader import PyFileConfigLoader

CONFIG = "nbgrader_config.py"
STATE = "grading_state.json"
# A student id is letters, digits, ".", "_" and "-", starting with a
# letter or a digit: it names a folder, a gradebook row and a CSV cell.
STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
ID_RULE = ("expected a student id of letters, digits, '.', '_' and '-' "
           "that starts with a letter or a digit (at most 128 characters)")
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


def id_problem(student):
    """Why ``student`` cannot be a student id (:data:`STUDENT_ID`), or
    None."""
    if STUDENT_ID.fullmatch(student):
        return None
    return ID_RULE


def submissions(course, assignment_ids, refused=None):
    """``[(assignment, student, folder)]`` in ``submitted/``, sorted: real
    folders only, never one reached through a link. A folder whose name
    is no student id (:func:`id_problem`), or a link, goes to
    ``refused`` as ``(assignment, name, reason)``."""
    found = []
    top = course.root / course.submitted
    if not _is_folder(top):
        return found
    for name in sorted(os.listdir(top)):
        student = top / name
        if name.startswith(".") or not _is_folder(student, link_ok=True):
            continue
        for assignment in assignment_ids:
            folder = student / assignment
            if not os.path.lexists(folder):
                continue
            why = id_problem(name)
            if why is None and not _is_folder(student):
                why = "a symbolic link, not a folder: not followed"
            elif why is None and not _is_folder(folder):
                why = (f"submitted/{name}/{assignment} is not a folder "
                       "(a link is not followed)")
            if why is None:
                found.append((assignment, name, folder))
            elif refused is not None:
                refused.append((assignment, name, why))
    return found


def _is_folder(path, link_ok=False):
    """Whether ``path`` is a folder (and not a link to one, unless
    ``link_ok``)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return stat.S_ISDIR(mode) or (link_ok and stat.S_ISLNK(mode)
                                  and os.path.isdir(path))


SKIPPED = {b".ipynb_checkpoints", b"__pycache__"}
HASH_DEPTH = 16  # folders deep that a hash reads


def hash_folder(folder, *extra):
    """SHA-256 of a folder's file names and bytes (and of ``extra``: more
    folders, or text).

    Names are taken as bytes (whatever their encoding); no link is
    followed and only regular files are read (opened with
    ``O_NOFOLLOW`` and checked once open): a link counts by its target's
    name, any other kind of file by its kind, a file that cannot be read
    by its error. So the hash of any folder can be taken."""
    digest = hashlib.sha256()
    for item in extra:
        if isinstance(item, Path):
            item = hash_folder(item)
        digest.update(str(item).encode("utf-8", "surrogateescape"))
    try:
        top = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                      | os.O_CLOEXEC)
    except OSError as error:
        digest.update(f"unreadable folder: {error.strerror}".encode())
        return digest.hexdigest()
    try:
        _hash_into(digest, top, b"", 0)
    finally:
        os.close(top)
    return digest.hexdigest()


def _hash_into(digest, fd, relative, depth):
    try:
        names = sorted(os.listdir(fd))
    except OSError as error:
        digest.update(relative + f"\0unreadable: {error.errno}".encode())
        return
    for text in names:
        name = os.fsencode(text)
        if name in SKIPPED:
            continue
        path = relative + name
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISDIR(info.st_mode):  # a file: its name first
                digest.update(path + b"\0")
            if stat.S_ISDIR(info.st_mode):
                if depth >= HASH_DEPTH:
                    digest.update(b"too deep\0")
                    continue
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY
                                | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                try:
                    _hash_into(digest, child, path + b"/", depth + 1)
                finally:
                    os.close(child)
            elif stat.S_ISREG(info.st_mode):
                digest.update(_hash_file(fd, name))
            elif stat.S_ISLNK(info.st_mode):
                digest.update(b"link\0" + os.readlink(name, dir_fd=fd))
            else:
                digest.update(f"kind {stat.S_IFMT(info.st_mode)}".encode())
        except OSError as error:
            digest.update(path + f"\0unreadable: {error.errno}".encode())


def _hash_file(fd, name):
    """SHA-256 of a regular file, read without following a link."""
    handle = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, dir_fd=fd)
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return b"not a regular file"
        inner = hashlib.sha256()
        while block := os.read(handle, 2**20):
            inner.update(block)
        return inner.digest()
    finally:
        os.close(handle)


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
