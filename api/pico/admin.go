package pico

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// List page sizes of GET /_streams.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
	// maxPatchBytes bounds a PATCH body; it holds four small fields.
	maxPatchBytes = 16 << 10
)

// listJSON is the body of GET /_streams.
type listJSON struct {
	Streams []streamJSON `json:"streams"`
	// NextCursor is set when more streams match: pass it as cursor.
	NextCursor string `json:"nextCursor,omitempty"`
}

// serveList serves GET /_streams?prefix=&limit=&cursor=. Streams come in
// byte-wise name order; the cursor is opaque to clients (it encodes the last
// name of the page) and stays valid across creates and deletes, which is
// what S3-style listings promise too.
func (h *Handler) serveList(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		httpx.WriteError(w, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, r.Method+" is not supported on "+wire.PathStreams)
		return
	}
	q := r.URL.Query()
	if err := knownParams(q, []string{wire.QueryPrefix, wire.QueryLimit, wire.QueryListCursor}); err != nil {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
		return
	}
	prefix := q.Get(wire.QueryPrefix)
	if prefix != "" && prefix[0] != '/' {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, fmt.Sprintf("prefix=%q: stream names start with '/'", prefix))
		return
	}
	limit := int64(DefaultListLimit)
	if n, ok, err := queryNonNegative(q, wire.QueryLimit); err != nil || (ok && n == 0) {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, fmt.Sprintf("limit=%q: want 1 to %d", q.Get(wire.QueryLimit), MaxListLimit))
		return
	} else if ok {
		limit = min(n, MaxListLimit)
	}
	after := ""
	if c := q.Get(wire.QueryListCursor); c != "" {
		b, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil || len(b) == 0 || b[0] != '/' {
			httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, fmt.Sprintf("cursor=%q is not a cursor this server returned", c))
			return
		}
		after = string(b)
	}
	infos, more, err := h.svc.List(r.Context(), prefix, after, int(limit))
	if err != nil {
		h.writeServiceError(w, r, err)
		return
	}
	out := listJSON{Streams: make([]streamJSON, 0, len(infos))}
	for _, info := range infos {
		out.Streams = append(out.Streams, describe(info))
	}
	if more && len(infos) > 0 {
		out.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(infos[len(infos)-1].Name))
	}
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusOK, out)
}

// serveAdmin serves GET and PATCH /_streams/{name}: the stream's name is the
// rest of the path, so /_streams/orders/1042 is the stream /orders/1042.
func (h *Handler) serveAdmin(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, wire.PathStreams)
	switch r.Method {
	case http.MethodGet:
		// Any node answers, so an operator never needs to find the owner
		// first; only the owner knows the next offset (-1 elsewhere).
		info, err := h.svc.Head(r.Context(), name)
		if errors.Is(err, stream.ErrRedirect) {
			if info, err = h.svc.Describe(r.Context(), name); err == nil {
				info.NextOffset = -1
			}
		}
		if err != nil {
			h.writeServiceError(w, r, err)
			return
		}
		writeInfo(w, info)
	case http.MethodPatch:
		h.patch(w, r, name)
	default:
		w.Header().Set("Allow", "GET, PATCH")
		httpx.WriteError(w, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, r.Method+" is not supported on "+r.URL.Path)
	}
}

