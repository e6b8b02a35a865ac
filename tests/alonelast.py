"""The xdist scheduler of ``make test``: ``--dist loadgroup``, with the
tests marked ``alone`` held back until every other test has run, then
run one group at a time on one worker while the others wait.

A test is marked ``alone`` when it measures time, or loads every core or
the machine's memory: beside another test it would either fail for want
of the machine or slow its neighbour down.
"""

from xdist.scheduler import LoadGroupScheduling

ALONE = "alone"  # the prefix of the xdist group of such tests


class AloneLastScheduling(LoadGroupScheduling):
    """``LoadGroupScheduling`` whose work units holding a test marked
    ``alone`` (their group, after the ``@`` of their node ids, is
    ``alone:...``; see ``conftest.py``) go last, each to a worker that is
    the only one still busy."""

    def _is_alone(self, scope):
        return scope.startswith(f"{ALONE}:")

    def _busy(self):
        return sum(self._pending_of(work)
                   for work in self.assigned_work.values())

    def _assign_work_unit(self, node):
        scopes = list(self.workqueue)
        parallel = [s for s in scopes if not self._is_alone(s)]
        if parallel:
            self.workqueue.move_to_end(parallel[0], last=False)
        elif self._busy():
            return  # an alone unit waits for every running test
        super()._assign_work_unit(node)
        if not self.workqueue:
            for other in self.nodes:
                if other is not node and not self._pending_of(
                        self.assigned_work[other]):
                    other.shutdown()

    def _reschedule(self, node):
        if node.shutting_down:
            return
        if self.workqueue and not self._pending_of(self.assigned_work[node]):
            # an idle node takes the next alone unit once all is done
            self._assign_work_unit(node)
            return
        super()._reschedule(node)

