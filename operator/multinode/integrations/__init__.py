"""Integrations with schedulers and queues, one folder each, behind one protocol (reconcile/integration.py):
the native PodGroup, Volcano, coscheduling, spec.podGroup's external gang scheduler, and Kueue. The registry
(registry.py) lists them; the planner and the controller know only the protocol. docs/architecture.md walks
through adding one."""
