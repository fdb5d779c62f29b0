"""What the tests and the benchmarks share to drive the operator on a local cluster: waiting on a
condition, namespaces and kubectl, the operator as a process, and the one TrainingJob builder.

Its own package so that `tools/bench` never imports the test suite (`tests.support` is the tests' own).
"""
