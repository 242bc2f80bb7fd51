package ds

import (
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/PicoMQ/picomq/sdk/wire"
)

// Stream-Cursor: live responses carry the number of the current 20-second
// interval since the protocol's cursor epoch, so a CDN can collapse the
// long-polls of many clients into one request per interval. A client echoes
// the last cursor back; when its cursor is not older than the current
// interval the server must answer with a strictly greater one, jittered by
// 1 to 3600 seconds, so a cached response can never send clients round in a
// loop.
var cursorEpoch = time.Date(2024, 10, 9, 0, 0, 0, 0, time.UTC)

const (
	cursorInterval  = 20 * time.Second
	cursorMaxJitter = 3600 // seconds
)

func responseCursor(now time.Time, client string) string {
	cur := int64(now.Sub(cursorEpoch) / cursorInterval)
	c, err := strconv.ParseInt(client, 10, 64)
	if client == "" || err != nil || c < cur {
		return strconv.FormatInt(cur, 10)
	}
	jitter := 1 + rand.Int64N(cursorMaxJitter)
	steps := max(1, (jitter+int64(cursorInterval/time.Second)-1)/int64(cursorInterval/time.Second))
	if c > 1<<62 {
		return strconv.FormatInt(c, 10) // a forged huge cursor: never overflow
	}
	return strconv.FormatInt(c+steps, 10)
}

// appendSSEData appends one "data" event carrying payload. Every line of the
// payload gets its own "data:" field, splitting on CRLF, CR and LF alike (all
// three end a line in SSE), so data can never end the event early or inject
// an event of its own. Clients drop one space after "data:", so a line that
// starts with a space gets one extra to keep it intact.
func appendSSEData(dst, payload []byte) []byte {
	dst = append(dst, "event: data\n"...)
	line := func(l []byte) {
		dst = append(dst, "data:"...)
		if len(l) > 0 && l[0] == ' ' {
			dst = append(dst, ' ')
		}
		dst = append(dst, l...)
		dst = append(dst, '\n')
	}
	start := 0
	for i := 0; i < len(payload); i++ {
		c := payload[i]
		if c != '\n' && c != '\r' {
			continue
		}
		line(payload[start:i])
		if c == '\r' && i+1 < len(payload) && payload[i+1] == '\n' {
			i++
		}
		start = i + 1
	}
	line(payload[start:])
	return append(dst, '\n')
}

// appendSSEBase64 appends one "data" event with payload base64-encoded
// (standard alphabet, padded), for streams that are not text.
func appendSSEBase64(dst, payload []byte) []byte {
	dst = append(dst, "event: data\ndata:"...)
	dst = base64.StdEncoding.AppendEncode(dst, payload)
	return append(dst, "\n\n"...)
}

func appendSSEControl(dst []byte, c wire.DSControlEvent) []byte {
	b, _ := json.Marshal(c)
	dst = append(dst, "event: control\ndata:"...)
	dst = append(dst, b...)
	return append(dst, "\n\n"...)
}
