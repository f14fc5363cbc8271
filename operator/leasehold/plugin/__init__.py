"""``kubectl leasehold``: the kubectl plugin for platform operators (views and commands)."""
