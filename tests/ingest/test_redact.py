from __future__ import annotations

import json

import pytest

from ingest.canonical import decode, to_event
from ingest.redact import MASK, error_text, is_sensitive_key, redact_text, redact_value
from schemas.dead_letters import DeadLetter
from tests.conftest import OBSERVED

SECRETS = [
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9abc.def", "eyJhbGciOiJIUzI1NiJ9abc"),
    ("pulling from https://bob:hunter2pass@registry.local/x", "hunter2pass"),
    ("db password=Sup3rS3cret! retry", "Sup3rS3cret!"),
    ("export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    ("key AKIAIOSFODNN7EXAMPLE in log", "AKIAIOSFODNN7EXAMPLE"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----", "MIIEpA"),
    ("token ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdefghij"),
    ("slack xoxb-1234567890-abcdefghij", "xoxb-1234567890"),
    ("hf hf_abcdefghijklmnopqrstuvwxyz012345", "hf_abcdefghijkl"),
    ("openai sk-proj-abcdefghijklmnopqrstuvwx", "sk-proj-abcdefgh"),
    ('{"api_key": "abc123xyz"}', "abc123xyz"),
    ("WANDB_API_KEY=abc123secretvalue7", "abc123secretvalue7"),
]


@pytest.mark.parametrize(("text", "secret"), SECRETS)
def test_secret_is_masked(text: str, secret: str) -> None:
    out = redact_text(text)
    assert secret not in out
    assert MASK in out


@pytest.mark.parametrize("text", [
    "tokens_per_s=12000 loss=2.31 step=400",
    "NCCL WARN NET/IB : Got completion from peer 10.0.0.4 with error 12",
    "saved checkpoint to s3://ckpt/llm/step-2000",
    "user alice submitted job-7b-001",
])
def test_ordinary_lines_are_untouched(text: str) -> None:
    assert redact_text(text) == text


def test_sensitive_keys_by_word_not_substring() -> None:
    assert is_sensitive_key("db_password") and is_sensitive_key("apiKey")
    assert is_sensitive_key("AWS_SECRET_ACCESS_KEY") and is_sensitive_key("Authorization")
    assert not is_sensitive_key("tokens_per_s") and not is_sensitive_key("author")


def test_nested_attributes_are_redacted() -> None:
    value = redact_value({"env": {"HF_TOKEN": "hf_x", "PATH": "/usr/bin"},
                          "args": ["--password=letmein", "--lr=3e-4"]})
    assert value == {"env": {"HF_TOKEN": MASK, "PATH": "/usr/bin"},
                     "args": [f"--password={MASK}", "--lr=3e-4"]}


def test_event_message_and_attributes_are_redacted_before_validation() -> None:
    event = to_event({"type": "job.worker_exited", "time": "2026-11-30T08:00:00Z",
                      "cluster": "c", "project": "p", "job_id": "j",
                      "message": "exit; url https://u:pw12345@git.local/repo",
                      "attributes": {"rank": 1, "cmdline": "train --token abcdefgh12345678",
                                     "password": "x"}},
                     producer="t", observed_at=OBSERVED)
    dumped = event.to_json()
    assert "pw12345" not in dumped and "abcdefgh12345678" not in dumped
    assert event.attributes["password"] == MASK


def test_dead_letter_payload_is_redacted() -> None:
    raw = json.dumps({"type": "job.step", "time": "x", "message": "password=hunter22"})
    letters = decode(raw, producer="t", observed_at=OBSERVED)
    assert isinstance(letters[0], DeadLetter)
    assert "hunter22" not in letters[0].payload


@pytest.mark.parametrize("model", ["dead letter", "command"])
def test_an_error_about_a_record_never_echoes_its_input(model: str) -> None:
    # pydantic shows a cut head and tail of the input it refused; a token's tail matches no
    # pattern, so the message a dead letter keeps must not carry the input at all (found by
    # the Kafka credential corpus: a JWT's last 23 characters in a foreign DLQ record's reason)
    from processors.incidents.model import Command
    from tests.credentials import _kinds, fragments

    target = DeadLetter if model == "dead letter" else Command
    for secret in _kinds():
        for raw in (b"not a record " + secret.value.encode(),
                    json.dumps({"command_id": secret.value, "x": secret.value}).encode()):
            with pytest.raises(ValueError) as caught:
                target.model_validate_json(raw)
            text = error_text(caught.value)
            assert text and not any(part in text for needle in secret.needles
                                    for part in fragments(needle)), (secret.kind, text)
    assert "line 1 column" in error_text(caught.value) or "Field required" in error_text(
        caught.value)


def test_random_secret_keys_are_masked_whatever_their_letters_spell() -> None:
    # a random 40-character key holds a 5-letter run that reads like a word about 1 time in
    # 7 and has no digit 1 time in 1,000 (a corpus key `OvluenoMMd1etxkaViBYD0SQCSYbEHgVQT6E1wzt`
    # went through unmasked); paths with such runs stay readable
    import random
    import string

    rng = random.Random(2026)
    alphabet = string.ascii_letters + string.digits + "/+"
    keys = ["".join(rng.choice(alphabet) for _ in range(40)) for _ in range(5000)]
    missed = [k for k in keys if MASK not in redact_text(f"note={k}x") and
              MASK not in redact_text(k)]
    assert len(missed) <= 8, missed[:8]  # 6 of 5,000 (most have no digit); it was 20
    assert MASK in redact_text("OvluenoMMd1etxkaViBYD0SQCSYbEHgVQT6E1wzt")
    for path in ("/data/ImageNet/train/n01440764/Images2024/batch00017/file",
                 "/lustre/scratch/MegatronLM/checkpoints/iter0001500/model/Shard3of8",
                 "/home/alice/Projects/LlamaFinetune2024/outputs/Run17/Epoch3Best"):
        assert redact_text(path) == path
