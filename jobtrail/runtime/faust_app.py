"""The cluster runtime: a Faust worker on `jobtrail.raw`, `jobtrail.events`,
`jobtrail.incident-commands` and `jobtrail.dlq`; it produces `jobtrail.incident-events`.

`jobtrail.raw` carries payloads as sources sent them (`ingest/raw.py`); its agent runs the
adapter and produces what it yields to `jobtrail.events` and `jobtrail.dlq`.

An agent is a thin shell: take a batch, split it by partition, and hand each part to the
worker's `Shards` (`shards.py`: one processor state per partition, saved in the store and
handed over on rebalance) on a single store thread, because the ClickHouse client is
blocking; only then does Faust ack the batch. Faust commits acked offsets every second; a
restarted or new owner of a partition loads its saved state and replays from Kafka what came
between that state and the committed offset, so its state is the uninterrupted one's, and so
is the incident log.

Two Faust caveats shape this (faust-streaming issues #606 and #177): agents keep `concurrency=1`
(higher can commit past an in-flight message), and `take_events` acks its buffer in a
`finally`, even when the body raised. So a write that still fails after the retry budget
must not raise into Faust: the worker logs and exits the process without acking, and the
restarted worker replays from the last committed offset.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import faust

from ingest.adapters import registry
from ingest.raw import decode_raw, text_headers
from ingest.redact import clip, error_text
from jobtrail.config import Settings
from jobtrail.runtime.build import build_sink, open_store
from jobtrail.runtime.kafka_io import (
    PartitionReader,
    Record,
    batch_by_cluster,
    sign,
    signed,
    until_sent,
)
from jobtrail.runtime.shards import PartialStore, Shards
from jobtrail.store.retry import RetryPolicy, StoreUnavailable
from processors.incidents.model import IncidentEvent
from schemas.dead_letters import DeadLetter
from schemas.events import Event

MESSAGE_BYTES = 512 * 1024
"""An incident-events message holds JSON lines up to this size (the producer's limit is 1 MB)."""
log = logging.getLogger("jobtrail.worker")


def message_chunks(lines: list[bytes], limit: int = MESSAGE_BYTES) -> list[bytes]:
    """JSON lines joined into messages of at most `limit` bytes (a line longer than that
    goes alone), in order."""
    out: list[list[bytes]] = [[]]
    size = 0
    for line in lines:
        if out[-1] and size + len(line) + 1 > limit:
            out.append([])
            size = 0
        out[-1].append(line)
        size += len(line) + 1
    return [b"\n".join(part) for part in out if part]


EXIT_STORE_UNAVAILABLE = 70
EXIT_PARTIAL_STORE = 78  # EX_CONFIG: the store is not the one the consumer group wrote to


def _records(batch: list[Any], key: bytes = b"") -> dict[int, list[Record]]:
    """Faust events -> our records, by partition, each partition's in offset order; with the
    wire key, whether each is signed by it."""
    out: dict[int, list[Record]] = {}
    for e in batch:
        m = e.message
        value = e.value if isinstance(e.value, bytes) else str(e.value).encode()
        headers = list(m.headers.items()) if isinstance(m.headers, dict) else m.headers
        out.setdefault(m.partition, []).append(
            Record(m.topic, m.partition, m.offset, value, m.timestamp or 0.0,
                   signed(key, value, headers)))
    return out


def create_app(settings: Settings) -> faust.App:
    from jobtrail.runtime.home import HomeLock

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
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=max(1.0, settings.session_timeout_s / 10),
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
    held: dict[str, Any] = {}

    def shards() -> Shards:
        """Built on the store thread at first use (opening the store may take a while)."""
        if "shards" not in held:
            store = open_store(settings)
            store.retry = RetryPolicy(budget_s=settings.store_retry_s)
            if not settings.clickhouse_dsn and settings.partitions > 1:
                log.warning("the store is this worker's own chDB under %s: every worker of "
                            "the group must write to one ClickHouse server "
                            "(JOBTRAIL_CLICKHOUSE)", settings.home)
            held["shards"] = Shards(
                app_id=settings.app_id, events_topic=settings.topic("events"),
                commands_topic=settings.topic("incident-commands"), store=store,
                make_sink=lambda: build_sink(settings, store, restore=False),
                reader=PartitionReader(settings.kafka, settings.app_id),
                snapshot_interval_s=settings.snapshot_interval_s)
        return held["shards"]  # type: ignore[no-any-return]

    async def run(fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)

    loop_box: dict[str, asyncio.AbstractEventLoop] = {}


    async def send_incidents(events: list[IncidentEvent]) -> None:
        # one message per incident and batch, its events as JSON lines in seq order: a
        # message per event cost more than processing the event (the send path is Python)
        # (several messages when they would pass MESSAGE_BYTES: the producer refuses > 1 MB)
        by_incident: dict[str, list[bytes]] = {}
        for e in events:
            by_incident.setdefault(e.incident_id, []).append(e.to_json().encode())

        async def once() -> None:
            futures = [await app.producer.send(incident_topic.get_topic_name(), key.encode(),
                                               message, None, None, None)
                       for key, lines in by_incident.items()
                       for message in message_chunks(lines)]
            for fut in futures:
                await fut

        await until_sent("incident events", once)  # a broker restart is ridden out

    def publish(events: list[IncidentEvent]) -> Callable[[], None]:
        """Called from the store thread: sends on the event loop, and returns the wait for
        the broker's acknowledgement (the sink waits once the store is written)."""
        sending = asyncio.run_coroutine_threadsafe(send_incidents(events), loop_box["loop"])
        return lambda: sending.result(120)

    async def send_dead(letters: list[DeadLetter], key: bytes) -> None:
        # the dlq agent is the one writer of dead_letters; wait for the broker to acknowledge
        # before the batch that made them is acked
        async def once() -> None:
            futures = [await dlq_topic.send(key=key, value=d.model_dump_json().encode())
                       for d in letters]
            for fut in futures:
                await fut

        if letters:
            await until_sent("dead letters", once)

    def fatal(exc: BaseException,
              what: str = "ClickHouse unavailable past the retry budget",
              code: int = EXIT_STORE_UNAVAILABLE) -> None:
        """Exit without acking: take_events would ack the batch in its `finally` otherwise,
        and the restarted worker replays from the last committed offset."""
        log.critical("%s, exiting without commit: %s", what, exc)
        logging.shutdown()
        os._exit(code)

    @app.agent(events_topic, concurrency=1)  # type: ignore[untyped-decorator]
    async def process_events(stream: Any) -> None:
        loop_box["loop"] = asyncio.get_running_loop()
        await run(shards)
        # a message carries one event or many as JSON lines; batch by messages
        per_take = max(1, settings.batch_size // max(1, settings.wire_batch))
        async for taken in stream.take_events(per_take, within=settings.batch_seconds):
            try:
                for partition, records in _records(list(taken), settings.wire_key).items():
                    dead = await run(shards().events, partition, records, publish)
                    await send_dead(dead, b"process")
            except StoreUnavailable as exc:
                fatal(exc)
            except PartialStore as exc:
                fatal(exc, "refusing to build a partial store", EXIT_PARTIAL_STORE)
            except Exception as exc:  # publishing or loading the state failed: replay it
                fatal(exc, f"could not finish the batch ({type(exc).__name__})")

    @app.agent(commands_topic, concurrency=1)  # type: ignore[untyped-decorator]
    async def apply_commands(stream: Any) -> None:
        # people's commands: the shard's book the detector decides with (one thread), logged
        # to jobtrail.incident-events and ClickHouse; a refused command is a dead letter
        loop_box["loop"] = asyncio.get_running_loop()
        await run(shards)
        async for taken in stream.take_events(100, within=settings.batch_seconds):
            try:
                for partition, records in _records(list(taken)).items():
                    refused = await run(shards().commands, partition, records, publish)
                    await send_dead(refused, b"commands")
            except StoreUnavailable as exc:
                fatal(exc)
            except PartialStore as exc:
                fatal(exc, "refusing to build a partial store", EXIT_PARTIAL_STORE)
            except Exception as exc:
                fatal(exc, f"could not finish the commands ({type(exc).__name__})")

    @app.on_partitions_assigned.connect  # type: ignore[untyped-decorator]
    async def check_store(sender: Any, assigned: set[Any], **_: Any) -> None:
        partitions = {tp.partition for tp in assigned if tp.topic == settings.topic("events")}
        if partitions:
            try:
                await run(lambda: shards().verify(partitions))
            except PartialStore as exc:
                fatal(exc, "refusing to build a partial store", EXIT_PARTIAL_STORE)

    @app.on_partitions_revoked.connect  # type: ignore[untyped-decorator]
    async def hand_over(sender: Any, revoked: set[Any], **_: Any) -> None:
        # Faust calls this after the acked offsets are committed: save what goes away
        ours = {settings.topic("events"), settings.topic("incident-commands")}
        partitions = {tp.partition for tp in revoked if tp.topic in ours}
        if partitions and "shards" in held:
            try:
                await run(shards().release, partitions)
            except Exception as exc:  # the next owner replays from an older state instead
                log.warning("could not save the state of partitions %s: %s", partitions, exc)

    @app.on_before_shutdown.connect  # type: ignore[untyped-decorator]
    async def save_all(sender: Any, **_: Any) -> None:
        if "shards" in held:
            try:
                await run(shards().close)
            except Exception as exc:
                log.warning("could not save the state at shutdown: %s", exc)

    @app.task  # type: ignore[untyped-decorator]
    async def probes() -> None:
        if settings.worker_port:
            from jobtrail.runtime import worker_http
            from jobtrail.store.probe import StoreProbe

            held["probes"] = await worker_http.serve(
                settings.http_host, settings.worker_port,
                lambda: shards().describe() if "shards" in held else {},
                StoreProbe.of(settings.dsn, settings.database))

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
                futures = [await events_topic.send(key=cluster.encode(), value=value,
                                                   headers=sign(settings.wire_key, value))
                           for cluster, value in batch_by_cluster(events, settings.wire_batch)]
                futures += [await dlq_topic.send(key=b"raw", value=d.model_dump_json().encode())
                            for d in decoded if isinstance(d, DeadLetter)]
                for fut in futures:
                    await fut
            except Exception as exc:  # take_events would ack the batch anyway
                fatal(exc, "could not produce normalised raw input")

    @app.agent(dlq_topic, concurrency=1)  # type: ignore[untyped-decorator]
    async def store_dead_letters(stream: Any) -> None:
        await run(shards)
        async for batch in stream.take_events(1000, within=settings.batch_seconds):
            letters = []
            for e in batch:
                try:
                    letters.append(DeadLetter.model_validate_json(e.value))
                except ValueError as exc:
                    # a foreign record on our DLQ topic is itself kept, not dropped
                    letters.append(DeadLetter(
                        id=DeadLetter.make_id("dlq.decode", clip(repr(e.value), 10000), ""),
                        stage="dlq.decode", reason=f"not a dead letter: {error_text(exc)}",
                        payload=clip(repr(e.value), 10000), event_ref=f"dlq@{e.message.offset}",
                        received_at=_ts(e.message.timestamp or 0.0)))
            records = [r for part in _records(list(batch)).values() for r in part]
            try:
                await run(shards().store.write_dead_letters, letters,
                          f"{records[0].topic}-{records[0].partition}-{records[0].offset}-"
                          f"{records[-1].offset}")
            except StoreUnavailable as exc:
                fatal(exc)

    return app


def _ts(seconds: float) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, tz=UTC)


def run_worker(settings: Settings, loglevel: str = "warning") -> None:
    """Run the worker until stopped (blocks); topics are created first."""
    from jobtrail.runtime.kafka_io import ensure_topics, partition_counts

    asyncio.run(ensure_topics(settings))
    counts = asyncio.run(partition_counts(settings, ("events", "incident-commands")))
    if len(set(counts.values())) != 1:
        # a command must reach the worker that holds its incident: Faust gives the same
        # partition of both topics to one worker only when their counts are equal
        raise SystemExit(f"{settings.topic('events')} and {settings.topic('incident-commands')} "
                         f"must have the same number of partitions, found {counts}; add "
                         "partitions to the smaller one (kafka-topics --alter)")
    asyncio.set_event_loop(asyncio.new_event_loop())
    app = create_app(settings)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True)
    # Faust's terminal spinner sets the root logger to DEBUG to spin on every record: every
    # library's debug record was then made and dropped (a cost per message sent)
    worker.spinner = None
    worker.execute_from_commandline()
