// Package benchreport turns the measurements of one `make bench` run into
// the published table (Markdown) and charts (SVG). The matrix runner
// (e2e/benchmatrix) writes results.json; `picomq bench --report DIR`
// rebuilds the report from it. Every PicoMQ figure is shown next to the
// baseline or peer measured in the same run, with the spread (min–max)
// over the repeated runs and the ratio computed per run.
package benchreport

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ResultsFile is the name of the measurements file in a report directory.
const ResultsFile = "results.json"

// Row is one line of the table: a PicoMQ figure and what it is compared with.
type Row struct {
	ID   string `json:"id"`
	What string `json:"what"`
	Unit string `json:"unit"`
	// Peer names the baseline or peer ("" when there is none).
	Peer string `json:"peer,omitempty"`
	// Pico names the PicoMQ side in charts when "PicoMQ" alone would not
	// say which of its protocols it is (say "PicoMQ Kafka produce").
	Pico string `json:"pico,omitempty"`
	// LowerBetter is true for costs and latencies.
	LowerBetter bool   `json:"lowerBetter,omitempty"`
	Note        string `json:"note,omitempty"`
	// Group and X place the row on a throughput-by-concurrency chart:
	// rows of one group are its points, X their concurrency.
	Group string `json:"group,omitempty"`
	X     int    `json:"x,omitempty"`
}

// Latency holds percentiles in milliseconds (the shape of picomq bench --json).
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Sample is one measured value of one side of a row in one run.
type Sample struct {
	Row   string   `json:"row"`
	Run   int      `json:"run"`
	Side  string   `json:"side"` // SidePico or SidePeer
	Value float64  `json:"value"`
	Lat   *Latency `json:"latencyMs,omitempty"`
}

const (
	SidePico = "pico"
	SidePeer = "peer"
)

// Results is everything one matrix run measured.
type Results struct {
	Machine string  `json:"machine"`
	Started string  `json:"started"`
	Runs    int     `json:"runs"`
	Seconds float64 `json:"secondsPerPoint"`
	// LoadAverages are the machine's 1-minute load average sampled during
	// the run: how much else competed for the cores.
	LoadAverages []float64 `json:"loadAverages,omitempty"`
	// MatrixSeconds is how long the whole matrix took.
	MatrixSeconds float64  `json:"matrixSeconds,omitempty"`
	Rows          []Row    `json:"rows"`
	Samples       []Sample `json:"samples"`
	Failures      []string `json:"failures,omitempty"`
}

// Add records a sample.
func (r *Results) Add(row string, run int, side string, v float64, lat *Latency) {
	r.Samples = append(r.Samples, Sample{Row: row, Run: run, Side: side, Value: v, Lat: lat})
}

// Load reads dir/results.json.
func Load(dir string) (*Results, error) {
	b, err := os.ReadFile(filepath.Join(dir, ResultsFile))
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", ResultsFile, err)
	}
	return &r, nil
}

// Save writes dir/results.json.
func (r *Results) Save(dir string) error {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ResultsFile), b, 0o644)
}

// values of one side of one row, in run order.
func (r *Results) values(row, side string) map[int]Sample {
	m := map[int]Sample{}
	for _, s := range r.Samples {
		if s.Row == row && s.Side == side {
			m[s.Run] = s
		}
	}
	return m
}

// span formats the min–max of vs ("—" when empty).
func span(vs []float64) string {
	if len(vs) == 0 {
		return "—"
	}
	lo, hi := slices.Min(vs), slices.Max(vs)
	if num(lo) == num(hi) {
		return num(lo)
	}
	return num(lo) + "–" + num(hi)
}

// num formats a figure with about three significant digits.
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 100000:
		return fmt.Sprintf("%.0fk", v/1000)
	case a >= 10000:
		return fmt.Sprintf("%.1fk", v/1000)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// Table writes the Markdown table: one line per row with PicoMQ's figure,
// the peer's, and the per-run ratio, each as min–max over the runs.
func (r *Results) Table(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| what | unit | PicoMQ | baseline / peer | peer | PicoMQ ÷ peer |\n")
	b.WriteString("|---|---|--:|---|--:|--:|\n")
	for _, row := range r.Rows {
		pico, peer := r.values(row.ID, SidePico), r.values(row.ID, SidePeer)
		var pv, qv, ratios []float64
		for run, s := range pico {
			pv = append(pv, s.Value)
			if q, ok := peer[run]; ok && q.Value != 0 {
				ratios = append(ratios, s.Value/q.Value)
			}
		}
		for _, s := range peer {
			qv = append(qv, s.Value)
		}
		ratio := "—"
		if len(ratios) > 0 {
			ratio = span(ratios) + "×"
			if row.LowerBetter {
				ratio += " (lower is better)"
			}
		}
		peerName := row.Peer
		if peerName == "" {
			peerName = "—"
		}
		what := row.What
		if row.Note != "" {
			what += " (" + row.Note + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", what, row.Unit, span(pv), peerName, span(qv), ratio)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Write writes the report into dir: table.md (the table, the run's
// description and its failures) and the SVG charts.
func (r *Results) Write(dir string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Run %s on %s; %d runs, %.0f s per point; ranges are min–max over the runs, ratios are taken per run.",
		r.Started, r.Machine, r.Runs, r.Seconds)
	if len(r.LoadAverages) > 0 {
		fmt.Fprintf(&b, " Load average during the run (1-minute, %d samples): %s.", len(r.LoadAverages), span(r.LoadAverages))
	}
	if r.MatrixSeconds > 0 {
		fmt.Fprintf(&b, " The matrix took %.0f s.", r.MatrixSeconds)
	}
	b.WriteString("\n\n")
	if err := r.Table(&b); err != nil {
		return err
	}
	for _, f := range r.Failures {
		fmt.Fprintf(&b, "\n- not measured: %s", f)
	}
	charts, err := r.Charts(dir)
	if err != nil {
		return err
	}
	for _, c := range charts {
		fmt.Fprintf(&b, "\n\n![%s](%s)", c.Title, c.File)
	}
	b.WriteString("\n")
	return os.WriteFile(filepath.Join(dir, "table.md"), []byte(b.String()), 0o644)
}
