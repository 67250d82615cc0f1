"""A CoDI judge loaded from an `s3://` prefix (moto's S3 server on loopback)."""

from __future__ import annotations

import json

import pytest

from ctgscore.testing.tiny_classifier import build_tiny_classifier, one_hot_bias
from scoring.registry import build_metric

EMOTIONS = ["anger", "disgust", "fear", "joy", "neutral", "sadness", "surprise"]


@pytest.mark.timeout(120)
def test_emotion_judge_from_s3_prefix(moto, s3_bucket, tmp_path, monkeypatch):
    endpoint = moto  # the shared server, and a bucket of this test's own on it
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    import s3fs

    local = build_tiny_classifier(tmp_path / "emo", EMOTIONS, one_hot_bias(EMOTIONS, "sadness"))
    fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint})
    for path in local.iterdir():
        fs.put(str(path), f"{s3_bucket}/emo/{path.name}")
    params = {"emotion_model": f"s3://{s3_bucket}/emo", "model_cache_dir": str(tmp_path / "cache")}
    rows = [{"id": str(i), "text": "some text", "constraint": json.dumps({"task": "sentiment", "label": label})}
            for i, label in enumerate(["sadness", "joy"])]  # fmt: skip
    out = build_metric("codi", params).score_rows(rows)
    assert [o["codi_success"] for o in out] == [1.0, 0.0]
    assert any((tmp_path / "cache").rglob("*.safetensors"))  # copied once into the node cache
    signature = build_metric("codi", params).signature().as_dict()
    assert signature["models"]["emotion"]["revision"].startswith("sha256:")
