package main

// The client subcommands: create, append, read, tail, ls, rm, describe. They
// are built on the Go SDK (client/go) and speak either protocol. docs/cli.md is
// the reference, exit codes included.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	picomq "github.com/PicoMQ/picomq/client/go"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// Exit codes of the client subcommands (docs/cli.md).
const (
	exitOK          = 0
	exitError       = 1 // any other failure
	exitUsage       = 2 // bad flags or arguments
	exitNotFound    = 3 // the stream does not exist
	exitConflict    = 4 // exists with another configuration, closed, fenced, …
	exitUnavailable = 5 // server unreachable, overloaded or unavailable
	exitUnsupported = 6 // the protocol has no such operation
	exitInterrupted = 130
)

const clientUsage = `Client commands (all take --server, --token, --protocol):
  picomq create NAME [--content-type T] [--retention D] [--kafka-topic T] [--ttl D]
  picomq append NAME [--format lines|whole|binary] [--key K] [--keep-empty] < input
  picomq encode [--key K] [--whole] < input > batch.bin   (a Pico binary batch)
  picomq read NAME [--from POSITION] [--limit N] [--json]
  picomq tail NAME [-n N] [-f] [--json]
  picomq ls [--prefix P] [--json]
  picomq rm NAME... [--force]
  picomq describe NAME [--json]

Global flags (env twins PICOMQ_SERVER, PICOMQ_TOKEN, PICOMQ_PROTOCOL):
  --server URL        node URL (default http://127.0.0.1:4437)
  --token TOKEN       bearer token sent on every request and redirect hop
  --protocol P        pico (default) or durable-streams

Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 conflict, 5 unavailable,
6 unsupported by the protocol, 130 interrupted.
`

// usageError is a mistake in the command line (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// env is what a client command runs with.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// stderrTTY reports whether stderr is a terminal (progress output).
	stderrTTY bool
}

// clientFlags are the flags every client command takes.
type clientFlags struct {
	server, token, protocol string
}

func (f *clientFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	def := func(name, fallback string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return fallback
	}
	fs.StringVar(&f.server, "server", def("PICOMQ_SERVER", "http://127.0.0.1:4437"), "node URL")
	fs.StringVar(&f.token, "token", def("PICOMQ_TOKEN", ""), "bearer token")
	fs.StringVar(&f.protocol, "protocol", def("PICOMQ_PROTOCOL", "pico"), "pico or durable-streams")
}

func (f *clientFlags) client() (picomq.Client, error) {
	p, err := picomq.ParseProtocol(f.protocol)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	var opts []picomq.Option
	if f.token != "" {
		opts = append(opts, picomq.WithToken(f.token))
	}
	c, err := picomq.New(p, f.server, opts...)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	return c, nil
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments ("picomq read /s --json" and "picomq read --json
// /s" alike). Everything after "--" is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	if i := indexOf(args, "--"); i >= 0 {
		args, rest = args[:i], args[i+1:]
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	return append(pos, rest...), nil
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// clientCommands are the client commands by name: each registers its
// flags on fs and returns what runs it.
var clientCommands = map[string]func(fs *flag.FlagSet, e env) func(ctx context.Context, c picomq.Client, args []string) error{
	"create":   createCmd,
	"append":   appendCmd,
	"read":     readCmd,
	"tail":     tailCmd,
	"ls":       lsCmd,
	"rm":       rmCmd,
	"describe": describeCmd,
}

// runClient runs one client command and returns its exit code.
func runClient(cmd string, args []string, e env) int {
	fs := flag.NewFlagSet("picomq "+cmd, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var cf clientFlags
	cf.register(fs, e.getenv)
	newCmd, ok := clientCommands[cmd]
	if !ok {
		fmt.Fprintf(e.stderr, "picomq: unknown command %q\n", cmd)
		return exitUsage
	}
	run := newCmd(fs, e)
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage // the flag package printed the reason
	}
	c, err := cf.client()
	if err == nil {
		defer c.Close()
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		err = run(ctx, c, pos)
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return exitInterrupted
		}
	}
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(e.stderr, "picomq %s: %v\n", cmd, err)
	return exitCode(err)
}

// exitCode maps an error to the documented exit codes.
func exitCode(err error) int {
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	switch picomq.ErrorKind(err) {
	case picomq.KindNotFound:
		return exitNotFound
	case picomq.KindConflict, picomq.KindClosed, picomq.KindFenced, picomq.KindSequenceGap:
		return exitConflict
	case picomq.KindUnavailable:
		return exitUnavailable
	case picomq.KindUnsupported:
		return exitUnsupported
	}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ne) {
		return exitUnavailable
	}
	return exitError
}

