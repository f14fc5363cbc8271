"""Fixtures for the harness's own tests: the cluster and the pod runner, nothing of leasehold.

These tests import the harness by its top-level names (``testing/`` is on
pytest's ``pythonpath``). The folders have no ``__init__.py``: a package
here would be a second ``tests``, clashing with the product's.
"""

pytest_plugins = ["localcluster.pytest_plugin", "podrunner.pytest_plugin"]
