"""kafka-python (Debian python3-kafka 2.0.2) against a PicoMQ node.

Usage: clients.py BROKER TOPIC [API_VERSION]   e.g. 0.11.0; default: probe.

With an API_VERSION the client never sends ApiVersions and uses the
versions it assumes that broker has (e.g. 0.11.0: Produce v3 with magic-2
batches). Older ones (0.9, 0.10: Produce v1/v2 with magic 0/1 message
sets) are refused by a node, as by Kafka 4.0.
Exits non-zero with a message on the first failure.
"""
import sys, time, threading, logging
from kafka import KafkaProducer, KafkaConsumer, KafkaAdminClient, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaTimeoutError

logging.basicConfig(level=logging.ERROR)
B, T = sys.argv[1], sys.argv[2]
kw = {'request_timeout_ms': 40000}  # above every session timeout, as old api_versions require
if len(sys.argv) > 3:
    kw['api_version'] = tuple(int(x) for x in sys.argv[3].split('.'))
api = kw.get('api_version', (9,))
headers = api >= (0, 11)   # record headers need magic 2
# kafka-python's own magic-0 lz4 encoder (api_version < 0.10) fails with
# the lz4 module Debian ships, before anything is sent; zstd needs 2.1.
codecs = [None, 'gzip', 'snappy'] + (['lz4'] if api >= (0, 10) else []) + (['zstd'] if api >= (2, 1) else [])


def check(cond, what):
    if not cond:
        print("FAIL:", what, flush=True)
        sys.exit(1)


def wait_for(pred, what, secs=60):
    deadline = time.time() + secs
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.2)
    check(False, "timed out waiting for " + what)


adm = KafkaAdminClient(bootstrap_servers=B, **kw)
adm.create_topics([NewTopic(T, 2, 1)])
check(T in adm.list_topics(), "created topic listed")

# Produce: every acks level and codec, keys (and headers where the format has them).
start = int(time.time() * 1000) - 1000
want = []
for codec in codecs:
    for acks in (0, 1, 'all'):
        p = KafkaProducer(bootstrap_servers=B, acks=acks, compression_type=codec, **kw)
        v = ('%s-%s' % (codec, acks)).encode()
        h = [('h', v)] if headers else None
        md = p.send(T, key=b'k', value=v, headers=h, partition=0).get(timeout=30)
        check(acks == 0 or md.offset >= 0, "offset for %s" % v)
        p.flush()
        p.close()
        want.append(v)

tp = TopicPartition(T, 0)
c = KafkaConsumer(bootstrap_servers=B, auto_offset_reset='earliest', consumer_timeout_ms=3000, **kw)
c.assign([tp])
wait_for(lambda: c.end_offsets([tp])[tp] == len(want), "acks=0 records")
got = []
deadline = time.time() + 60
while len(got) < len(want) and time.time() < deadline:
    for m in c.poll(timeout_ms=500).get(tp, []):
        check(m.key == b'k', "key of %r" % (m.value,))
        check(not headers or m.headers == [('h', m.value)], "headers of %r: %r" % (m.value, m.headers))
        got.append(m.value)
check(sorted(got) == sorted(want), "consumed %r, want %r" % (got, want))
check(c.beginning_offsets([tp])[tp] == 0, "beginning offset")
if api >= (0, 10, 1):
    ot = c.offsets_for_times({tp: start})[tp]
    check(ot is not None and ot.offset == 0, "offsets_for_times: %r" % (ot,))
    check(c.offsets_for_times({tp: int(time.time() * 1000) + 3600000})[tp] is None, "offsets_for_times in the future")
# From the latest: only what comes after.
c.seek_to_end(tp)
check(c.position(tp) == len(want), "position after seek_to_end")  # resolves the lazy seek now
p = KafkaProducer(bootstrap_servers=B, acks='all', **kw)
p.send(T, value=b'latest', partition=0).get(timeout=30)
latest = []
wait_for(lambda: latest.extend(m.value for m in c.poll(timeout_ms=300).get(tp, [])) or latest, "the record after seek_to_end")
check(latest == [b'latest'], "from latest: %r" % latest)
c.close()

