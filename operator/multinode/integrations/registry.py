"""Every integration the operator runs, one line each. The order is the order of precedence where two would
gang the same attempt: a gang scheduler the job names, then spec.podGroup's external one, then the native
PodGroup (reconcile/gang.py choose_gang takes the first that wants it)."""

from __future__ import annotations

from multinode.integrations.coscheduling import Coscheduling
from multinode.integrations.kueue import Kueue
from multinode.integrations.pod_group_labels import PodGroupLabels
from multinode.integrations.podgroup import NativePodGroup
from multinode.integrations.volcano import Volcano
from multinode.reconcile.integration import Integration

INTEGRATIONS: tuple[Integration, ...] = (
    Volcano(),
    Coscheduling(),
    PodGroupLabels(),
    NativePodGroup(),
    Kueue(),
)
