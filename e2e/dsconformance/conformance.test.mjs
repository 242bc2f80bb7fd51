// Black-box Durable Streams server conformance suite, driven by e2e/ds_conformance_test.go.
// The published CLI (server-conformance-tests --run URL) cannot find its own
// test file from an npm install (vitest's default include/exclude skip
// node_modules/.../dist/test-runner.js), so we import the suite ourselves.
import { runConformanceTests } from "@durable-streams/server-conformance-tests"

const baseUrl = process.env.DS_CONFORMANCE_URL
if (!baseUrl) {
  throw new Error("DS_CONFORMANCE_URL is required (set by e2e/ds_conformance_test.go)")
}

const options = { baseUrl: baseUrl.replace(/\/+$/, "") }
// Per-test timeout for long-poll tests is longPollTimeoutMs + 1000 (default 20000).
if (process.env.DS_LONG_POLL_TIMEOUT_MS) {
  options.longPollTimeoutMs = Number(process.env.DS_LONG_POLL_TIMEOUT_MS)
}
// Optional, off by default (as in the upstream CLI): reserved __ds/subscriptions APIs.
if (process.env.DS_SUBSCRIPTIONS === "1") options.subscriptions = true

runConformanceTests(options)