// oneName takes exactly one stream name from the positional arguments.
func oneName(args []string) (string, error) {
	if len(args) != 1 {
		return "", usagef("want exactly one stream name, got %d arguments", len(args))
	}
	if !strings.HasPrefix(args[0], "/") {
		return "", usagef("stream name %q: names are paths such as /orders/1042", args[0])
	}
	return args[0], nil
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// infoJSON is the --json shape of a stream description.
type infoJSON struct {
	Name           string `json:"name"`
	ContentType    string `json:"contentType"`
	Start          string `json:"start,omitempty"`
	Next           string `json:"next"`
	Closed         bool   `json:"closed"`
	ID             uint64 `json:"id,omitempty"`
	CreatedAt      string `json:"createdAt,omitempty"`
	KafkaTopic     string `json:"kafkaTopic,omitempty"`
	RetentionMs    int64  `json:"retentionMs,omitempty"`
	RetentionBytes int64  `json:"retentionBytes,omitempty"`
	Owner          string `json:"owner,omitempty"`
	TTLSeconds     int64  `json:"ttlSeconds,omitempty"`
	ExpiresAt      string `json:"expiresAt,omitempty"`
}

func toInfoJSON(i picomq.StreamInfo) infoJSON {
	j := infoJSON{Name: i.Name, ContentType: i.ContentType, Start: i.Start, Next: i.Next, Closed: i.Closed,
		ID: i.ID, KafkaTopic: i.KafkaTopic, RetentionMs: i.Retention.Milliseconds(), RetentionBytes: i.RetentionBytes,
		Owner: i.Owner, TTLSeconds: int64(i.TTL / time.Second)}
	if !i.CreatedAt.IsZero() {
		j.CreatedAt = i.CreatedAt.UTC().Format(time.RFC3339Nano)
	}
	if !i.ExpiresAt.IsZero() {
		j.ExpiresAt = i.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	return j
}

func createCmd(fs *flag.FlagSet, e env) func(context.Context, picomq.Client, []string) error {
	contentType := fs.String("content-type", "application/octet-stream", "the stream's content type")
	retention := fs.Duration("retention", 0, "delete records older than this (Pico)")
	retentionBytes := fs.Int64("retention-bytes", 0, "keep at most this many bytes (Pico)")
	topic := fs.String("kafka-topic", "", "Kafka topic alias (Pico; default: derived from the name)")
	noTopic := fs.Bool("no-kafka-topic", false, "create the stream without a Kafka topic alias (Pico)")
	ttl := fs.Duration("ttl", 0, "expire the stream after this long without reads or writes (Durable Streams)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	return func(ctx context.Context, c picomq.Client, args []string) error {
		name, err := oneName(args)
		if err != nil {
			return err
		}
		var opts []picomq.CreateOption
		if *topic != "" && *noTopic {
			return usagef("--kafka-topic and --no-kafka-topic exclude each other")
		}
		if *topic != "" {
			opts = append(opts, picomq.WithKafkaTopic(*topic))
		}
		if *noTopic {
			opts = append(opts, picomq.WithKafkaTopic(""))
		}
		if *retentionBytes > 0 {
			opts = append(opts, picomq.WithRetentionBytes(*retentionBytes))
		}
		if *ttl > 0 {
			opts = append(opts, picomq.WithTTL(*ttl))
		}
		res, err := c.Stream(name).Create(ctx, *contentType, *retention, opts...)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(e.stdout, struct {
				Created bool `json:"created"`
				infoJSON
			}{res.Created, toInfoJSON(res.Info)})
		}
		verb := "created"
		if !res.Created {
			verb = "exists (same configuration)"
		}
		_, err = fmt.Fprintf(e.stdout, "%s %s (%s)\n", verb, name, res.Info.ContentType)
		return err
	}
}

func appendCmd(fs *flag.FlagSet, e env) func(context.Context, picomq.Client, []string) error {
	whole := fs.Bool("whole", false, "append all of stdin as one record (default: one record per line)")
	key := fs.String("key", "", "record key of every record (Pico)")
	keepEmpty := fs.Bool("keep-empty", false, "append empty lines as empty records (default: skip them)")
	linger := fs.Duration("linger", 0, "wait this long to fill a batch")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	format := fs.String("format", "lines", "stdin is: lines (a record per line), whole (one record) or binary (a Pico binary batch, e.g. from picomq encode, appended as one append)")
	return func(ctx context.Context, c picomq.Client, args []string) error {
		name, err := oneName(args)
		if err != nil {
			return err
		}
		s := c.Stream(name)
		switch *format {
		case "lines":
		case "whole":
			*whole = true
		case "binary":
			if *key != "" || *whole || *keepEmpty {
				return usagef("--format binary takes keys and records from the batch; --key, --whole and --keep-empty do not apply")
			}
			recs, err := readBinaryBatch(e.stdin)
			if err != nil {
				return err
			}
			ack, err := s.Append(ctx, recs...)
			if err != nil {
				return err
			}
			return printAppended(e, name, *asJSON, ack.Count, ack.Start, ack.Next)
		default:
			return usagef("--format %q: want lines, whole or binary", *format)
		}
		var k []byte
		if *key != "" {
			k = []byte(*key)
		}
		// On a Durable Streams byte stream, lines keep their newline: the
		// stream is the bytes of the input.
		keepNewline := false
		if c.Protocol() == picomq.ProtocolDurableStreams && !*whole {
			info, err := s.Head(ctx)
			if err != nil {
				return err
			}
			keepNewline = !wire.IsDSJSONMode(info.ContentType)
		}
		p, err := s.NewProducer(picomq.ProducerOptions{Linger: *linger})
		if err != nil {
			return err
		}
		prog := newProgress(e.stderr, e.stderrTTY, name)
		var first *picomq.PendingAck
		var last *picomq.PendingAck
		count := 0
		send := func(body []byte) error {
			a, err := p.Send(ctx, picomq.AppendRecord{Key: k, Body: body})
			if err != nil {
				return err
			}
			if first == nil {
				first = a
			}
			last = a
			count++
			prog.add(len(body))
			return nil
		}
		var readErr error
		if *whole {
			body, err := io.ReadAll(e.stdin)
			if err != nil {
				readErr = err
			} else {
				readErr = send(body)
			}
		} else {
			readErr = forEachLine(e.stdin, keepNewline, func(line []byte) error {
				if len(bytes.TrimRight(line, "\r\n")) == 0 && !*keepEmpty {
					return nil
				}
				line = bytes.Clone(line)
				if keepNewline && !bytes.HasSuffix(line, []byte("\n")) {
					line = append(line, '\n') // a last line without one
				}
				return send(line)
			})
		}
		closeErr := p.Close(ctx)
		prog.done()
		if readErr != nil {
			return readErr
		}
		if closeErr != nil {
			return closeErr
		}
		var firstPos, next string
		if first != nil {
			a, _ := first.Result()
			firstPos = a.Start
			a, _ = last.Result()
			next = a.Next
		}
		return printAppended(e, name, *asJSON, count, firstPos, next)
	}
}

// printAppended prints append's result line (or JSON object).
func printAppended(e env, name string, asJSON bool, count int, firstPos, next string) error {
	if asJSON {
		return writeJSON(e.stdout, map[string]any{"stream": name, "records": count, "first": firstPos, "next": next})
	}
	if count == 0 {
		_, err := fmt.Fprintf(e.stdout, "appended nothing to %s (empty input)\n", name)
		return err
	}
	_, err := fmt.Fprintf(e.stdout, "appended %d records to %s (first position %s, next %s)\n", count, name, firstPos, next)
	return err
}

// maxLine bounds one input line (the server's default record limit is
// 1 MiB).
const maxLine = 1 << 20

// forEachLine calls f with every line of r, without its line terminator
// unless keep is set. A last line without a newline counts.
func forEachLine(r io.Reader, keep bool, f func([]byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte
	for lineNo := 1; ; lineNo++ {
		chunk, err := br.ReadSlice('\n')
		for err == bufio.ErrBufferFull {
			long = append(long, chunk...)
			if len(long) > maxLine {
				return fmt.Errorf("line %d is longer than %d bytes (use --whole for one large record)", lineNo, maxLine)
			}
			chunk, err = br.ReadSlice('\n')
		}
		line := chunk
		if long != nil {
			line = append(long, chunk...)
			long = nil
		}
		if len(bytes.TrimSuffix(line, []byte("\n"))) > maxLine {
			return fmt.Errorf("line %d is longer than %d bytes (use --whole for one large record)", lineNo, maxLine)
		}
		if len(line) > 0 {
			if !keep {
				line = bytes.TrimSuffix(line, []byte("\n"))
				line = bytes.TrimSuffix(line, []byte("\r"))
			}
			if err := f(line); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// progress reports an append's progress on stderr when it is a terminal
// and the input is large (it takes more than a second).
type progress struct {
	w        io.Writer
	enabled  bool
	name     string
	start    time.Time
	last     time.Time
	records  int
	bytes    int64
	shown    bool
	now      func() time.Time
	interval time.Duration
	after    time.Duration
}

func newProgress(w io.Writer, tty bool, name string) *progress {
	now := time.Now
	t := now()
	return &progress{w: w, enabled: tty, name: name, start: t, last: t, now: now,
		interval: 250 * time.Millisecond, after: time.Second}
}

func (p *progress) add(n int) {
	p.records++
	p.bytes += int64(n)
	if !p.enabled || p.records%256 != 0 {
		return
	}
	t := p.now()
	if t.Sub(p.start) < p.after || t.Sub(p.last) < p.interval {
		return
	}
	p.last = t
	p.show(t)
}

func (p *progress) show(t time.Time) {
	secs := max(t.Sub(p.start).Seconds(), 1e-3)
	fmt.Fprintf(p.w, "\r\033[Kappending to %s: %d records, %s, %.0f records/s", p.name, p.records, humanBytes(p.bytes), float64(p.records)/secs)
	p.shown = true
}

// done prints the final figures on the progress line, if one was shown.
func (p *progress) done() {
	if !p.shown {
		return
	}
	p.show(p.now())
	fmt.Fprintln(p.w)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// recordJSON is the --json shape of a record (one JSON object per line).
type recordJSON struct {
	Position      string          `json:"position"`
	Timestamp     string          `json:"timestamp,omitempty"`
	Key           *string         `json:"key,omitempty"`
	KeyEncoding   string          `json:"keyEncoding,omitempty"`
	Value         json.RawMessage `json:"value"`
	ValueEncoding string          `json:"valueEncoding,omitempty"`
	Headers       []headerJSON    `json:"headers,omitempty"`
}

type headerJSON struct {
	Key           string  `json:"key"`
	Value         *string `json:"value"`
	ValueEncoding string  `json:"valueEncoding,omitempty"`
}

// text renders bytes as UTF-8 text, or base64 when they are not.
func text(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

// recordPrinter writes records for humans (the value, one per line) or as
// JSON lines. On a JSON stream (jsonValues) the JSON lines embed values
// that are JSON as JSON, as the server's JSON reads do (docs/api.md#formats).
type recordPrinter struct {
	w          *bufio.Writer
	asJSON     bool
	jsonValues bool
}

// newRecordPrinter makes the printer for stream s; with asJSON it asks the
// server for the stream's content type (one HEAD) unless info is given.
func newRecordPrinter(ctx context.Context, w io.Writer, s picomq.Stream, asJSON bool, info *picomq.StreamInfo) (*recordPrinter, error) {
	p := &recordPrinter{w: bufio.NewWriter(w), asJSON: asJSON}
	if asJSON && info == nil {
		i, err := s.Head(ctx)
		if err != nil {
			return nil, err
		}
		info = &i
	}
	p.jsonValues = asJSON && wire.IsJSON(info.ContentType)
	return p, nil
}

// valueJSON renders a record value for --json: null for a null value, the
// JSON itself on a JSON stream (flagged "json" where it would read as text
// or null), else a string, base64 when the bytes are not UTF-8.
func (p *recordPrinter) valueJSON(b []byte) (json.RawMessage, string) {
	switch {
	case b == nil:
		return json.RawMessage("null"), ""
	case p.jsonValues && wire.IsJSONText(b):
		var buf bytes.Buffer
		_ = json.Compact(&buf, b) // one JSON line per record
		enc := ""
		if wire.JSONValueFlagged(b) {
			enc = wire.EncodingJSON
		}
		return buf.Bytes(), enc
	}
	v, enc := text(b)
	q, _ := json.Marshal(v)
	return q, enc
}

func (p *recordPrinter) print(r picomq.Record) error {
	if !p.asJSON {
		p.w.Write(r.Body)
		if len(r.Body) == 0 || r.Body[len(r.Body)-1] != '\n' {
			p.w.WriteByte('\n')
		}
		return nil
	}
	j := recordJSON{Position: r.Position}
	if !r.Timestamp.IsZero() {
		j.Timestamp = r.Timestamp.UTC().Format(time.RFC3339Nano)
	}
	if r.Key != nil {
		k, enc := text(r.Key)
		j.Key, j.KeyEncoding = &k, enc
	}
	j.Value, j.ValueEncoding = p.valueJSON(r.Body)
	for _, h := range r.Headers {
		hj := headerJSON{Key: h.Key}
		if h.Value != nil {
			v, enc := text(h.Value)
			hj.Value, hj.ValueEncoding = &v, enc
		}
		j.Headers = append(j.Headers, hj)
	}
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	p.w.Write(b)
	return p.w.WriteByte('\n')
}

func readCmd(fs *flag.FlagSet, e env) func(context.Context, picomq.Client, []string) error {
	from := fs.String("from", "", "position to start at (default: the beginning; \"now\" is the end)")
	limit := fs.Int("limit", 0, "stop after this many records (0 = read to the end)")
	asJSON := fs.Bool("json", false, "print one JSON object per record")
	return func(ctx context.Context, c picomq.Client, args []string) error {
		name, err := oneName(args)
		if err != nil {
			return err
		}
		if *limit < 0 {
			return usagef("--limit must not be negative")
		}
		start := *from
		if start == "" {
			start = c.Beginning()
		}
		out, err := newRecordPrinter(ctx, e.stdout, c.Stream(name), *asJSON, nil)
		if err != nil {
			return err
		}
		defer out.w.Flush()
		it := c.Stream(name).Records(start, picomq.RecordsOptions{})
		n := 0
		for (*limit == 0 || n < *limit) && it.Next(ctx) {
			if err := out.print(it.Record()); err != nil {
				return err
			}
			n++
		}
		return it.Err()
	}
}

func tailCmd(fs *flag.FlagSet, e env) func(context.Context, picomq.Client, []string) error {
	lines := fs.Int("n", 10, "start this many records before the end")
	follow := fs.Bool("f", false, "follow: keep printing records as they are appended")
	fs.BoolVar(follow, "follow", false, "same as -f")
	asJSON := fs.Bool("json", false, "print one JSON object per record")
	return func(ctx context.Context, c picomq.Client, args []string) error {
		name, err := oneName(args)
		if err != nil {
			return err
		}
		if *lines < 0 {
			return usagef("-n must not be negative")
		}
		s := c.Stream(name)
		info, err := s.Head(ctx)
		if err != nil {
			return err
		}
		from := picomq.PositionNow
		if *lines > 0 {
			from = c.Beginning()
			if next, err := c.OffsetOf(info.Next); err == nil {
				first := int64(0)
				if start, err := c.OffsetOf(info.Start); err == nil {
					first = start
				}
				from = c.PositionAt(max(first, next-int64(*lines)))
			}
		}
		out, err := newRecordPrinter(ctx, e.stdout, s, *asJSON, &info)
		if err != nil {
			return err
		}
		defer out.w.Flush()
		if !*follow {
			it := s.Records(from, picomq.RecordsOptions{})
			for it.Next(ctx) {
				if err := out.print(it.Record()); err != nil {
					return err
				}
			}
			return it.Err()
		}
		sub, err := s.Subscribe(ctx, from, picomq.SubscribeOptions{})
		if err != nil {
			return err
		}
		defer sub.Close()
		for ev := range sub.Events() {
			for _, r := range ev.Records {
				if err := out.print(r); err != nil {
					return err
				}
			}
			if err := out.w.Flush(); err != nil {
				return err // stdout is gone (a closed pipe)
			}
		}
		if ctx.Err() != nil {
			return nil // interrupted: following ends normally
		}
		return sub.Err()
	}
}

func lsCmd(fs *flag.FlagSet, e env) func(context.Context, picomq.Client, []string) error {
	prefix := fs.String("prefix", "", "only streams whose names start with this")
	asJSON := fs.Bool("json", false, "print one JSON object per stream")
	return func(ctx context.Context, c picomq.Client, args []string) error {
		if len(args) > 1 {
			return usagef("ls takes at most one prefix")
		}
		if len(args) == 1 {
			if *prefix != "" {
				return usagef("give the prefix as an argument or with --prefix, not both")
			}
			*prefix = args[0]
		}
		w := bufio.NewWriter(e.stdout)
		defer w.Flush()
		var tw *tabwriter.Writer
		if !*asJSON {
			tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			defer tw.Flush()
		}
		cursor, header := "", false
		for {
			page, err := c.List(ctx, picomq.ListOptions{Prefix: *prefix, Cursor: cursor})
			if err != nil {
				return err
			}
			for _, s := range page.Streams {
				if *asJSON {
					if err := writeJSON(w, toInfoJSON(s)); err != nil {
						return err
					}
					continue
				}
				if !header {
					fmt.Fprintln(tw, "NAME\tCONTENT-TYPE\tSTART\tNEXT\tKAFKA-TOPIC")
					header = true
				}
				topic := s.KafkaTopic
				if topic == "" {
					topic = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, s.ContentType, s.Start, s.Next, topic)
			}
			if page.NextCursor == "" {
				return nil
			}
			cursor = page.NextCursor
		}
	}
}

func rmCmd(fs *flag.FlagSet, e env) func(context.Context, picomq.Client, []string) error {
	force := fs.Bool("force", false, "ignore streams that do not exist")
	return func(ctx context.Context, c picomq.Client, args []string) error {
		if len(args) == 0 {
			return usagef("rm needs at least one stream name")
		}
		for _, name := range args {
			if !strings.HasPrefix(name, "/") {
				return usagef("stream name %q: names are paths such as /orders/1042", name)
			}
		}
		for _, name := range args {
			err := c.Stream(name).Delete(ctx)
			if err != nil && !(*force && picomq.IsKind(err, picomq.KindNotFound)) {
				return err
			}
		}
		return nil
	}
}

func describeCmd(fs *flag.FlagSet, e env) func(context.Context, picomq.Client, []string) error {
	asJSON := fs.Bool("json", false, "print the description as JSON")
	return func(ctx context.Context, c picomq.Client, args []string) error {
		name, err := oneName(args)
		if err != nil {
			return err
		}
		info, err := c.Stream(name).Describe(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(e.stdout, toInfoJSON(info))
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		row := func(k, v string) {
			if v != "" {
				fmt.Fprintf(tw, "%s:\t%s\n", k, v)
			}
		}
		j := toInfoJSON(info)
		row("name", j.Name)
		row("content type", j.ContentType)
		row("start", j.Start)
		row("next", j.Next)
		row("closed", fmt.Sprint(j.Closed))
		if j.ID != 0 {
			row("id", fmt.Sprint(j.ID))
		}
		row("created", j.CreatedAt)
		row("kafka topic", j.KafkaTopic)
		if info.Retention > 0 {
			row("retention", info.Retention.String())
		}
		if info.RetentionBytes > 0 {
			row("retention bytes", fmt.Sprint(info.RetentionBytes))
		}
		row("owner", j.Owner)
		if info.TTL > 0 {
			row("ttl", info.TTL.String())
		}
		row("expires at", j.ExpiresAt)
		return tw.Flush()
	}
}

// isTerminal reports whether f is a character device (a terminal), without
// a dependency: progress output is for people watching, not for logs.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
