"""Pure reconciliation: observed pods + the TrainingJob → a Plan of actions and the desired status."""

from multinode.reconcile.observe import ObservedMirror, ObservedPod, observe_mirror_pod, observe_pod
from multinode.reconcile.plan import Event, Observed, Plan, plan

__all__ = ["Event", "Observed", "ObservedMirror", "ObservedPod", "Plan", "observe_mirror_pod", "observe_pod", "plan"]
