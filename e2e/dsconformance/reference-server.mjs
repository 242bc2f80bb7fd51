// Starts the Node reference Durable Streams server (@durable-streams/server)
// on loopback, for comparing behaviour with PicoMQ (make bench-ds runs it next to PicoMQ).
//
// Usage: node reference-server.mjs [port] [--long-poll-ms N] [--data-dir DIR] [--webhooks]
//   port            default 4437 (0 = pick a free port; the chosen URL is printed)
//   --long-poll-ms  server long-poll timeout, default 500 (the upstream repo's
//                   own conformance run uses 500; several suite tests wait for a
//                   long-poll 204 inside vitest's default 5 s test timeout, so a
//                   server under test must time out long-polls well below 5 s)
//   --data-dir      use the file-backed (LMDB + log files) store instead of memory
//   --webhooks      enable type=webhook subscriptions (needed by DS_SUBSCRIPTIONS=1 runs)
// Prints "listening <url>" on stdout once ready; stops on SIGINT/SIGTERM.
import { DurableStreamTestServer } from "@durable-streams/server"

const args = process.argv.slice(2)
let port = 4437
let longPollTimeout = 500
let dataDir
let webhooks = false
for (let i = 0; i < args.length; i++) {
  const a = args[i]
  if (a === "--long-poll-ms") longPollTimeout = Number(args[++i])
  else if (a === "--data-dir") dataDir = args[++i]
  else if (a === "--webhooks") webhooks = true
  else if (/^\d+$/.test(a)) port = Number(a)
  else {
    console.error(`unknown argument: ${a}`)
    process.exit(2)
  }
}

const server = new DurableStreamTestServer({
  host: "127.0.0.1",
  port,
  longPollTimeout,
  webhooks,
  ...(dataDir ? { dataDir } : {}),
})
await server.start()
console.log(`listening ${server.url}`)

let stopping = false
async function stop() {
  if (stopping) return
  stopping = true
  await server.stop()
  process.exit(0)
}
process.on("SIGINT", stop)
process.on("SIGTERM", stop)
