package benchreport

import (
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Chart is one SVG file written next to the table.
type Chart struct {
	Title string
	File  string
}

// series is one line of a chart.
type series struct {
	name  string
	color string
	pts   [][2]float64 // x index or value, y
}

const (
	picoColor = "#1f6feb"
	peerColor = "#d1242f"
)

// Charts writes the SVG charts into dir: for every row with latency
// samples, its percentile curve per system and run; for every group of
// rows, throughput by concurrency per system and run.
func (r *Results) Charts(dir string) ([]Chart, error) {
	var out []Chart
	labels := []string{"p50", "p90", "p99", "p99.9", "max"}
	for _, row := range r.Rows {
		var ss []series
		for _, side := range []string{SidePico, SidePeer} {
			vals := r.values(row.ID, side)
			for _, run := range sortedRuns(vals) {
				l := vals[run].Lat
				if l == nil {
					continue
				}
				ss = append(ss, series{name: fmt.Sprintf("%s, run %d", sideName(row, side), run), color: sideColor(side),
					pts: [][2]float64{{0, l.P50}, {1, l.P90}, {2, l.P99}, {3, l.P999}, {4, l.Max}}})
			}
		}
		if len(ss) == 0 {
			continue
		}
		c := Chart{Title: "latency percentiles: " + row.What, File: "latency-" + row.ID + ".svg"}
		if err := writeSVG(filepath.Join(dir, c.File), c.Title, "ms (log scale)", labels, ss, true); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	var groups []string
	for _, row := range r.Rows {
		if row.Group != "" && !slices.Contains(groups, row.Group) {
			groups = append(groups, row.Group)
		}
	}
	for _, g := range groups {
		var rows []Row
		for _, row := range r.Rows {
			if row.Group == g {
				rows = append(rows, row)
			}
		}
		slices.SortFunc(rows, func(a, b Row) int { return a.X - b.X })
		var ticks []string
		for _, row := range rows {
			ticks = append(ticks, fmt.Sprint(row.X))
		}
		var ss []series
		for _, side := range []string{SidePico, SidePeer} {
			byRun := map[int]*series{}
			for i, row := range rows {
				for run, s := range r.values(row.ID, side) {
					if byRun[run] == nil {
						byRun[run] = &series{name: fmt.Sprintf("%s, run %d", sideName(row, side), run), color: sideColor(side)}
					}
					byRun[run].pts = append(byRun[run].pts, [2]float64{float64(i), s.Value})
				}
			}
			for _, run := range sortedRuns(byRun) {
				ss = append(ss, *byRun[run])
			}
		}
		if len(ss) == 0 {
			continue
		}
		c := Chart{Title: "throughput by concurrency: " + g, File: "throughput-" + slug(g) + ".svg"}
		if err := writeSVG(filepath.Join(dir, c.File), c.Title, rows[0].Unit, ticks, ss, false); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func sortedRuns[V any](m map[int]V) []int {
	var runs []int
	for k := range m {
		runs = append(runs, k)
	}
	slices.Sort(runs)
	return runs
}

func sideName(row Row, side string) string {
	if side == SidePico {
		if row.Pico != "" {
			return row.Pico
		}
		return "PicoMQ"
	}
	return row.Peer
}

func sideColor(side string) string {
	if side == SidePico {
		return picoColor
	}
	return peerColor
}

func slug(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '-'
	}, s)
}

// writeSVG draws a line chart with categorical x positions (ticks, one per
// index) and a linear or log y axis from 0 (linear) or the data's decade
// (log). Each series is a polyline with dots and a legend entry; later
// runs of a side are dashed so the runs stay apart.
func writeSVG(path, title, yUnit string, ticks []string, ss []series, logY bool) error {
	const W, H, left, right, top, bottom = 880, 400, 70, 390, 40, 50
	pw, ph := float64(W-left-right), float64(H-top-bottom)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, p := range s.pts {
			if logY && p[1] <= 0 {
				continue
			}
			lo, hi = math.Min(lo, p[1]), math.Max(hi, p[1])
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 0, 1
	}
	var ymap func(float64) float64
	var yticks []float64
	if logY {
		lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
		if lo == hi {
			hi = lo * 10
		}
		ymap = func(v float64) float64 {
			v = math.Max(v, lo)
			return top + ph - ph*(math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))
		}
		for t := lo; t <= hi*1.001; t *= 10 {
			yticks = append(yticks, t)
		}
	} else {
		lo = 0
		hi = niceCeil(hi)
		ymap = func(v float64) float64 { return top + ph - ph*v/hi }
		for i := 0; i <= 4; i++ {
			yticks = append(yticks, hi*float64(i)/4)
		}
	}
	n := max(len(ticks), 2)
	xmap := func(i float64) float64 { return left + pw*i/float64(n-1) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	for _, t := range yticks {
		y := ymap(t)
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, left+pw, y, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, num(t))
	}
	for i, t := range ticks {
		x := xmap(float64(i))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, top+ph+18, html.EscapeString(t))
	}
	fmt.Fprintf(&b, `<text x="14" y="%.1f" transform="rotate(-90 14 %.1f)" text-anchor="middle">%s</text>`+"\n", top+ph/2, top+ph/2, html.EscapeString(yUnit))
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#888"/>`+"\n", left, top, pw, ph)
	seen := map[string]int{}
	for k, s := range ss {
		dash := ""
		if seen[s.color] > 0 {
			dash = ` stroke-dasharray="6 4"`
		}
		seen[s.color]++
		var pts []string
		for _, p := range s.pts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xmap(p[0]), ymap(p[1])))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", s.color, dash, strings.Join(pts, " "))
		for _, p := range s.pts {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", xmap(p[0]), ymap(p[1]), s.color)
		}
		ly := float64(top + 10 + 18*k)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", W-right+15, W-right+40, ly, ly, s.color, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f">%s</text>`+"\n", W-right+46, ly+4, html.EscapeString(s.name))
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
