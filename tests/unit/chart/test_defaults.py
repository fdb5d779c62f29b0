"""The chart's defaults are the operator's: values.yaml cannot import api.constants, so this holds them equal."""

from __future__ import annotations

import yaml

from multinode.api.constants import DEFAULT_PREFLIGHT_TIMEOUT_SECONDS, OPERATOR_METRICS_PORT
from multinode.controller.settings import OperatorSettings
from tests.support.paths import CHART_DIR


def test_values_defaults_match_the_operators() -> None:
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    settings = OperatorSettings()

    assert values["operator"]["preflightTimeoutSeconds"] == DEFAULT_PREFLIGHT_TIMEOUT_SECONDS
    assert settings.render.preflight_timeout_seconds == DEFAULT_PREFLIGHT_TIMEOUT_SECONDS
    assert values["metrics"]["port"] == OPERATOR_METRICS_PORT
    assert (values["operator"]["workers"], values["operator"]["apiConcurrency"],
            values["operator"]["apiTimeoutSeconds"]) == (settings.workers, settings.api_concurrency,
                                                         settings.api_timeout_seconds)
