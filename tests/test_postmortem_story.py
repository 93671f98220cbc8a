"""The postmortem tells the human story: people's acts (pages, acknowledgement, notes,
mitigation, resolution) appear when they happened (`--at`), a recorded time is corrected as an
event, the summary is plain words from a template, the headline response figures come in
time order, and a published postmortem is amended with its history kept. Every library
scenario's draft is checked against a golden file.

Regenerate after a deliberate change with
`JOBTRAIL_REGEN_GOLDEN=1 pytest tests/test_postmortem_story.py` and read the diff.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobtrail.learn import scenarios
from jobtrail.views.postmortem import document, state
from processors.incidents.model import Actor, Command, InvalidTransition
from processors.postmortem import draft
from tests.story_kit import Story

GOLDEN = Path(__file__).parent / "golden" / "postmortems"
LIBRARY = sorted(p.stem for p in scenarios.LIBRARY.glob("*.yaml"))


def _t(hhmm: str) -> datetime:
    return datetime.fromisoformat(f"2026-11-30T{hhmm}:00+00:00")


def _golden(name: str, text: str) -> None:
    golden = GOLDEN / f"{name}.md"
    if os.environ.get("JOBTRAIL_REGEN_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"no golden {golden}: regenerate with JOBTRAIL_REGEN_GOLDEN=1"
    assert text == golden.read_text(), f"{name}: the postmortem differs from {golden}"


def _told() -> Story:
    """ib-flap-64 with the night as people lived it, recorded after the fact."""
    story = Story("ib-flap-64")
    story.do("page", by="ic-ana", happened=_t("10:13"), who="team:network",
             why="leaf-01/p2 flapped under pretrain")
    story.do("ack", by="net-oz", happened=_t("10:15"))
    story.do("commander", by="ic-ana", happened=_t("10:15"), person="ic-ana")
    story.do("note", by="net-oz", happened=_t("10:17"),
             text="leaf-01/p2 shows symbol errors; port_down twice (see `perfquery`)")
    story.do("mitigate", by="net-oz", happened=_t("10:18"),
             text="disabled leaf-01/p2; traffic moved to leaf-01/p3")
    story.do("resolve", by="net-oz", happened=_t("10:45"))
    return story


def test_peoples_acts_make_the_timeline_detection_and_resolution() -> None:
    story = _told()
    inc = story.do("draft_postmortem", by="ic-ana", owner="pm-owner")
    markdown = draft.markdown(inc)
    _golden("ib-flap-64-told", markdown)
    timeline = inc.pm.sections["timeline"].text
    # when it happened, not when it was typed in (the story's clock is past 10:45)
    assert "- 2026-11-30 10:15:00Z **people** net-oz acknowledged (recorded " in timeline
    assert "**people** net-oz noted: leaf-01/p2 shows symbol errors; port_down twice (see " \
           "\\`perfquery\\`)" in timeline
    assert "**people** ic-ana paged team:network: leaf-01/p2 flapped under pretrain" in timeline
    lines = [line for line in timeline.splitlines() if line.startswith("- 20")]
    stamps = [line[:22] for line in lines]
    assert stamps == sorted(stamps)  # one time axis, machine and people interleaved
    assert "attempt 1 started" in lines[0]
    assert "last checkpoint before the failure (step 1000)" in timeline
    detection = inc.pm.sections["detection"].text
    assert "Acknowledged by net-oz at 2026-11-30 10:15:00Z (14m 50s after the first signal)" \
        in detection and "ic-ana paged team:network" in detection
    resolution = inc.pm.sections["resolution"].text
    assert "net-oz mitigated: disabled leaf-01/p2; traffic moved to leaf-01/p3" in resolution
    assert "restarted as attempt 2" in resolution
    assert "- ic-ana: paged others, commander, postmortem author, postmortem owner" not in \
        inc.pm.sections["participants"].text
    participants = inc.pm.sections["participants"].text
    assert "- net-oz: acknowledged, notes, mitigated, resolved" in participants
    assert "- team:network: paged" in participants and "commander" in participants
    # the headline figures, in time order, from the first signal
    timings = inc.pm.sections["timings"].text.splitlines()[0]
    names = re.findall(r"time to (\w+)", timings, re.I)
    assert names == ["detect", "acknowledge", "mitigate", "recover", "resolve"]
    assert "time to acknowledge **14m 50s**" in timings and "duration **44m 50s**" in timings


def test_a_recorded_time_is_corrected_as_an_event() -> None:
    story = _told()
    ack = next(t for t in story.main.story.values() if t.kind == "acknowledged")
    assert story.main.acknowledged_at == _t("10:15")
    inc = story.do("correct_time", by="net-oz", happened=_t("10:14"), event_id=ack.event_id,
                   why="the page was answered a minute earlier")
    assert inc.acknowledged_at == _t("10:14")
    assert inc.story[ack.event_id].corrected
    kinds = [e.kind for e in story.log if e.incident_id == inc.id]
    assert kinds.count("acknowledged") == 1 and kinds[-1] == "time_corrected"
    # the fold from the stored log agrees, and the timeline says what was recorded
    folded = state([e for e in story.log if e.incident_id == inc.id])
    assert folded is not None and folded.acknowledged_at == _t("10:14")
    drafted = story.do("draft_postmortem")
    assert "10:14:00Z **people** net-oz acknowledged (recorded 2026-11-30 " in \
        drafted.pm.sections["timeline"].text
    assert "no event 'ie-nope'" in story.refused("correct_time", happened=_t("10:14"),
                                                 event_id="ie-nope")
    assert "give the time it happened" in story.refused("correct_time", event_id=ack.event_id)


def test_a_time_to_come_cannot_have_happened() -> None:
    command = Command(command_id="c1", incident_id="inc-x", command="ack",
                      actor=Actor(kind="person", name="ana"), time=_t("10:00"),
                      at=_t("10:30"))
    with pytest.raises(InvalidTransition, match="cannot have happened"):
        command.payload()
    naive = command.model_copy(update={"at": datetime(2026, 11, 30, 9, 0)})
    assert naive.payload().at == datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def test_the_summary_is_plain_words_and_the_trigger_is_not_repeated() -> None:
    story = Story("ib-flap-64")
    inc = story.do("draft_postmortem")
    summary = inc.pm.sections["summary"].text
    assert summary == ("On 2026-11-30 at 10:00 leaf-01/p2 began to flap; job pretrain (512 "
                       "GPUs) lost its NCCL connections and failed at 10:11 (step 1200); it "
                       "was restarted from the 09:50 checkpoint (step 1000) and was back at "
                       "10:25; 298.7 GPU-hours were lost.")
    explanation = inc.explanation.rstrip(". ")
    markdown = draft.markdown(inc)
    assert markdown.count(explanation[:60]) == 1  # in Trigger, once
    # canonical Markdown: nothing escaped that CommonMark would not read as markup
    assert "\\(" not in markdown and "\\_" not in markdown
    # ranks as numbers: rank-0, rank-8, rank-16, not rank-0, rank-104, rank-112
    assert "(`rank-0`, `rank-8`, `rank-16`, …)" in markdown


def test_before_recovery_the_loss_is_not_claimed() -> None:
    story = Story("ib-flap-64", upto=30)
    inc = story.do("draft_postmortem")
    assert "the loss is not assessed yet" in inc.pm.sections["summary"].text
    assert "0.0 GPU-hours" not in inc.pm.sections["summary"].text


def test_a_published_postmortem_is_amended_with_its_history() -> None:
    story = Story("rank-storm")
    story.do("draft_postmortem", by="ic-ana")
    assert "amend is allowed when published" in story.refused(
        "amend_postmortem", section="lucky", text="x", why="y")
    story.do("edit_postmortem", by="ic-ana", section="contributing", text="A slow rank.")
    story.do("request_review", by="ic-ana", reviewers=["lead-cy"])
    story.do("approve_postmortem", by="lead-cy")
    if story.main.severity in ("sev1", "sev2"):
        for kind in ("sample", "monitor", "runbook"):
            story.do("record_learning", learning=kind, reason="a test of amendments")
    story.do("publish_postmortem", by="ic-ana")
    assert "says why" in story.refused("amend_postmortem", section="lucky", text="x")
    inc = story.do("amend_postmortem", by="sre-bo", section="lucky",
                   text="The storm hit at a checkpoint boundary.",
                   why="the checkpoint timing was found after publication")
    assert inc.pm.status == "published" and len(inc.pm.revisions) == 1
    markdown = draft.markdown(inc)
    assert "· revision 2" in markdown
    assert "History: revision 1 published 2026-11-30" in markdown
    assert "revision 2 by sre-bo at" in markdown and "amended lucky: the checkpoint timing" \
        in markdown
    assert "The storm hit at a checkpoint boundary." in markdown
    doc = document(inc)["postmortem"]
    assert doc["revision"] == 2 and doc["revisions"][0]["by"] == "sre-bo"


@pytest.mark.parametrize("name", LIBRARY)
def test_every_library_scenario_drafts_its_golden_postmortem(name: str) -> None:
    story = Story(name)
    inc = story.do("draft_postmortem", by="ic-ana", owner="pm-owner")
    _golden(f"library/{name}", draft.markdown(inc))


def test_the_demo_drafts_its_golden_postmortem() -> None:
    """`jobtrail demo`'s sample (five sources, job-7b-001 on 64 nodes) through the pipeline:
    the worst incident's draft, with the human story of its night."""
    from datetime import timedelta

    from ingest.canonical import decode
    from jobtrail.learn import sample
    from processors.pipeline import Pipeline
    from processors.topology import Topology
    from schemas.events import Event
    from schemas.topology import TopologyFile

    decoded = decode(sample.jsonl(), producer="sample", observed_at=_t("12:00"),
                     origin="sample")
    events = [e for e in decoded if isinstance(e, Event)]
    assert len(decoded) - len(events) <= 1  # the sample keeps one malformed record
    pipeline = Pipeline(timedelta(seconds=30),
                        Topology.from_file(TopologyFile.model_validate(sample.topology())))
    pipeline.process(events)
    worst = max(pipeline.detector.incidents.values(),
                key=lambda i: (i.lost_gpu_hours, i.id))
    clock = max(e.time for e in events) + timedelta(minutes=5)
    failed = min(j.failed_at for j in worst.jobs.values() if j.failed_at)
    for n, (command, data, after) in enumerate([
            ("ack", {}, 4), ("note", {"text": "port flapping on the leaf; job restarted by "
                                              "the scheduler"}, 6),
            ("draft_postmortem", {"owner": "pm-owner"}, None)]):
        pipeline.command(Command(
            command_id=f"demo-{n}", incident_id=worst.id, command=command,  # type: ignore[arg-type]
            actor=Actor(kind="person", name="ic-ana"), time=clock + timedelta(minutes=n),
            data=data, at=failed + timedelta(minutes=after) if after else None))
    inc = pipeline.detector.incidents[worst.id]
    markdown = draft.markdown(inc)
    _golden("demo", markdown)
    assert f"job {sample.JOB} (" in inc.pm.sections["summary"].text
    assert "GPU-hours were lost" in inc.pm.sections["summary"].text


