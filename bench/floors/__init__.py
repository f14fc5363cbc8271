"""Stand-ins for the operator that only watch JobLeases: what a watch costs without it.

Each module here is a script, run as its own process by :mod:`bench.scale`
(``python bench/floors/<name>.py KUBECONFIG NAMESPACE [...]``) so that its CPU
and memory are measured apart from the benchmark's.
"""
