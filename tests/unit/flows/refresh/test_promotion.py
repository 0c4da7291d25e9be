"""Champion/challenger: the promotion decision and the metric read from finetune outputs."""

from __future__ import annotations

import pytest

from flows.core.settings import ConfigError, settings_from
from flows.plan import RefreshSettings
from flows.refresh.promotion import Forgetting, decide, metric_value


def test_the_first_challenger_becomes_champion() -> None:
    decision = decide(0.41, None, margin=0.05)
    assert decision.promote and decision.champion_score is None


@pytest.mark.parametrize(
    ("challenger", "champion", "margin", "promote"),
    [
        (0.60, 0.50, 0.05, True),
        (0.54, 0.50, 0.05, False),  # a win inside the margin keeps the champion
        (0.50, 0.50, 0.0, False),  # a tie keeps the champion
        (0.49, 0.50, 0.0, False),
    ],
)
def test_a_challenger_must_win_by_more_than_the_margin(
    challenger: float, champion: float, margin: float, promote: bool
) -> None:
    decision = decide(challenger, champion, margin)
    assert decision.promote is promote
    assert (decision.challenger_score, decision.champion_score) == (challenger, champion)


def test_lower_is_better_metrics_flip_the_comparison() -> None:
    assert decide(1.8, 2.0, 0.1, higher_is_better=False).promote
    assert not decide(2.2, 2.0, 0.1, higher_is_better=False).promote


@pytest.mark.parametrize(
    ("before", "after", "bound", "promote"),
    [
        (3.10, 3.18, 0.05, False),  # rose 0.08 > 0.05: it forgot too much
        (3.10, 3.14, 0.05, True),  # within the bound
        (3.10, 3.00, 0.0, True),  # fell: it forgot nothing
        (3.10, 3.90, None, True),  # no bound (the default): measured, never a reason
    ],
)
def test_a_challenger_that_forgot_more_general_text_than_the_bound_is_not_promoted(
    before: float, after: float, bound: float | None, promote: bool
) -> None:
    decision = decide(0.60, 0.50, 0.0, forgetting=Forgetting(before, after, bound))
    assert decision.promote is promote
    if not promote:
        assert decision.reason == (
            f"it forgot general text: its general validation loss rose by {after - before:+.4f} "
            f"({before:.4f} -> {after:.4f}) over the model it continued, more than "
            f"refresh.max_general_loss_increase={bound}"
        )


def test_the_refusal_shows_the_rise_with_its_interval_over_the_rows() -> None:
    forgetting = Forgetting(3.10, 3.18, 0.05, interval=(0.061, 0.099))
    decision = decide(0.60, 0.50, 0.0, forgetting=forgetting)
    assert not decision.promote
    assert (
        "general validation loss rose by +0.0800 [+0.0610, +0.0990] (3.1000 -> " in decision.reason
    )


def test_the_metric_is_any_numeric_finetune_output_and_the_error_lists_them() -> None:
    outputs = {"sst2.pretrained_accuracy_mean": 0.8, "labels": ["a", "b"], "resumed": True}
    assert metric_value(outputs, "sst2.pretrained_accuracy_mean") == 0.8
    with pytest.raises(ConfigError, match=r"refresh.metric='resumed'.*sst2.pretrained_accuracy"):
        metric_value(outputs, "resumed")


def test_refresh_settings_name_the_key_and_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"refresh.margin=-0.1 must be at least 0"):
        RefreshSettings(domain="legal", margin=-0.1)
    with pytest.raises(ConfigError, match=r"refresh.domain='a/b' must be a name"):
        RefreshSettings(domain="a/b")
    with pytest.raises(ConfigError, match=r"needs refresh\.domain"):
        RefreshSettings().require_domain()
    with pytest.raises(ConfigError, match=r"unknown config key refresh\.threshold"):
        settings_from(RefreshSettings, {"threshold": 1}, "refresh")
    assert RefreshSettings(domain="legal").model_name == "cloze-legal"
    assert RefreshSettings(domain="legal", registered_model="m").model_name == "m"
