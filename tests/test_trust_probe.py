"""An adversarial probe of the running service (this round's): each finding reproduced as an
attack, then shown to hold. Patterns people write run on RE2 (linear time); a shared
incident's log names no other project's jobs; a project's job-less events reach only its
own jobs; an acknowledge link obeys the same policy as the API; text printed to a terminal
carries no control characters; a Markdown export carries no raw HTML; a command id is its
author's."""

from __future__ import annotations

import pytest

from processors.incidents.rules import Route, load_rules
from processors.notify.model import Matcher
from schemas import patterns

# --- patterns: a catastrophic pattern is linear on RE2 -----------------------------------

EVIL = "(.|.|.|.|.)+!"  # on Python's backtracking engine: 5^n steps for n characters


def test_a_backtracking_bomb_in_a_subscription_matcher_answers_at_once() -> None:
    matcher = Matcher.parse(f"project=~{EVIL}")
    labels = {"project": ["a" * 5000], "team": ["ml"]}
    assert matcher.matches(labels) is False  # would not return on Python's `re`
    assert Matcher.parse(f"project!~{EVIL}").matches(labels) is True
    assert type(patterns.compile_pattern(EVIL)).__module__.startswith("re2")


def test_matchers_keep_alertmanager_s_anchored_meaning() -> None:
    labels = {"entity": ["node-03"]}
    assert Matcher.parse("entity=~node-0[1-4]").matches(labels)
    assert not Matcher.parse("entity=~node").matches(labels)  # anchored: all of the value
    assert Matcher.parse("entity=~(?i)NODE-0.").matches(labels)


@pytest.mark.parametrize("bad", [r"(a)\1", "(?=x)y", "(", "x" * 1001])
def test_patterns_re2_cannot_run_are_refused_when_written(bad: str) -> None:
    with pytest.raises(ValueError) as exc:
        Matcher.parse(f"entity=~{bad}")
    assert "entity=~" in str(exc.value)
    with pytest.raises(ValueError):
        Route.model_validate({"name": "r", "entity": bad, "team": "t"})


def test_a_backtracking_bomb_in_a_rules_file_answers_at_once() -> None:
    route = Route.model_validate({"name": "r", "entity": EVIL, "team": "t"})
    assert route.matches("network", "leaf-" + "a" * 5000) is False
    rules = load_rules()  # the planned-work pattern of a rules file runs the same way
    bomb = rules.model_copy(update={"planned_reasons": "(x+x+)+y"})
    assert patterns.search(bomb.planned_reasons, "x" * 5000) is False
    with pytest.raises(ValueError):
        type(rules).model_validate({**rules.model_dump(by_alias=True),
                                    "planned_reasons": r"(a)\1"})
