module github.com/PicoMQ/picomq/sdk

go 1.26.0
