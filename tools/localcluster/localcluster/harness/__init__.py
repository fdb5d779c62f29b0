"""What the tests and the benchmarks share to drive the operator on a local cluster: waiting on a
condition, namespaces and kubectl, the operator as a process, the one TrainingJob builder, and the
randomized checkpoint writer (mirror_chaos) that races a running Mirror.

Its own package so that `tools/bench` never imports the test suite (`tests.support` is the tests' own).
"""
