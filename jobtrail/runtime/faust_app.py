"""The cluster runtime: a Faust worker on `jobtrail.raw`, `jobtrail.events`,
`jobtrail.incident-commands` and `jobtrail.dlq`; it produces `jobtrail.incident-events`.

`jobtrail.raw` carries payloads as sources sent them (`ingest/raw.py`); its agent runs the
adapter and produces what it yields to `jobtrail.events` and `jobtrail.dlq`.

An agent is a thin shell: take a batch, decode, hand it to the shared `Sink` (in a single
worker thread, because the ClickHouse client is blocking), save the processors' state with
the offsets it has consumed (`snapshot.py`, under `JOBTRAIL_HOME/worker/`), and only then let
Faust ack the batch. Faust commits acked offsets every second, so after a SIGKILL it
redelivers from the last commit: messages at or before the snapshot's offsets are already
in the state and the store and are skipped; later ones are processed (the sink recognises a
same-arrival replay by id). The restarted worker's state is therefore the uninterrupted
one's, and so is its incident log.

Two Faust caveats shape this (see ../shared/notes/stack.md): agents keep `concurrency=1`
(higher can commit past an in-flight message), and `take_events` acks its buffer in a
`finally`, even when the body raised. So a write that still fails after the retry budget
must not raise into Faust: the worker logs and exits the process without acking, and the
restarted worker replays from the last committed offset.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import faust

from ingest.adapters import registry
from ingest.raw import decode_raw, text_headers
from ingest.redact import clip
from jobtrail.app import build_sink, open_store
from jobtrail.config import Settings
from jobtrail.kafka_io import batch_by_cluster
from jobtrail.store_retry import StoreUnavailable
from processors.incidents.model import Command, IncidentEvent
from schemas.dead_letters import DeadLetter
from schemas.events import Event

log = logging.getLogger("jobtrail.worker")

EXIT_STORE_UNAVAILABLE = 70


def _token(events: list[Any]) -> str:
    """Kafka offsets are unique per topic-partition: a retried batch gets the same token."""
    first, last = events[0].message, events[-1].message
    return f"{first.topic}-{first.partition}-{first.offset}-{last.offset}"


def create_app(settings: Settings) -> faust.App:
    from jobtrail.runtime.home import HomeLock
    from jobtrail.runtime.snapshot import SnapshotFile, adopt

    HomeLock(settings.home).acquire(f"jobtrail worker ({settings.app_id})")
    state_dir = settings.home / "worker" / settings.app_id
    state_dir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.app_id,
        broker=f"kafka://{settings.kafka}",
        store="memory://",
        datadir=str(state_dir / "faust"),
        value_serializer="raw",
        key_serializer="raw",
        topic_partitions=settings.partitions,
        topic_replication_factor=1,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=1.0,
        broker_max_poll_records=settings.batch_size,
        stream_buffer_maxsize=max(4096, settings.batch_size * 2),
        web_enabled=False,
        producer_acks=-1,
    )
    raw_topic = app.topic(settings.topic("raw"), value_serializer="raw", key_serializer="raw")
    events_topic = app.topic(settings.topic("events"), value_serializer="raw")
    incident_topic = app.topic(settings.topic("incident-events"), value_serializer="raw")
    commands_topic = app.topic(settings.topic("incident-commands"), value_serializer="raw")
    dlq_topic = app.topic(settings.topic("dlq"), value_serializer="raw")
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clickhouse")
    state: dict[str, Any] = {}
    snapshots = SnapshotFile(state_dir / "pipeline.snap")
    positions: dict[str, int] = {}

    def sink() -> Any:
        if "sink" not in state:
            built = build_sink(settings, open_store(settings), restore=False)
            loaded = snapshots.load()
            if loaded is not None:
                report = adopt(built, loaded)
                positions.update(loaded.positions)
            else:
                report = f"{snapshots.problem}: {built.restore()}"
            log.warning("worker state: %s", report)
            state["sink"] = built
        return state["sink"]

    def fresh(batch: list[Any]) -> list[Any]:
        """Drop messages the saved state already holds (redelivered after a restart)."""
        return [e for e in batch if e.message.offset >
                positions.get(f"{e.message.topic}/{e.message.partition}", -1)]

    def checkpoint(batch: list[Any]) -> None:
        """Runs on the ClickHouse thread after the batch is stored, before Faust acks it."""
        for e in batch:
            stream = f"{e.message.topic}/{e.message.partition}"
            positions[stream] = max(positions.get(stream, -1), e.message.offset)
        snapshots.save(sink().pipeline, positions)

    def handle_and_checkpoint(batch: list[Any], events: list[Event],
                              arrivals: list[str]) -> None:
        sink().handle(events, (), _token(batch), publish, arrivals=arrivals)
        checkpoint(batch)

    async def run(fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)

    loop_box: dict[str, asyncio.AbstractEventLoop] = {}

    async def send_incidents(events: list[IncidentEvent]) -> None:
        futures = [await incident_topic.send(key=e.incident_id.encode(),
                                             value=e.to_json().encode()) for e in events]
        for fut in futures:
            await fut

    def publish(events: list[IncidentEvent]) -> None:
        """Called from the ClickHouse thread: block it until the broker acknowledged."""
        asyncio.run_coroutine_threadsafe(send_incidents(events), loop_box["loop"]).result(120)

    def fatal(exc: BaseException,
              what: str = "ClickHouse unavailable past the retry budget") -> None:
        """Exit without acking: take_events would ack the batch in its `finally` otherwise,
        and the restarted worker replays from the last committed offset."""
        log.critical("%s, exiting without commit: %s", what, exc)
        logging.shutdown()
        os._exit(EXIT_STORE_UNAVAILABLE)

    @app.agent(events_topic, concurrency=1)  # type: ignore[untyped-decorator]
    async def process_events(stream: Any) -> None:
        loop_box["loop"] = asyncio.get_running_loop()
        await run(sink)
        # a message carries one event or many as JSON lines; batch by messages
        per_take = max(1, settings.batch_size // max(1, settings.wire_batch))
        async for taken in stream.take_events(per_take, within=settings.batch_seconds):
            batch = fresh(list(taken))
            if not batch:
                continue
            values, where = split_messages(batch)
            try:
                events, dead, origin = await run(sink().decode, values, where)
                if dead:
                    # the dlq agent is the one writer of dead_letters; wait for the broker
                    # to acknowledge before this batch is acked
                    for letter in dead:
                        fut = await dlq_topic.send(key=b"process",
                                                   value=letter.model_dump_json().encode())
                        await fut
                await run(handle_and_checkpoint, batch, events,
                          [where[i] for i in origin])
            except StoreUnavailable as exc:
                fatal(exc)
            except Exception as exc:  # publishing or saving the state failed: replay it
                fatal(exc, f"could not finish the batch ({type(exc).__name__})")

    @app.agent(commands_topic, concurrency=1)  # type: ignore[untyped-decorator]
    async def apply_commands(stream: Any) -> None:
        # people's commands: the same book the detector decides with (one thread), logged to
        # jobtrail.incident-events and ClickHouse; a refused command is a dead letter saying why
        loop_box["loop"] = asyncio.get_running_loop()
        await run(sink)
        async for taken in stream.take_events(100, within=settings.batch_seconds):
            batch = fresh(list(taken))
            for e in batch:
                where = f"{e.message.topic}/{e.message.partition}@{e.message.offset}"
                raw = e.value if isinstance(e.value, bytes) else str(e.value).encode()
                reason = ""
                try:
                    command = Command.model_validate_json(raw)
                    await run(sink().command, command, publish)
                except ValueError as exc:  # InvalidTransition is a ValueError too
                    reason = clip(str(exc), 500)
                except StoreUnavailable as exc:
                    fatal(exc)
                if reason:
                    letter = DeadLetter(
                        id=DeadLetter.make_id("incident.command", raw.decode("utf-8", "replace"),
                                              where),
                        stage="incident.command", reason=reason,
                        payload=clip(raw.decode("utf-8", "replace"), 10000), event_ref=where,
                        received_at=_ts(e.message.timestamp or 0.0))
                    await (await dlq_topic.send(key=b"commands",
                                                value=letter.model_dump_json().encode()))
            if batch:
                try:
                    await run(checkpoint, batch)
                except StoreUnavailable as exc:
                    fatal(exc)

    adapters = registry(settings.adapter_config())

    @app.agent(raw_topic, concurrency=1)  # type: ignore[untyped-decorator]
    async def normalise_raw(stream: Any) -> None:
        # raw payloads -> the adapters -> jobtrail.events / jobtrail.dlq; acked only after the
        # broker acknowledged what they became (ids are stable, so a redelivery is harmless)
        async for batch in stream.take_events(100, within=settings.batch_seconds):
            decoded = []
            for e in batch:
                m = e.message
                value = e.value if isinstance(e.value, bytes) else str(e.value).encode()
                key = m.key.decode("utf-8", "replace") if isinstance(m.key, bytes) else ""
                decoded.extend(decode_raw(value, key, text_headers(getattr(m, "headers", None)),
                                          _ts(m.timestamp or 0.0),
                                          f"{m.topic}/{m.partition}@{m.offset}", adapters))
            events = [d for d in decoded if isinstance(d, Event)]
            try:
                futures = [await events_topic.send(key=cluster.encode(), value=value)
                           for cluster, value in batch_by_cluster(events, settings.wire_batch)]
                futures += [await dlq_topic.send(key=b"raw", value=d.model_dump_json().encode())
                            for d in decoded if isinstance(d, DeadLetter)]
                for fut in futures:
                    await fut
            except Exception as exc:  # take_events would ack the batch anyway
                fatal(exc, "could not produce normalised raw input")

    @app.agent(dlq_topic, concurrency=1)  # type: ignore[untyped-decorator]
    async def store_dead_letters(stream: Any) -> None:
        await run(sink)
        async for batch in stream.take_events(1000, within=settings.batch_seconds):
            letters = []
            for e in batch:
                try:
                    letters.append(DeadLetter.model_validate_json(e.value))
                except ValueError as exc:
                    # a foreign record on our DLQ topic is itself kept, not dropped
                    letters.append(DeadLetter(
                        id=DeadLetter.make_id("dlq.decode", clip(repr(e.value), 10000), ""),
                        stage="dlq.decode", reason=clip(f"not a dead letter: {exc}", 500),
                        payload=clip(repr(e.value), 10000), event_ref=f"dlq@{e.message.offset}",
                        received_at=_ts(e.message.timestamp or 0.0)))
            try:
                await run(sink().store.write_dead_letters, letters, _token(list(batch)))
            except StoreUnavailable as exc:
                fatal(exc)

    return app


def split_messages(batch: list[Any]) -> tuple[list[bytes], list[str]]:
    """JSON-lines message values -> one record per line, each with its arrival
    `topic/partition@offset#line` (what the sink compares to recognise a replay)."""
    values: list[bytes] = []
    where_line: list[str] = []
    for e in batch:
        where = f"{e.message.topic}/{e.message.partition}@{e.message.offset}"
        raw = e.value if isinstance(e.value, bytes) else str(e.value).encode()
        lines = [line for line in raw.split(b"\n") if line.strip()] or [raw]
        for number, line in enumerate(lines):
            values.append(line)
            where_line.append(f"{where}#{number}")
    return values, where_line


def _ts(seconds: float) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, tz=UTC)


def run_worker(settings: Settings, loglevel: str = "warning") -> None:
    """Run the worker until stopped (blocks); topics are created first."""
    from jobtrail.kafka_io import ensure_topics

    asyncio.run(ensure_topics(settings))
    asyncio.set_event_loop(asyncio.new_event_loop())
    app = create_app(settings)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True)
    worker.execute_from_commandline()
