"""A real single-node Apache Kafka (KRaft) broker on 127.0.0.1, from Maven Central jars.

`fetch()` resolves `org.apache.kafka:kafka_2.13` and a logging backend with Maven into a
cache (once); `start()` formats a fresh log dir, launches `kafka.Kafka` on free loopback
ports, waits until the broker answers a metadata request, and records its pid; `stop()` ends
it by pid. Tests, CI and `jobtrail dev kafka` all use this, so they run the same broker.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

# 3.9.x: KRaft GA with every old API version still served (aiokafka 0.14 negotiates them)
KAFKA_VERSION = "3.9.1"
_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.jobtrail</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{version}</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId>
      <version>1.7.36</version></dependency>
  </dependencies>
</project>
"""
_LOG4J = """log4j.rootLogger=WARN, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={path}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=INFO
"""


class BrokerError(RuntimeError):
    pass


@dataclass(frozen=True)
class Broker:
    pid: int
    port: int
    controller_port: int
    directory: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def to_json(self) -> str:
        return json.dumps({"pid": self.pid, "port": self.port,
                           "controller_port": self.controller_port,
                           "directory": str(self.directory)})


def default_cache() -> Path:
    return Path(os.environ.get("JOBTRAIL_KAFKA_CACHE") or Path.home() / ".cache" / "jobtrail")


def fetch(cache: Path | None = None, version: str = KAFKA_VERSION) -> Path:
    """Return the directory of broker jars, resolving them with Maven the first time."""
    root = (cache or default_cache()) / f"kafka-{version}"
    libs = root / "libs"
    marker = root / ".complete"
    if marker.exists():
        return libs
    if shutil.which("mvn") is None:
        raise BrokerError("Maven (mvn) is needed to fetch the Kafka jars; apt-get install maven")
    root.mkdir(parents=True, exist_ok=True)
    (root / "pom.xml").write_text(_POM.format(version=version))
    proc = subprocess.run(
        ["mvn", "-q", "-B", "-f", str(root / "pom.xml"), "dependency:copy-dependencies",
         "-DincludeScope=runtime", f"-DoutputDirectory={libs}"],
        capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0 or not any(libs.glob("kafka_2.13-*.jar")):
        raise BrokerError(f"mvn could not fetch kafka_2.13:{version}:\n{proc.stdout[-2000:]}"
                          f"{proc.stderr[-2000:]}")
    marker.write_text(version)
    return libs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _java(libs: Path, main: str, *args: str, log_config: Path, heap: str = "512m") -> list[str]:
    java = shutil.which("java")
    if java is None:
        raise BrokerError("java (JDK 17+) is needed to run the broker")
    return [java, f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseG1GC",
            f"-Dlog4j.configuration=file:{log_config}", "-cp", f"{libs}/*", main, *args]


def _ready(port: int) -> bool:
    """True once the broker answers a metadata request (not just an open socket)."""
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient

    async def probe() -> bool:
        admin = AIOKafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}",
                                    request_timeout_ms=3000)
        try:
            await admin.start()
            await admin.list_topics()
            return True
        except Exception:
            return False
        finally:
            await admin.close()

    quiet = logging.getLogger("aiokafka")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # refused connections are expected while it boots
    try:
        return asyncio.run(probe())
    finally:
        quiet.setLevel(level)


def start(directory: Path, *, cache: Path | None = None, version: str = KAFKA_VERSION,
          partitions: int = 1, timeout_s: float = 90.0) -> Broker:
    """Format a fresh single-node KRaft broker under `directory` and start it."""
    libs = fetch(cache, version)
    directory = directory.resolve()
    if directory.exists():
        shutil.rmtree(directory)
    (directory / "data").mkdir(parents=True)
    port, cport = _free_port(), _free_port()
    props = directory / "server.properties"
    props.write_text("\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{cport}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name=PLAINTEXT",
        f"log.dirs={directory / 'data'}",
        f"num.partitions={partitions}",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "default.replication.factor=1",
        "min.insync.replicas=1",
        # without this every first consumer-group join waits 3 s
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=true",
        "log.flush.interval.messages=9223372036854775807",
        "",
    ]))
    log_config = directory / "log4j.properties"
    log_config.write_text(_LOG4J.format(path=directory / "broker.log"))
    fmt = subprocess.run(
        _java(libs, "kafka.tools.StorageTool", "random-uuid", log_config=log_config,
              heap="128m"), capture_output=True, text=True, timeout=120, check=False)
    cluster_id = fmt.stdout.strip().splitlines()[-1] if fmt.returncode == 0 else ""
    if not cluster_id:
        raise BrokerError(f"StorageTool random-uuid failed: {fmt.stderr[-2000:]}")
    fmt = subprocess.run(
        _java(libs, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props),
              "--ignore-formatted", log_config=log_config, heap="128m"),
        capture_output=True, text=True, timeout=120, check=False)
    if fmt.returncode != 0:
        raise BrokerError(f"StorageTool format failed: {fmt.stderr[-2000:]}")
    return _launch(libs, directory, port, cport, timeout_s)


def _launch(libs: Path, directory: Path, port: int, cport: int, timeout_s: float) -> Broker:
    """Run `kafka.Kafka` on the formatted `directory` and wait until it answers."""
    props = directory / "server.properties"
    log_config = directory / "log4j.properties"
    out = (directory / "stdout.log").open("ab")
    proc = subprocess.Popen(
        _java(libs, "kafka.Kafka", str(props), log_config=log_config),
        stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    broker = Broker(proc.pid, port, cport, directory)
    (directory / "broker.json").write_text(broker.to_json())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BrokerError(f"broker exited with {proc.returncode}; see {directory}/stdout.log")
        if _ready(port):
            return broker
        time.sleep(0.5)
    stop(broker)
    raise BrokerError(f"broker not ready within {timeout_s:.0f} s; see {directory}")


def restart(broker: Broker, *, down_s: float = 0.0, sig: int = signal.SIGTERM,
            cache: Path | None = None, version: str = KAFKA_VERSION,
            timeout_s: float = 90.0) -> Broker:
    """Stop the broker (SIGTERM: a clean shutdown; SIGKILL: a crash), stay down `down_s`,
    and start it again on the same ports and log dirs: what its clients see of a restart."""
    stop(broker, sig=sig)
    time.sleep(down_s)
    return _launch(fetch(cache, version), broker.directory, broker.port,
                   broker.controller_port, timeout_s)


def load(directory: Path) -> Broker | None:
    state = directory / "broker.json"
    if not state.exists():
        return None
    data = json.loads(state.read_text())
    return Broker(int(data["pid"]), int(data["port"]), int(data["controller_port"]),
                  Path(data["directory"]))


def alive(broker: Broker) -> bool:
    try:
        os.kill(broker.pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop(broker: Broker, timeout_s: float = 30.0, *, sig: int = signal.SIGTERM) -> None:
    """`sig` (SIGTERM), then SIGKILL after `timeout_s`; bounded either way."""
    if not alive(broker):
        return
    os.killpg(broker.pid, sig)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(broker.pid, os.WNOHANG)
        except ChildProcessError:
            pid = 0 if alive(broker) else broker.pid
        if pid == broker.pid or not alive(broker):
            return
        time.sleep(0.2)
    os.killpg(broker.pid, signal.SIGKILL)
