"""Volcano (spec.scheduling.volcano): its PodGroup per attempt, joined by an annotation."""

from multinode.integrations.volcano.volcano import VOLCANO_POD_GROUP, Volcano

__all__ = ["VOLCANO_POD_GROUP", "Volcano"]
