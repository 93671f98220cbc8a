"""The ground-truth generator's fast subset: one story per failure class, delivered in three
orders (time, files source by source, live with lags), scored against the injected truth
(`python -m bench.stories` runs a thousand)."""

from __future__ import annotations

from bench import stories


def test_every_class_gives_the_truth_in_every_delivery_order() -> None:
    report = stories.Report()
    for story in stories.stories(len(stories.CLASSES), first_seed=100):
        report.add(story)
    assert report.same_answer == report.stories, report.text()
    assert not report.extra, report.text()
    for what in ("class+entity", "owner", "jobs", "loss", "recovery"):
        assert report.rate(what) >= 0.95, report.text()


def test_a_story_is_its_seed() -> None:
    one, again = stories.generate(5), stories.generate(5)
    assert [e.id for _, e in one.events] == [e.id for _, e in again.events]
    assert one.truth == again.truth
    orders = stories.deliveries(one)
    assert sorted(e.id for e in orders["files"]) == sorted(e.id for e in orders["time"])
    assert [e.id for e in orders["files"]] != [e.id for e in orders["time"]]
