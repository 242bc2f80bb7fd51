module github.com/PicoMQ/picomq/e2e/console

go 1.26.0

require (
	github.com/PicoMQ/picomq/internal/testproc v0.0.0
	github.com/chromedp/chromedp v0.24.0
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kmsg v1.15.1
)

require (
	github.com/chromedp/cdproto v0.160.1 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
)

replace github.com/PicoMQ/picomq/internal/testproc => ../../internal/testproc
