package main

// The node's own cost during a picomq bench run, from its Prometheus
// process metrics: CPU-seconds (process_cpu_seconds_total) before and
// after, per million records appended, and resident memory
// (process_resident_memory_bytes) at the end.

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// serverMetrics reads a node's /metrics.
type serverMetrics struct {
	url, token string
}

// metricsURL is where --metrics points: "off" is none, "" is the HTTP
// server's /metrics (none over Kafka, whose --server is not a URL).
func metricsURL(flag string, cf clientFlags) string {
	switch {
	case flag == "off":
		return ""
	case flag != "":
		return flag
	case cf.protocol == "kafka":
		return ""
	}
	return strings.TrimSuffix(cf.server, "/") + "/metrics"
}

// read returns process_cpu_seconds_total and process_resident_memory_bytes.
func (m serverMetrics) read(ctx context.Context) (cpu, rss float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.url, nil)
	if err != nil {
		return 0, 0, err
	}
	if m.token != "" {
		req.Header.Set("Authorization", "Bearer "+m.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("GET %s: %s", m.url, resp.Status)
	}
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		var dst *float64
		switch {
		case !ok:
			continue
		case name == "process_cpu_seconds_total":
			dst = &cpu
		case name == "process_resident_memory_bytes":
			dst = &rss
		default:
			continue
		}
		if *dst, err = strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
			return 0, 0, fmt.Errorf("%s: %s: %w", m.url, name, err)
		}
		found++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("%s: no process_cpu_seconds_total and process_resident_memory_bytes", m.url)
	}
	return cpu, rss, nil
}
