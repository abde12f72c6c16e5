"""Produces a JSONL file's events to a topic with librdkafka (confluent-kafka), keyed by uid, using the
given compression codec: batches as non-kafkajs gateways send them.

usage: produce_librdkafka.py <brokers> <topic> <events.jsonl> <codec: gzip|snappy|lz4|zstd|none>
"""
import json
import sys

from confluent_kafka import Producer


def main() -> None:
    brokers, topic, path, codec = sys.argv[1:5]
    producer = Producer(
        {"bootstrap.servers": brokers, "compression.type": codec, "linger.ms": 50, "enable.idempotence": True}
    )
    sent = 0
    with open(path, "rb") as f:
        for line in f:
            line = line.rstrip(b"\n")
            if not line:
                continue
            uid = json.loads(line).get("uid")
            producer.produce(topic, value=line, key=uid.encode() if uid else None)
            sent += 1
            producer.poll(0)
    left = producer.flush(30)
    if left:
        raise SystemExit(f"{left} messages were not delivered")
    print(sent)


if __name__ == "__main__":
    main()
