// Run by e2e TestKafkajsGroup: kafkajs (unmodified, pinned in
// package-lock.json) creates a 3-partition topic, produces with an
// idempotent producer, consumes in a consumer group with kafkajs's own
// offset commits, and a second consumer of the same group resumes after
// the committed offsets. Prints one JSON line with what it saw; the Go
// test checks it. Exits non-zero on any error.
'use strict'
const { Kafka, logLevel } = require('kafkajs')

const broker = process.env.KAFKA_BROKER
const topic = 'kjs-orders'
const groupId = 'kjs-billing'
const kafka = new Kafka({ clientId: 'picomq-e2e', brokers: [broker], logLevel: logLevel.WARN, retry: { retries: 10 } })

async function produce (prefix, n) {
  const p = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await p.connect()
  const messages = []
  for (let i = 0; i < n; i++) messages.push({ key: 'k' + i, value: prefix + i })
  await p.send({ topic, messages })
  await p.disconnect()
}

// consume runs a group consumer until n messages arrived, committing each
// message's offset (OffsetCommit through kafkajs) before counting it, and
// leaves the group.
async function consume (n) {
  const c = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000 })
  await c.connect()
  await c.subscribe({ topic, fromBeginning: true })
  const seen = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timeout: got ' + seen.length + ' of ' + n)), 90000)
    c.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        await c.commitOffsets([{ topic, partition, offset: (BigInt(message.offset) + 1n).toString() }])
        seen.push(message.value.toString())
        if (seen.length >= n) { clearTimeout(timer); resolve() }
      }
    }).catch(reject)
  })
  await c.disconnect() // LeaveGroup
  return seen
}

async function main () {
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true })
  await produce('a', 30)
  const first = await consume(30)
  await produce('b', 12)
  const second = await consume(12)
  const offsets = await admin.fetchOffsets({ groupId, topics: [topic] })
  const groups = await admin.listGroups()
  await admin.disconnect()
  console.log(JSON.stringify({ first, second, offsets, groups: groups.groups }))
}

main().catch(err => { console.error(err); process.exit(1) })
