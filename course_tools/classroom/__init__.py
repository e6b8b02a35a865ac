"""Grade a whole class with nbgrader, in parallel, one command::

    python -m course_tools.classroom [ASSIGNMENT ...] [--jobs N] [--force]
                                   [--db URL] [--collect FOLDER]
                                   [--scheduler tcp://HOST:PORT]

Modules: ``course`` (the course folder, its submissions and the templates
each assignment is graded from), ``collect`` (LMS downloads into
``submitted/``, each one its student's), ``archive`` (a student's zip
unpacked under limits), ``repair`` (a submitted notebook put back
into the assignment's shape, with the reasons), ``sandbox`` (launches the
student's kernel as a user of its own in new namespaces), ``zygote``
(the warm template the kernels are forked from), ``launch`` (the lean
launcher that asks the zygote for a kernel), ``box`` (the
kernel's size-capped folder and uid, seen from the grader), ``cgroup``
(memory and process limits for a whole submission), ``files`` (copies of
what a student wrote: no link followed, bounded), ``worker`` (grades one
submission in a scratch course with nbgrader's API; ``lean``: what it
trims of nbgrader's work), ``cluster`` (the
submissions scheduled on Dask, each worker thread with a grading process
of its own), ``parcel`` (submissions, templates and graded folders as
data), ``record`` (writes results into the real gradebook, one writer),
``feedback`` (the student's HTML feedback) and ``grade`` (the batch:
progress, summary, ``grades.csv``).
"""

import sys

# jsonschema, which nbformat imports, builds 38 Lark grammars when
# ``rfc3987_syntax`` is installed (for the "iri" string formats, which no
# notebook schema uses): over a second of CPU in each of the grader's
# processes. Without the module, jsonschema leaves those formats alone.
sys.modules.setdefault("rfc3987_syntax", None)