// patch applies a JSON merge patch (RFC 7396) of a stream's configuration:
//
//	{"kafkaTopic": "orders" | null, "retentionMs": 3600000 | null,
//	 "retentionBytes": 1073741824 | null, "trimBefore": 1200}
//
// Absent fields are left alone; null (or "" / 0) removes an alias or a
// retention limit. trimBefore moves the start offset forward (never back).
func (h *Handler) patch(w http.ResponseWriter, r *http.Request, name string) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt := baseType(ct); mt != wire.MediaJSON && mt != wire.MediaMergePatch {
			httpx.WriteError(w, http.StatusUnsupportedMediaType, wire.CodeUnsupportedMedia,
				fmt.Sprintf("Content-Type %q: send %s or %s", ct, wire.MediaMergePatch, wire.MediaJSON))
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPatchBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			httpx.WriteError(w, http.StatusRequestEntityTooLarge, wire.CodeTooLarge, fmt.Sprintf("a PATCH body is at most %d bytes", maxPatchBytes))
			return
		}
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, "reading body: "+err.Error())
		return
	}
	ch, err := parsePatch(body)
	if err != nil {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
		return
	}
	info, err := h.svc.Configure(r.Context(), name, ch)
	if err != nil {
		h.writeServiceError(w, r, err)
		return
	}
	writeInfo(w, info)
}

// writeInfo answers a describe or a reconfigure: the stream's headers and
// its JSON description, never cached.
func writeInfo(w http.ResponseWriter, info stream.Info) {
	setInfoHeaders(w.Header(), info)
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusOK, describe(info))
}

// parsePatch decodes a PATCH body into a stream.ConfigChange.
func parsePatch(body []byte) (stream.ConfigChange, error) {
	var ch stream.ConfigChange
	var fields map[string]json.RawMessage
	if !wire.IsJSONText(body) {
		return ch, errors.New("PATCH body: want a JSON object (a JSON text, UTF-8 included)")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&fields); err != nil {
		return ch, fmt.Errorf("PATCH body: want a JSON object: %v", err)
	}
	if fields == nil {
		return ch, errors.New("PATCH body: want a JSON object, got null")
	}
	if _, err := dec.Token(); err != io.EOF {
		return ch, errors.New("PATCH body: data after the object")
	}
	for k, raw := range fields {
		null := string(raw) == "null"
		switch k {
		case "kafkaTopic":
			var t string
			if !null {
				if err := json.Unmarshal(raw, &t); err != nil {
					return ch, fmt.Errorf("kafkaTopic: want a string or null")
				}
			}
			ch.KafkaTopic = &t
		case "retentionMs", "retentionBytes", "trimBefore":
			var n int64
			if null {
				if k == "trimBefore" {
					return ch, errors.New("trimBefore: want an offset, not null")
				}
			} else if err := json.Unmarshal(raw, &n); err != nil || n < 0 {
				return ch, fmt.Errorf("%s: want a non-negative integer", k)
			}
			switch k {
			case "retentionMs":
				ch.RetentionMs = &n
			case "retentionBytes":
				ch.RetentionBytes = &n
			default:
				ch.TrimBefore = &n
			}
		case "compaction":
			c, err := parsePatchCompaction(raw)
			if err != nil {
				return ch, err
			}
			ch.Compaction = c
		default:
			return ch, fmt.Errorf("unknown field %q (kafkaTopic, retentionMs, retentionBytes, trimBefore, compaction)", k)
		}
	}
	return ch, nil
}

// parsePatchCompaction reads PATCH's "compaction": null turns compaction
// off; an object of Kafka topic configs (string or number values) is
// applied to the stream's current setting.
func parsePatchCompaction(raw json.RawMessage) (*stream.CompactionChange, error) {
	if string(raw) == "null" {
		return &stream.CompactionChange{Configs: map[string]string{stream.ConfigCleanupPolicy: stream.PolicyDelete}}, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, errors.New("compaction: want an object of Kafka topic configs or null")
	}
	configs := make(map[string]string, len(fields))
	for name, v := range fields {
		if !stream.IsCompactionConfig(name) {
			return nil, fmt.Errorf("compaction: %q is not a compaction config", name)
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			var n json.Number
			d := json.NewDecoder(bytes.NewReader(v))
			d.UseNumber()
			if err := d.Decode(&n); err != nil {
				return nil, fmt.Errorf("compaction: %s: want a string or a number", name)
			}
			s = n.String()
		}
		configs[name] = s
	}
	return &stream.CompactionChange{Configs: configs}, nil
}
