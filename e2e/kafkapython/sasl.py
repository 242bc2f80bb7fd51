"""kafka-python SASL PLAIN against a PicoMQ node with --auth-tokens.

Usage: sasl.py BROKER TOKEN TOPIC [API_VERSION]

kafka-python 2.0.2 always authenticates with SaslHandshake v0 followed by
the raw PLAIN message. With the right token it creates a topic, produces
and consumes; with TOKEN "wrong" it must fail to connect.
"""
import sys, logging
from kafka import KafkaProducer, KafkaConsumer, KafkaAdminClient, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import NoBrokersAvailable

logging.basicConfig(level=logging.CRITICAL)
B, tok, T = sys.argv[1], sys.argv[2], sys.argv[3]
kw = dict(security_protocol='SASL_PLAINTEXT', sasl_mechanism='PLAIN',
          sasl_plain_username='any', sasl_plain_password=tok, request_timeout_ms=40000)
if len(sys.argv) > 4:
    kw['api_version'] = tuple(int(x) for x in sys.argv[4].split('.'))
if tok == 'wrong':
    try:
        KafkaAdminClient(bootstrap_servers=B, **kw)
    except NoBrokersAvailable:
        print("OK")
        sys.exit(0)
    print("FAIL: a wrong token connected")
    sys.exit(1)
KafkaAdminClient(bootstrap_servers=B, **kw).create_topics([NewTopic(T, 1, 1)])
p = KafkaProducer(bootstrap_servers=B, acks='all', **kw)
md = p.send(T, key=b'k', value=b'sasl').get(timeout=30)
c = KafkaConsumer(bootstrap_servers=B, auto_offset_reset='earliest', consumer_timeout_ms=10000, **kw)
c.assign([TopicPartition(T, 0)])
got = [m.value for m in c]
if got != [b'sasl']:
    print("FAIL: consumed %r" % got)
    sys.exit(1)
print("OK")