def test_the_runbook_entry_is_built_from_what_was_done() -> None:
    from jobtrail.learn.lessons import runbook_entry

    story = _told()
    proposal = sorted(a for a, x in story.main.actions.items() if "perfquery" in x.title)[0]
    story.do("accept_action", by="net-oz", action_id=proposal, owner="network")
    inc = story.do("update_action", by="net-oz", action_id=proposal, status="done")
    entry = runbook_entry(inc)
    done = entry.split("What was done:\n\n")[1]
    assert done.startswith("1. 10:13 paged: team:network: leaf-01/p2 flapped under pretrain "
                           "(ic-ana)\n2. 10:17 noted: leaf-01/p2 shows symbol errors")
    assert "3. 10:18 mitigated: disabled leaf-01/p2; traffic moved to leaf-01/p3 (net-oz)" \
        in entry
    assert "- [x] Reseat or replace the cable/transceiver at leaf-01/p2" in entry
    assert "  - run: `perfquery`\n  - run: `ibdiagnet`" in entry
    assert "How recovery was verified:\n\n- 2026-11-30 10:40:00Z `job.step` on `rank-0`: " \
           "step 1250 passed the failure point (1200)" in entry


def test_a_monitor_is_checked_against_the_whole_library(tmp_path: Path) -> None:
    from jobtrail.learn.lessons import LearningFailed, check_monitor

    sample = scenarios.LIBRARY / "ib-flap-64.yaml"
    good = tmp_path / "flap-once.yaml"
    good.write_text("signals:\n  - name: ib-port-flap\n    threshold: {count: 1, window_s: 300}\n")
    assert check_monitor(sample, good) == (
        f"opens the network incident 50 s earlier; no new incident in the {len(LIBRARY)} "
        "library scenarios")
    false = tmp_path / "saves-are-faults.yaml"
    false.write_text("signals:\n  - name: checkpoint-saves-are-faults\n    types: "
                     "[checkpoint.saved]\n    class: storage_io\n")
    with pytest.raises(LearningFailed, match=r"the library scenario \S+ opens a new "
                                             r"storage_io incident .*\(a false incident"):
        check_monitor(sample, false)


