"""What the tests and the benchmarks share to drive the operator on a local cluster: waiting on a
condition, namespaces and kubectl, the operator as a process. What needs no cluster (the builders of jobs, the
randomized checkpoint writer that races a running Mirror) is in multinode.testing.

Its own package so that `tools/bench` never imports the test suite (`tests.support` is the tests' own).
"""
