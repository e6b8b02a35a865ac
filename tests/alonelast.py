"""The xdist scheduler of ``make test``: work units are the groups of
tests that share a fixture (``conftest.xdist_groups``), and the tests
marked ``alone`` are held back until every other test has run, then run
one after the other on one worker while the others have ended.

A test is marked ``alone`` when it measures time, or loads every core or
the machine's memory: beside another test it would either fail for want
of the machine or slow its neighbour down.

The groups reach this scheduler (in xdist's controller, which collects
nothing) as a file the workers write when they have collected
(``GROUPS`` in the session's folder, ``tests/sharedjobs.py``), not as
``@group`` suffixes of node ids: xdist 3.8 sets those by a private
attribute that pytest 9 no longer reads.

An xdist worker runs the last test it was sent only once it is sent more
or told to shut down (it needs the next test to tear fixtures down), so
"nothing beside it" means: every other worker has been told to shut
down and has reported its last test.
"""

import json
import os

from xdist.scheduler import LoadScopeScheduling

from tests import sharedjobs

ALONE = "alone"  # the prefix of the group of such tests
GROUPS = "xdist_groups.json"


def write_groups(groups):
    """Write ``{node id: group}`` where the scheduler reads it (each
    worker writes the same, atomically)."""
    path = sharedjobs.session_folder() / GROUPS
    tmp = path.with_name(f"{GROUPS}.{os.getpid()}")
    tmp.write_text(json.dumps(groups))
    tmp.replace(path)


class AloneLastScheduling(LoadScopeScheduling):
    """Load scheduling whose work unit is a test, or a group of tests
    (``groups``: ``{node id: group}``, by default the file the workers
    wrote); units of group ``alone:...`` go last, to one worker (the
    runner), once every other worker has ended."""

    _runner = None

    def __init__(self, config, log=None, groups=None):
        super().__init__(config, log)
        self._groups = groups

    def schedule(self):
        if self._groups is None:
            path = sharedjobs.session_folder() / GROUPS
            self._groups = (json.loads(path.read_text())
                            if path.exists() else {})
        super().schedule()

    def _split_scope(self, nodeid):
        return (self._groups or {}).get(nodeid, nodeid)

    def _is_alone(self, scope):
        return scope.startswith(f"{ALONE}:")

    def _pending(self, node):
        return self._pending_of(self.assigned_work.get(node, {}))

    def _assign_work_unit(self, node):
        parallel = next((s for s in self.workqueue
                         if not self._is_alone(s)), None)
        if parallel is not None:
            self.workqueue.move_to_end(parallel, last=False)
            super()._assign_work_unit(node)
        else:
            self._alone_phase(node)

    def _alone_phase(self, node):
        """Only alone units are left: ``node`` ends unless it is the
        runner; the runner takes the next unit once no other worker
        holds a test."""
        if self._runner not in self.assigned_work:
            self._runner = node
        if node is not self._runner:
            if self._pending(node) <= 1 and not node.shutting_down:
                node.shutdown()  # it runs the test it holds, then ends
            return
        if (node.shutting_down or not self.workqueue
                or self._pending(node) > 1):
            return
        if any(self._pending(other) for other in self.assigned_work
               if other is not node):
            return
        super()._assign_work_unit(node)

    def mark_test_complete(self, node, item_index, duration=0):
        super().mark_test_complete(node, item_index, duration)
        self._poke_runner()

    def remove_node(self, node):
        crashed = super().remove_node(node)
        self._poke_runner()
        return crashed

    def _poke_runner(self):
        """Another worker's test ended: the runner may start."""
        if (self.workqueue and self.collection is not None
                and not any(not self._is_alone(s) for s in self.workqueue)):
            runners = [self._runner] if self._runner in self.assigned_work \
                else list(self.assigned_work)
            for runner in runners:
                if not runner.shutting_down:
                    self._alone_phase(runner)
                    break