def test_the_review_loop_and_the_resolution_are_in_the_document() -> None:
    """A reviewer's requested changes and the approval comment are in the Markdown (so on
    the page and in the HTML export), the reviewer and approver are among the
    Participants, the resolve note is the Resolution, and a learning's file is named
    without the server's directories."""
    from jobtrail.views.postmortem import export

    story = Story("ib-flap-64")
    story.do("ack", by="ic-ana")
    story.do("resolve", by="ic-ana", text="replaced the cable at leaf-01/p2")
    story.do("draft_postmortem", by="ic-ana")
    for name in ("contributing", "mitigators"):
        story.do("edit_postmortem", by="ic-ana", section=name, text="Written.")
    story.do("request_review", by="ic-ana", reviewers=["lead-cy", "rita"])
    story.do("request_changes", by="lead-cy", comment="say which cable and who replaced it")
    story.do("request_review", by="ic-ana", reviewers=["lead-cy"])
    story.do("approve_postmortem", by="lead-cy", comment="clear, thank you")
    inc = story.do("record_learning", by="ic-ana", learning="sample",
                   path="/srv/jobtrail/home/learnings/samples/sample-x.yaml",
                   digest="ab" * 32, check="replayed: same incident")
    markdown = draft.markdown(inc)
    review = markdown.split("Review:\n\n")[1].split("\n\n")[0].splitlines()
    assert review[1].endswith("lead-cy requested changes: “say which cable and who "
                              "replaced it”")
    assert review[3].endswith("lead-cy approved: “clear, thank you”")
    assert review[0].endswith("ic-ana asked for review by lead-cy, rita")
    people = markdown.split("## Participants")[1].split("## ")[0]
    assert "- lead-cy: reviewer, approver" in people and "- rita: reviewer" in people
    resolution = markdown.split("## Resolution")[1].split("## ")[0]
    assert "ic-ana resolved: replaced the cable at leaf-01/p2" in resolution
    learned = markdown.split("## Learnings")[1] if "## Learnings" in markdown else markdown
    assert "/srv/jobtrail" not in markdown
    assert "`learnings/samples/sample-x.yaml` (sha256 abababababab)" in learned
    html = export(inc, "html")
    assert "lead-cy requested changes: “say which cable and who replaced it”" in html
    assert "lead-cy approved: “clear, thank you”" in html
