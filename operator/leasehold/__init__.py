"""leasehold: run jobs under expiring leases with fencing tokens."""
