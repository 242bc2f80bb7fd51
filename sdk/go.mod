module github.com/PicoMQ/picomq/sdk

go 1.26.0

require github.com/cenkalti/backoff/v5 v5.0.3
