"""Pure decisions, no I/O: what the operator should do next for a job.

The single-job planner (:mod:`.single`), the pod builder (:mod:`.pod`), indexed
planning (:mod:`.indexed`), schedule decisions (:mod:`.cron`), and the rules they
share (failure policy, suspension, retention). Plain inputs, an injected clock;
tested exhaustively without a cluster.
"""
