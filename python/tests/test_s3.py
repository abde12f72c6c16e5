"""The reader on an S3 prefix (the s3proxy `npm test` starts): the same batches as from a directory, and
every row exactly once while a Kafka consumer writes to the bucket and the trainer is SIGKILLed, with
listings that start at each lane's mark instead of at the bucket's first file."""
import json
import os
import random

import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest

from conftest import need, trajflow, write_events
from test_resume import train_while_consuming
from trajflow import TrajectoryReader
from trajflow.files import Lister

S3 = need("TRAJFLOW_TEST_S3", "an S3 server: endpoint, key and secret, one per line", module=True).split("\n")


@pytest.fixture
def bucket(monkeypatch):
    import boto3

    endpoint, key, secret = S3[-3:]
    env = {"AWS_ENDPOINT_URL_S3": endpoint, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret, "AWS_REGION": "us-east-1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    name = f"py-{os.getpid()}-{random.randrange(1 << 30):x}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


def keys_in(url):
    fs, path = pafs.FileSystem.from_uri(url)
    return sorted(ds.dataset(path, filesystem=fs, format="parquet").to_table().column("key").to_pylist())


def test_reads_an_s3_prefix_as_it_reads_a_directory(bucket, tmp_path):
    events = write_events(tmp_path / "events.jsonl")
    local = tmp_path / "out"
    args = ["--group", "--rows-per-file", "5", "--reward-grace-ms", "0"]
    trajflow("replay", str(events), "--out", str(local), *args)
    trajflow("replay", str(events), "--out", f"s3://{bucket}/run", *args)
    batches = {}
    for root in (str(local), f"s3://{bucket}/run"):
        reader = TrajectoryReader(root, batch_units=3, unit="group")
        batches[root] = []
        for b in reader.batches():
            batches[root].append(b.keys)
            reader.commit(b)
    assert batches[f"s3://{bucket}/run"] == batches[str(local)]
    assert sum(len(b) for b in batches[str(local)]) == 48


def test_follows_a_bucket_a_kafka_consumer_writes_through_kills_of_the_trainer(bucket, tmp_path):
    need("KAFKA_BROKERS", "a Kafka broker")
    out = f"s3://{bucket}/rows"
    ckpt = train_while_consuming(tmp_path, out, keys_in, "4")[-1]

    # The cursor holds a mark per lane and a few names, not every file read...
    cursor = json.loads((ckpt / "cursor.json").read_text())["cursor"]
    files = Lister(out, None).list({})
    assert cursor["marks"] and all(m > 0 for m in cursor["marks"].values())
    assert len(cursor["done"]) < len(files)
    # ...and a listing after the first one starts at the marks: it returns fewer keys than the bucket has.
    lister = Lister(out, None)
    assert lister.list(cursor["marks"]) is not None  # the first listing discovers the lanes
    returned = []
    real = lister._s3.list

    def recording(prefix, start):
        keys = real(prefix, start)
        returned.extend(keys)
        return keys

    lister._s3.list = recording
    lister.list(cursor["marks"])
    assert 0 < len(returned) < len(files), (len(returned), len(files))
