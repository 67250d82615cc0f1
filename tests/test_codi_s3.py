"""A CoDI judge loaded from an `s3://` prefix (moto's S3 server on loopback)."""

from __future__ import annotations

import json

import pytest

from ctgscore.testing.tiny_classifier import build_tiny_classifier, one_hot_bias
from scoring.registry import build_metric
from tests.job_support import start_moto, stop_group

EMOTIONS = ["anger", "disgust", "fear", "joy", "neutral", "sadness", "surprise"]


@pytest.mark.timeout(120)
def test_emotion_judge_from_s3_prefix(tmp_path, monkeypatch):
    process, endpoint = start_moto()
    try:
        for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}.items():  # fmt: skip
            monkeypatch.setenv(key, value)
        import s3fs

        local = build_tiny_classifier(tmp_path / "emo", EMOTIONS, one_hot_bias(EMOTIONS, "sadness"))
        fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint})
        fs.mkdir("codi-models")
        for path in local.iterdir():
            fs.put(str(path), f"codi-models/emo/{path.name}")
        params = {"emotion_model": "s3://codi-models/emo", "model_cache_dir": str(tmp_path / "cache")}
        rows = [{"id": str(i), "text": "some text", "constraint": json.dumps({"task": "sentiment", "label": label})}
                for i, label in enumerate(["sadness", "joy"])]  # fmt: skip
        out = build_metric("codi", params).score_rows(rows)
        assert [o["codi_success"] for o in out] == [1.0, 0.0]
        assert any((tmp_path / "cache").rglob("*.safetensors"))  # copied once into the node cache
        signature = build_metric("codi", params).signature().as_dict()
        assert signature["models"]["emotion"]["revision"].startswith("sha256:")
    finally:
        stop_group(process)
