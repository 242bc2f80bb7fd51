module github.com/PicoMQ/picomq/bench/traces

go 1.26.0

require golang.org/x/exp v0.0.0-20261014143641-f0251eb4aa3e
