"""scheduler-plugins' coscheduling (spec.scheduling.coscheduling): its PodGroup per attempt, joined by a label."""

from multinode.integrations.coscheduling.coscheduling import COSCHEDULING_POD_GROUP, Coscheduling

__all__ = ["COSCHEDULING_POD_GROUP", "Coscheduling"]
