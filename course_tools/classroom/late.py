"""Lateness: the late policy, the course's time zone, and penalties
recomputed from the gradebook.

nbgrader offers two late policies (``none`` and ``zero``);
:class:`SharePerDay` takes a share of the score per day late, as courses
commonly do. ``nbgrader_config.py`` chooses the policy::

    c.AssignLatePenalties.plugin_class = \\
        "course_tools.classroom.late.SharePerDay"
    c.SharePerDay.share = 0.1        # of the notebook's score, per day
    c.SharePerDay.grace_minutes = 5  # lateness under this is forgiven

A penalty depends on the submission time, the due date (an extension
included), the policy and the score, hand-graded points included; the
grader's main process recomputes every penalty from the gradebook
(:func:`rescore`) at the end of each run and before feedback is rebuilt,
so a changed due date, extension or policy, or a hand grade, changes
the penalty without regrading anything.

Times are kept in UTC (nbgrader's gradebook) and shown in the course's
time zone, ``c.Exchange.timezone`` (an IANA name such as
``Europe/Berlin``; default UTC).
"""

import math
import re
from datetime import UTC, datetime

from dateutil import tz as dateutil_tz
from nbgrader.plugins import LateSubmissionPlugin
from traitlets import Float

DAY_S = 24 * 3600


class SharePerDay(LateSubmissionPlugin):
    """A share of the notebook's score for each day, or part of a day,
    late: with ``share = 0.1``, a notebook 2 h late loses 10% of its
    score, one 25 h late 20%, and one 10 days late all of it."""

    share = Float(0.1, help="the share of the notebook's score taken "
                  "per day, or part of a day, late").tag(config=True)
    grace_minutes = Float(0.0, help="lateness under this many minutes "
                          "costs nothing").tag(config=True)

    def late_submission_penalty(self, student_id, score, total_seconds_late):
        if not 0 <= self.share <= 1:
            raise ValueError(f"expected SharePerDay.share between 0 and 1, "
                             f"got {self.share}")
        if total_seconds_late <= self.grace_minutes * 60 or not score:
            return None
        days = math.ceil(total_seconds_late / DAY_S)
        return round(min(1.0, self.share * days) * score, 6)


def days_late(seconds):
    """Started days late, as a policy counts them."""
    return math.ceil(seconds / DAY_S) if seconds > 0 else 0


def load_config(root):
    """The course's nbgrader configuration (``nbgrader_config.py``)."""
    from traitlets.config.loader import PyFileConfigLoader

    from course_tools.classroom.course import CONFIG

    return PyFileConfigLoader(CONFIG, path=str(root)).load_config()


def course_timezone(config):
    """The course's time zone name (``c.Exchange.timezone``), checked."""
    name = str(config.get("Exchange", {}).get("timezone", "") or "UTC")
    if dateutil_tz.gettz(name) is None:
        raise ValueError(f"c.Exchange.timezone: expected a time zone name "
                         f"such as 'Europe/Berlin', got {name!r}")
    return name


def shown(utc, zone):
    """A gradebook time (naive UTC) as ``2026-11-23 23:59 Europe/Berlin``,
    or ``none``."""
    if utc is None:
        return "none"
    local = utc.replace(tzinfo=UTC).astimezone(
        dateutil_tz.gettz(zone))
    return f"{local:%Y-%m-%d %H:%M} {zone}"


def plugin(config):
    """The configured late policy: ``(AssignLatePenalties, plugin)``."""
    from nbgrader.preprocessors import AssignLatePenalties

    step = AssignLatePenalties(config=config)
    step.init_plugin()
    return step, step.plugin_inst


def rescore(gradebook, assignment_names, config):
    """Recompute the late penalty of every submitted notebook of these
    assignments from the gradebook (submission time, due date with any
    extension, the score with hand grades) and the configured policy,
    as nbgrader's ``AssignLatePenalties`` does; return the
    ``(assignment, student)`` whose penalty changed."""
    step, policy = plugin(config)
    changed = set()
    for name in assignment_names:
        for submission in gradebook.assignment_submissions(name):
            late = submission.total_seconds_late
            for notebook in submission.notebooks:
                penalty = None
                if late > 0:
                    penalty = policy.late_submission_penalty(
                        submission.student.id, notebook.score, late)
                    if penalty is not None:
                        penalty = step._check_late_penalty(notebook, penalty)
                if penalty != notebook.late_submission_penalty:
                    notebook.late_submission_penalty = penalty
                    changed.add((name, submission.student.id))
    gradebook.db.commit()
    return changed


def parse_stamp(text, zone):
    """A time read from a download's name (the regex group
    ``timestamp``): ISO 8601 (``2026-11-22T23:59:01+01:00``), or the
    numbers year, month, day, hour, minute and, optionally, second, with
    any separators (Blackboard's ``2026-11-22-23-59-01``); without an
    offset, in the course's time zone. Returns naive UTC, or None."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        numbers = [int(n) for n in re.findall(r"[0-9]+", text)]
        if not 5 <= len(numbers) <= 6 or numbers[0] < 1970:
            return None
        try:
            when = datetime(*numbers)
        except ValueError:
            return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dateutil_tz.gettz(zone))
    return when.astimezone(UTC).replace(tzinfo=None)


def stamp_text(utc):
    """A naive UTC time as nbgrader writes ``timestamp.txt``."""
    return f"{utc:%Y-%m-%d %H:%M:%S.%f} UTC"
