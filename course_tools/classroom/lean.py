"""What the grading process (:mod:`.worker`) changes in nbformat,
nbgrader and SQLAlchemy to grade a submission with less CPU, each with
its reason and what it measured, none changing what is written to the
kept notebooks or recorded in the gradebook (``tests/test_lean.py``
checks that). ``install()`` applies them all, once, in the grading
process only.

Each trim replaces a piece of another package's internals, so each
names the versions it was written against (``written_against``, and its
docstring's first lines); ``tests/test_lean.py`` fails when an installed
version differs. After an upgrade, read the replaced code again in the
new version, run ``tests/test_lean.py`` and the grading tests, then
update the versions here.
"""

import json
from pathlib import Path


def written_against(**versions):
    """Mark a trim with the versions (``{distribution: version}``) of the
    packages whose internals it replaces, as it was written and
    measured."""
    def mark(trim):
        trim.written_against = versions
        return trim
    return mark


def install():
    """Every change below, in this process (the grading process)."""
    for trim in TRIMS:
        trim()


@written_against(nbformat="5.11.1", nbconvert="7.17.2", nbgrader="0.9.6",
                 jsonschema="4.26.0")
def validate_once():
    """Written against nbformat 5.11.1, nbconvert 7.17.2, nbgrader 0.9.6
    and jsonschema 4.26.0 (``nbformat.validate``, nbgrader's
    ``nbgraderformat.common.jsonschema``).

    nbformat validates a notebook against its JSON schema whenever it
    is read or written, nbconvert after each of nbgrader's steps, and
    nbgrader checks each cell's metadata with a schema it compiles anew
    for every cell: a third of this process's work per submission. The
    notebook checks only ever log (nbformat reads and writes an invalid
    notebook all the same), so this process skips them; nbgrader's
    metadata check, which refuses, runs with its schema compiled once."""
    import jsonschema
    import nbformat
    from nbgrader.nbgraderformat import common

    nbformat.validate = _not_again  # read, write and each nbconvert step

    class CompiledOnce:
        compiled = {}

        def __getattr__(self, name):
            return getattr(jsonschema, name)

        def validate(self, instance, schema):
            key = json.dumps(schema, sort_keys=True)
            if key not in self.compiled:
                kind = jsonschema.validators.validator_for(schema)
                kind.check_schema(schema)
                self.compiled[key] = kind(schema)
            self.compiled[key].validate(instance)

    common.jsonschema = CompiledOnce()


@written_against(nbgrader="0.9.6", SQLAlchemy="2.1.9")
def scratch_gradebooks():
    """Written against nbgrader 0.9.6 and SQLAlchemy 2.1.9
    (``nbgrader.api.create_engine``, ``Gradebook``'s engine per opening).

    nbgrader opens its gradebook about ten times per submission, each
    time with a new SQLAlchemy engine, whose dialect compiles the same
    statements anew (a compiled statement is cached per dialect), and
    commits each change to the disk, waiting for it: together a quarter
    of this process's work per submission (chapter 1: 0.195 -> 0.144 s).
    It gets one engine per database path instead, kept for the batch
    (``Gradebook.close`` still closes its connections; ``worker.grade``
    uses one path), and as the gradebooks here are scratch copies, a
    commit does not wait for the disk. (The course's gradebook is
    written by the grader.)"""
    import sqlalchemy
    from nbgrader import api

    engines = {}

    def scratch(connection, record):
        cursor = connection.cursor()
        cursor.execute("PRAGMA synchronous = OFF")
        cursor.execute("PRAGMA journal_mode = MEMORY")
        cursor.close()

    def create_engine(url, **kwargs):
        key = (str(url), tuple(sorted(kwargs.items())))
        if key not in engines:
            engines[key] = sqlalchemy.create_engine(url, **kwargs)
            sqlalchemy.event.listen(engines[key], "connect", scratch)
        return engines[key]

    api.create_engine = create_engine


@written_against(nbformat="5.11.1", nbgrader="0.9.6")
def write_compact():
    """Written against nbformat 5.11.1 and nbgrader 0.9.6
    (``nbformat.v4.writes_json``, ``BytesEncoder``, what
    ``strip_transient`` drops; which copies nbgrader only reads back).

    nbformat writes a notebook as indented JSON, which Python's JSON
    encoder writes in Python, not C: 4 ms a copy of chapter 1's notebook
    (0.5 ms compact), and grading writes four copies per submission. The
    three that only nbgrader reads back are written compact (the same
    notebook, with sources not split into lines); the graded notebook
    that is kept is written as nbformat writes it (``write_kept``)."""
    import nbformat.v4
    from nbformat.v4.nbjson import BytesEncoder

    def writes(nb, **kwargs):
        return json.dumps(_without_transient(nb), cls=BytesEncoder,
                          sort_keys=True, ensure_ascii=False)

    nbformat.v4.writes_json = writes


def write_kept(notebook, path):
    """``notebook`` written to ``path`` as nbformat writes it."""
    from nbformat.v4 import nbjson

    Path(path).write_text(nbjson.writes(notebook) + "\n",
                          encoding="utf-8")


_TRANSIENT = ("orig_nbformat", "orig_nbformat_minor", "signature")


def _without_transient(nb):
    """``nb`` without what nbformat never writes (as ``strip_transient``
    does, on a shallow copy)."""
    metadata = {k: v for k, v in nb.get("metadata", {}).items()
                if k not in _TRANSIENT}
    cells = [cell if "trusted" not in cell.get("metadata", {}) else
             dict(cell, metadata={k: v for k, v in cell["metadata"].items()
                                  if k != "trusted"})
             for cell in nb.get("cells", [])]
    return dict(nb, metadata=metadata, cells=cells)


def _not_again(*args, **kwargs):
    return None


# What install() applies, in order.
TRIMS = (validate_once, scratch_gradebooks, write_compact)