# A missing topic: no partitions, and the producer gives up (no auto-create).
c = KafkaConsumer(bootstrap_servers=B, **kw)
check(c.partitions_for_topic(T + '-missing') is None, "missing topic has partitions")
c.close()
mp = KafkaProducer(bootstrap_servers=B, max_block_ms=3000, **kw)
try:
    mp.send(T + '-missing', value=b'x').get(timeout=10)
    check(False, "produce to a missing topic succeeded")
except KafkaTimeoutError:
    pass
mp.close()
check(T + '-missing' not in adm.list_topics(), "missing topic was created")

# A group of two: both get partitions, one leaves, the other takes over;
# commits survive a consumer restart.
seen, lock, stop = {}, threading.Lock(), {}
# Records whose commit was refused (a commit racing a rebalance, as Kafka
# answers too): at-least-once lets them come again after the restart.
refused = set()
def member(name):
    # Before 0.10.1 (JoinGroup v0) the client insists on max_poll_interval_ms = session_timeout_ms.
    g = KafkaConsumer(T, bootstrap_servers=B, group_id='g-' + T, auto_offset_reset='earliest',
                      enable_auto_commit=False, session_timeout_ms=10000, heartbeat_interval_ms=1000,
                      max_poll_interval_ms=30000 if api >= (0, 10, 1) else 10000, **kw)
    while not stop.get(name):
        r = g.poll(timeout_ms=300)
        with lock:
            for ms in r.values():
                for m in ms:
                    seen.setdefault(m.value, set()).add(name)
        if r:
            try:
                g.commit()
            except Exception as e:
                print("commit by %s refused: %r" % (name, e), flush=True)
                with lock:
                    refused.update(m.value for ms in r.values() for m in ms)
    g.close()
def count(prefix, n, by=None):
    with lock:
        return sum(1 for i in range(n) if (prefix + str(i)).encode() in seen
                   and (by is None or by in seen[(prefix + str(i)).encode()]))
threads = {n: threading.Thread(target=member, args=(n,)) for n in ('m1', 'm2')}
for th in threads.values():
    th.start()
for i in range(40):
    p.send(T, key=str(i).encode(), value=('a%d' % i).encode())
p.flush()
wait_for(lambda: count('a', 40) == 40, "group members to consume a0..a39")
# Records of the group topic from before the group (partition 0) are consumed too.
stop['m2'] = True
threads['m2'].join()
for i in range(20):
    p.send(T, key=str(i).encode(), value=('b%d' % i).encode())
p.flush()
wait_for(lambda: count('b', 20, 'm1') == 20, "the remaining member to take every partition")
stop['m1'] = True
threads['m1'].join()
for i in range(5):
    p.send(T, key=str(i).encode(), value=('c%d' % i).encode())
p.flush()
g = KafkaConsumer(T, bootstrap_servers=B, group_id='g-' + T, auto_offset_reset='earliest', enable_auto_commit=False, **kw)
again, cs = [], [b'c0', b'c1', b'c2', b'c3', b'c4']
deadline = time.time() + 60
while not set(cs) <= set(again) and time.time() < deadline:
    for ms in g.poll(timeout_ms=500).values():
        again.extend(m.value for m in ms)
with lock:
    check(sorted(v for v in again if v not in refused) == cs,
          "after restart, consumed %r (want only c0..c4, and records whose commit was refused %r)" % (again, refused))
g.commit()
ends = g.end_offsets([TopicPartition(T, 0), TopicPartition(T, 1)])
g.close()
offs = adm.list_consumer_group_offsets('g-' + T)
check({tp: o.offset for tp, o in offs.items()} == ends, "committed offsets %r, want the ends %r" % (offs, ends))
check(sum(ends.values()) == len(want) + 1 + 65, "%d records in the topic, want %d" % (sum(ends.values()), len(want) + 1 + 65))
check(('g-' + T, 'consumer') in adm.list_consumer_groups(), "group listed")
adm.delete_topics([T])
check(T not in adm.list_topics(), "deleted topic listed")
p.close()
adm.close()
print("OK", flush=True)
