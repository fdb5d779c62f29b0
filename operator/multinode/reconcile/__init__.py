"""Pure reconciliation: observed pods + the TrainingJob → a Plan of actions and the desired status."""

from multinode.reconcile.observe import ObservedMirror, ObservedPod, observe_mirror_pod, observe_pod
from multinode.reconcile.outcome import Event, Plan
from multinode.reconcile.observed import Observed
from multinode.reconcile.plan import plan

__all__ = ["Event", "Observed", "ObservedMirror", "ObservedPod", "Plan", "observe_mirror_pod", "observe_pod", "plan"]
