"""The two deployments the rollout tests run against: the embedded gateway (--out), and a gateway
producing to Kafka with `trajflow consume` writing to a bucket on s3proxy."""
import os
import random

import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest

from gateway_proc import Gateway, need, start_cli, stop


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rollout-embedded")
    out = str(tmp / "rows")
    gw = Gateway(str(tmp), "--out", out)
    yield gw, out
    gw.stop()


@pytest.fixture(scope="module")
def kafka_s3(tmp_path_factory):
    """The gateway producing to a fresh topic, and a consumer writing it to a fresh bucket on s3proxy."""
    brokers = need("KAFKA_BROKERS", "a Kafka broker")
    s3 = need("TRAJFLOW_TEST_S3", "an S3 server").split("\n")
    import boto3

    endpoint, key, secret = s3[-3:]
    env = {"AWS_ENDPOINT_URL_S3": endpoint, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
           "AWS_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    bucket = f"ro-{os.getpid()}-{random.randrange(1 << 30):x}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    tmp = tmp_path_factory.mktemp("rollout-kafka")
    topic = f"rollouts-{os.getpid()}-{random.randrange(1 << 30):x}"
    gw = Gateway(str(tmp), "--topic", topic, "--brokers", brokers)
    out = f"s3://{bucket}/rows"
    consumer = start_cli(
        ["consume", "--brokers", brokers, "--topic", topic, "--group", f"{topic}-g", "--out", out, "--file-age-ms", "200"],
        str(tmp / "consume.log"),
    )
    yield gw, out
    stop(consumer)
    gw.stop()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def read_all(out):
    if out.startswith("s3://"):
        fs, path = pafs.FileSystem.from_uri(out)
        return ds.dataset(path, filesystem=fs, format="parquet", exclude_invalid_files=True).to_table()
    return ds.dataset(out, format="parquet", exclude_invalid_files=True).to_table()
