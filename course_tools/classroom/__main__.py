"""``python -m course_tools.classroom``: grade the class (the book's
page ``instructors/grading.md`` says how)."""

import argparse
import json
import sys
import warnings
from pathlib import Path

from course_tools.classroom.grade import DEFAULT_REGEX, Options, grade_class
from course_tools.classroom.grade import summary as summary_text
from course_tools.classroom.standing import rebuild_feedback


def parse(argv):
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.classroom",
        description="Autograde every submission in submitted/ with "
                    "nbgrader, in parallel; write the gradebook, "
                    "grades.csv and feedback/.")
    parser.add_argument("assignments", nargs="*",
                        help="assignments to grade (default: all)")
    parser.add_argument("--course", type=Path, default=Path("."),
                        help="the course folder (default: .)")
    parser.add_argument("--jobs", "-j", type=int, default=0,
                        help="worker processes of the embedded Dask "
                        "cluster (default: the CPUs)")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                        help="grade on this Dask cluster instead, whose "
                        "workers have the course's environment (default: "
                        "$DASK_SCHEDULER_ADDRESS, else an embedded one)")
    parser.add_argument("--force", action="store_true",
                        help="regrade unchanged submissions too (a hand "
                        "grade of an answer that did not change stays)")
    parser.add_argument("--student", action="append", default=[],
                        metavar="ID", help="only this student (again for "
                        "more)")
    parser.add_argument("--feedback", action="store_true",
                        help="grade nothing: rebuild each student's "
                        "feedback page and grades.csv from the gradebook "
                        "(hand grades, overrides, comments, late "
                        "penalties), e.g. after the formgrader")
    parser.add_argument("--db", help="gradebook SQLAlchemy URL (default: "
                        "the course's, sqlite:///gradebook.db)")
    parser.add_argument("--timeout", type=int, default=60,
                        help="seconds per cell (default: 60; this, not "
                        "nbgrader_config.py's c.Execute.timeout, is the "
                        "limit when grading)")
    parser.add_argument("--memory-mb", type=int, default=3072,
                        help="memory of a submission's processes, in "
                        "all (its control group; the address space of "
                        "each where there is none) (default: 3072)")
    parser.add_argument("--submission-timeout", type=int, default=900,
                        help="seconds for one submission; past them it "
                        "is left ungraded, the machine's failure; the same "
                        "bytes ungraded twice unstarved are graded as "
                        "they are (default: 900)")
    parser.add_argument("--run-tagged", action="store_true",
                        help="also run the narrative cells tagged "
                        "skip-when-grading (skipped by default)")
    parser.add_argument("--disk-mb", type=int, default=512,
                        help="what one submission may write (default: 512)")
    parser.add_argument("--cpu-s", type=int, default=600,
                        help="CPU seconds one submission's kernel may use "
                        "in all, its processes together (default: 600); "
                        "each kernel uses one CPU at most at any time")
    parser.add_argument("--no-isolation", action="store_true",
                        help="run the kernels as this user, unconfined "
                        "(grading refuses otherwise where it cannot "
                        "isolate them)")
    parser.add_argument("--collect", type=Path,
                        help="LMS downloads: FOLDER/<assignment>/archive/, "
                        "each file (a notebook or a zip) one student's")
    parser.add_argument("--collect-regex", default=DEFAULT_REGEX,
                        help="pattern of a download's path, with groups "
                        "student_id and file_id, and optionally timestamp "
                        "(the submission time; else the file's) (default: "
                        "<student>_<name>.ipynb or .zip)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--cpu-report", type=Path, metavar="FILE",
                        help="write the CPU seconds each submission took, "
                        "per step of grading, to FILE (JSON)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    # nbgrader's gradebook API trips SQLAlchemy warnings that say nothing
    # to an instructor.
    from sqlalchemy.exc import SAWarning

    warnings.filterwarnings("ignore", category=SAWarning)
    if args.feedback:
        try:
            pages = rebuild_feedback(args.course, tuple(args.assignments),
                                     tuple(args.student), args.db)
        except (ValueError, RuntimeError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(f"{len(pages)} feedback pages rebuilt from the gradebook "
              f"in {(args.course / 'feedback').resolve()}")
        print(f"grades: {(args.course / 'grades.csv').resolve()}")
        return 0
    options = Options(
        root=args.course, assignments=tuple(args.assignments),
        jobs=args.jobs, scheduler=args.scheduler, force=args.force,
        db_url=args.db,
        timeout=args.timeout, memory_mb=args.memory_mb,
        submission_timeout=args.submission_timeout,
        isolate=not args.no_isolation, disk_mb=args.disk_mb,
        cpu_s=args.cpu_s,
        collect=args.collect, skip_tagged=not args.run_tagged,
        collect_regex=args.collect_regex, progress=not args.no_progress,
        students=tuple(args.student))
    try:
        outcomes = grade_class(options)
    except (ValueError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(summary_text(outcomes))
    print(f"grades: {(args.course / 'grades.csv').resolve()}")
    if args.cpu_report:
        args.cpu_report.write_text(json.dumps(
            [{"assignment": o.assignment, "student": o.student,
              "status": o.status, "steps": o.steps} for o in outcomes],
            indent=1))
    lost = sum(o.status == "ungraded" for o in outcomes)
    if lost:
        print(f"{lost} submissions could not be graded: run again to "
              "grade them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
