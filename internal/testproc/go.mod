module github.com/PicoMQ/picomq/internal/testproc

go 1.26.0
