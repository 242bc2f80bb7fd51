package httpx

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// reportingRecorder is a writer that knows its status, as the HTTP/1.1
// fast path's does: Instrument uses it without a wrapper.
type reportingRecorder struct {
	*httptest.ResponseRecorder
	status int
}

func (w *reportingRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseRecorder.WriteHeader(code)
}

func (w *reportingRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseRecorder.Write(b)
}

func (w *reportingRecorder) WrittenStatus() int { return w.status }

// TestInstrumentCountsStatus: the status a handler sent (none: 200; a
// panic before any: 500 answered by Instrument) is counted the same with
// a plain writer, which Instrument wraps, and with one that reports its
// status.
func TestInstrumentCountsStatus(t *testing.T) {
	for _, reporting := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		m := NewMetrics(reg)
		h := Instrument(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/missing":
				w.WriteHeader(http.StatusNotFound)
			case "/body":
				_, _ = io.WriteString(w, "x")
			case "/panic":
				panic("bug")
			}
		}), func(*http.Request) string { return "stream" }, m, slog.New(slog.DiscardHandler))
		for _, path := range []string{"/missing", "/body", "/nothing", "/panic"} {
			rec := httptest.NewRecorder()
			var w http.ResponseWriter = rec
			if reporting {
				w = &reportingRecorder{ResponseRecorder: rec}
			}
			h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, nil))
			if path == "/panic" && rec.Code != http.StatusInternalServerError {
				t.Fatalf("reporting=%v: panic answered %d", reporting, rec.Code)
			}
		}
		got := map[string]float64{}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "picomq_http_requests_total" {
				continue
			}
			for _, s := range mf.GetMetric() {
				for _, l := range s.GetLabel() {
					if l.GetName() == "code" {
						got[l.GetValue()] += s.GetCounter().GetValue()
					}
				}
			}
		}
		want := map[string]float64{"404": 1, "200": 2, "500": 1}
		if len(got) != len(want) || got["404"] != 1 || got["200"] != 2 || got["500"] != 1 {
			t.Errorf("reporting=%v: requests by code %v, want %v", reporting, got, want)
		}
	}
}
