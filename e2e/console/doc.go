// Package console holds the browser tests of the node's web console
// (/_console/): Debian's chromium, headless, driven over the DevTools
// protocol with chromedp. It is a Go module of its own so that chromedp
// never enters the server module's dependency graph.
package console
