"""redact_url / redact_text: no credential survives, everything else does."""

from __future__ import annotations

import pytest

from storages.redaction import redact_known, redact_text, redact_url, url_secrets


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


@pytest.mark.parametrize(
    ("url", "secrets"),
    [
        ("redis://app:hunter2@h:6379/0", {"hunter2"}),
        ("s3://KEY:hunter2@bucket/p", {"hunter2"}),
        ("app:hunter2@example.com/x", {"hunter2"}),  # a URL written without its scheme
        ("redis://app:p%40ss@h/0", {"p%40ss", "p@ss"}),  # as written and percent-decoded
        ("s3://b/p?aws_secret_access_key=hunter2&region=x", {"hunter2"}),
        ("s3://b/p?endpoint_url=http%3A%2F%2Fapp%3Ahunter2%40minio%3A9000", {"hunter2"}),
        ("sqlite:///ck.db?integrity_key_env=KEY", set()),
        ("memory://", set()),
    ],
)
def test_url_secrets_are_what_a_message_could_quote(url: str, secrets: set[str]) -> None:
    assert url_secrets(url) == secrets


def test_a_known_secret_is_masked_wherever_it_is_quoted() -> None:
    secrets = url_secrets("s3://KEY:hunter2@bucket/p")
    # A parser quoting the piece it refused: no URL pattern would find this one.
    assert redact_known("Invalid S3 bucket name 'KEY:hunter2@bucket'", secrets) == (
        "Invalid S3 bucket name 'KEY:***@bucket'"
    )
    assert redact_known("ab and abc", {"ab"}) == "ab and abc"  # too short to mask as text


def test_a_url_inside_an_option_is_redacted_too() -> None:
    url = "s3://b/p?endpoint_url=http://app:hunter2@minio:9000&region=x"
    assert "hunter2" not in redact_url(url)
    assert "hunter2" not in redact_text("key p?endpoint_url=http%3A%2F%2Fapp%3Ahunter2%40minio%3A9000 failed")
    assert redact_url("app:hunter2@example.com/x") == "app:***@example.com/x"
