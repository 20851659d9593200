"""redact_url / redact_text: no credential survives, everything else does."""

from __future__ import annotations

import pytest

from storages.redaction import redact_text, redact_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://:hunter2@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("rediss://alice:hunter2@cache:6380/1?prefix=app", "rediss://alice:***@cache:6380/1?prefix=app"),
        ("redis://alice@cache:6379/0", "redis://alice@cache:6379/0"),
        (
            "s3://bucket/run?aws_access_key_id=AKIA1&aws_secret_access_key=hunter2&region=eu-west-1",
            "s3://bucket/run?aws_access_key_id=***&aws_secret_access_key=***&region=eu-west-1",
        ),
        ("s3://bucket/p?aws_session_token=hunter2", "s3://bucket/p?aws_session_token=***"),
        ("postgresql://u:hunter2@db/x?schema=s", "postgresql://u:***@db/x?schema=s"),
        ("memory://", "memory://"),
        ("sqlite:///ckpt.db", "sqlite:///ckpt.db"),
        ("redis://h/0?integrity_key_env=CKPT_KEY", "redis://h/0?integrity_key_env=CKPT_KEY"),
    ],
)
def test_redact_url_hides_credentials_only(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert "hunter2" not in redact_url(url)


def test_redact_text_hides_urls_and_secret_pairs_inside_messages() -> None:
    text = (
        "Error connecting to redis://:hunter2@10.0.0.1:6379/0 "
        "(url s3://b/p?aws_secret_access_key=hunter2&x=1); password=hunter2"
    )
    redacted = redact_text(text)
    assert "hunter2" not in redacted
    assert "redis://:***@10.0.0.1:6379/0" in redacted
    assert "x=1" in redacted


def test_names_that_merely_contain_a_secret_word_are_kept() -> None:
    text = "get_latest(graph_signature_hash='abc') with sse_kms_key_id=alias/app"
    assert redact_text(text) == text


def test_redact_url_never_raises_on_garbage() -> None:
    assert redact_url("not a url password=hunter2") == "not a url password=***"
    assert redact_url("http://[::1") is not None
