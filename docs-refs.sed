# Rewrite citations of docs/architecture.md in files this branch may not edit
# (operator/, hack/, the generated CRD YAML) to the pages the sections moved to.
# Rules match text, not file names, so they apply before or after the moves of
# issue 26 (controller/{act,kube,engines,plan}/, lease/api/, testing/).
# Use: sed -i -f docs-refs.sed $(git grep -l 'docs/architecture\.md' -- operator hack testing deploy/crds deploy/helm/leasehold/crds)
# then `make crds` (or `make lint`, which checks CRD drift): the CRD YAML is
# generated from the lease models' docstrings.
#
# Citations left as they are (their sections stayed in docs/architecture.md):
#   lease/protocol.py  "The protocol"; "How expiry is judged"
#   lease/store.py     docs/architecture.md (the rule table, "Where each rule is enforced")
#   controller/expiry.py (-> engines/expiry.py), worker/holder.py,
#   hack/chaos/run.py (-> testing/chaos/run.py)   "How expiry is judged"

# lease/models.py (-> lease/api/joblease.py) JobLease docstring, and the CRD
# YAML generated from it: "(docs/architecture.md," + next line "Across a job's
# whole life" -- that heading is in docs/lifecycle.md.
s|never go down (docs/architecture\.md,|never go down (docs/lifecycle.md,|g

# controller/service.py (-> act/jobs.py), controller/ttl.py (-> engines/ttl.py)
s|docs/architecture\.md, "Across a job's whole life"|docs/lifecycle.md, "Across a job's whole life"|g

# controller/deadline.py (-> engines/deadline.py): the clock rule is under "Deadlines"
s|ran before (docs/architecture\.md, "Lifecycle")|ran before (docs/lifecycle.md, "Deadlines")|g

# lease/models.py (-> lease/api/leasedjob.py): the spec's transition rules
s|spec (docs/architecture\.md, "Lifecycle")|spec (docs/lifecycle.md, "Which spec fields may change")|g

# controller/suspension.py (-> plan/suspension.py)
s|docs/architecture\.md, "Suspend and resume"|docs/lifecycle.md, "Suspend and resume"|g

# lease/protocol.py: there never was a heading "A pod is its UID"
s|(docs/architecture\.md, "A pod is its UID")|(docs/lifecycle.md, "A holder is a pod UID, not a name")|g

# controller/indexed_service.py (-> act/indexed.py)
s|(docs/architecture\.md, "Indexed jobs")|(docs/indexed.md)|g

# lease/schedule.py, lease/store.py
s|docs/architecture\.md, "LeasedCronJob"|docs/schedules.md|g

# controller/cron.py (-> plan/cron.py / act/cron.py): next line is "LeasedCronJob",
# the title of docs/schedules.md
s|hold at the store: docs/architecture\.md,$|hold at the store: docs/schedules.md,|

# lease/cronmodels.py (-> lease/api/leasedcronjob.py): next line is "LeasedCronJob"
s|one fencing domain (docs/architecture\.md,$|one fencing domain (docs/schedules.md,|
s|pre-created with its token range (docs/architecture\.md)|pre-created with its token range (docs/schedules.md)|g

# hack/README.md (the testing/ README after the move): next line is "Testing tiers"
s|\[docs/architecture\.md\](\.\./docs/architecture\.md),$|[docs/testing.md](../docs/testing.md),|

# Fallbacks: any other one-line citation of a section that moved.
s|docs/architecture\.md, "Lifecycle"|docs/lifecycle.md|g
s|docs/architecture\.md, "\(Which spec fields may change\|Attempts, retries and cancel\|Failure rules and disruptions\|Clean-up\|Pull mode as a work queue\|Timing comes from the lease\|Deadlines\|Starting is not stalling\|Transient API errors\)"|docs/lifecycle.md, "\1"|g
s|docs/architecture\.md, "The model of the protocol"|docs/model.md|g
s|docs/architecture\.md, "\(Testing tiers\|The chaos history, judged twice\)"|docs/testing.md, "\1"|g
