"""Pure reconciliation: observed pods + the TrainingJob → a Plan of actions and the desired status."""

from multinode.reconcile.observe import ObservedPod, observe_pod
from multinode.reconcile.plan import Event, Plan, plan

__all__ = ["Event", "ObservedPod", "Plan", "observe_pod", "plan"]
