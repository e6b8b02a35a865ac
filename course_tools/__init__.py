"""The course's own tooling, for instructors: never shipped to students.

``hidden``: the hidden cases of every exercise; ``verdicts``: the
grader's decision on each test cell, in the grader's own process.
"""
