"""Kueue (sigs.k8s.io/kueue): the operator is the TrainingJob's Kueue integration (policy.py says how)."""

from multinode.integrations.kueue.integration import HELD, Kueue, KueueObserved
from multinode.integrations.kueue.policy import (RESOURCE_FLAVOR, WORKLOAD, ObservedWorkload, kueue_gate,
                                                 observe_flavor, observe_workload, queue_name)
from multinode.integrations.kueue.workload import render_workload, workload_name

__all__ = ["HELD", "RESOURCE_FLAVOR", "WORKLOAD", "Kueue", "KueueObserved", "ObservedWorkload", "kueue_gate",
           "observe_flavor", "observe_workload", "queue_name", "render_workload", "workload_name"]
