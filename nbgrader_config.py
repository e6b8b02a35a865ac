"""nbgrader configuration for the course (see instructors/ in the book)."""

c = get_config()  # noqa: F821  (nbgrader injects get_config)

c.CourseDirectory.course_id = "transformers"
# The source notebooks (with solutions) live in solutions/NN_slug/, and the
# student versions are released into chapters/NN_slug/, which the book
# renders.
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "chapters"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"

# The per-cell timeout of nbgrader's own commands (the ExecutePreprocessor
# form is ignored by nbgrader). `make grade` sets its own, --timeout
# (60 s by default), which is the one that grades the class.
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True

# Released notebooks carry no outputs.
c.ClearOutput.enabled = True

# Autograding: the kernel only runs the student's code on the grader's
# cases and hands back the results; each test cell's verdict is decided
# in the grader's process (see course_tools/verdicts.py).
from course_tools.autograde_steps import (  # noqa: E402
    autograde_preprocessors,
)

c.Autograde.autograde_preprocessors = autograde_preprocessors()
# Exercise and test cells carry the `skip-execution` tag so that the book
# does not run them; the autograder must run every cell.
c.Execute.skip_cells_with_tag = "never-skipped-by-the-autograder"

# Student code may print to stderr or warn; only errors cost points.
c.IgnorePattern.pattern = r"(?s).*Warning.*"

# The course's time zone: due dates given without one are read in it,
# and the summary and the feedback show times in it (an IANA name).
c.Exchange.timezone = "UTC"

# Late policy (instructors/term.md): a share of a notebook's score per
# day, or part of a day, late; nbgrader's own are "none" and "zero"
# (c.LateSubmissionPlugin.penalty_method, with plugin_class left as is).
c.AssignLatePenalties.plugin_class = "course_tools.classroom.late.SharePerDay"
c.SharePerDay.share = 0.1
c.SharePerDay.grace_minutes = 0
