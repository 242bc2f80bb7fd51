package main

// picomq encode: writes a Pico binary batch (the record codec frame of
// docs/api.md#the-pico-record-codec-binary-batches) from standard input, so
// a shell user can produce the body of an application/vnd.picomq.batch
// append (curl --data-binary @batch.bin) without writing code; and the
// reverse of that for append: records of such a frame on standard input.

import (
	"bytes"
	"flag"
	"fmt"
	"io"

	picomq "github.com/PicoMQ/picomq/client/go"
	"github.com/PicoMQ/picomq/sdk/wire/codec"
)

const encodeUsage = `picomq encode [--key K] [--whole] [--keep-empty] < input > batch.bin
  writes one Pico binary batch (application/vnd.picomq.batch) to stdout:
  a record per line of stdin (as append does), or all of stdin with --whole
`

// encodeCmd runs `picomq encode`; it talks to no server.
func encodeCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("picomq encode", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, encodeUsage) }
	key := fs.String("key", "", "record key of every record")
	whole := fs.Bool("whole", false, "one record: all of stdin (default: one record per line)")
	keepEmpty := fs.Bool("keep-empty", false, "encode empty lines as empty records (default: skip them)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "picomq encode: unexpected argument %q (input comes from stdin)\n", fs.Arg(0))
		return exitUsage
	}
	var k []byte
	if *key != "" {
		k = []byte(*key)
	}
	var recs []codec.Record
	add := func(v []byte) error {
		recs = append(recs, codec.Record{Key: k, Value: bytes.Clone(v)})
		return nil
	}
	var err error
	if *whole {
		var all []byte
		if all, err = io.ReadAll(stdin); err == nil {
			err = add(all)
		}
	} else {
		err = forEachLine(stdin, false, func(line []byte) error {
			if len(line) == 0 && !*keepEmpty {
				return nil
			}
			return add(line)
		})
	}
	if err == nil && len(recs) == 0 {
		err = fmt.Errorf("no records in the input (a batch holds at least one)")
	}
	if err == nil {
		_, err = stdout.Write(codec.Encode(recs))
	}
	if err != nil {
		fmt.Fprintf(stderr, "picomq encode: %v\n", err)
		return exitError
	}
	return exitOK
}

// readBinaryBatch decodes a Pico binary batch from r into records to
// append. The Go client appends values, so a null value (a tombstone) is
// refused rather than silently written as an empty one.
func readBinaryBatch(r io.Reader) ([]picomq.AppendRecord, error) {
	body, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	recs, err := codec.Decode(body, nil, codec.Limits{})
	if err != nil {
		return nil, fmt.Errorf("stdin is not a Pico binary batch: %v", err)
	}
	out := make([]picomq.AppendRecord, len(recs))
	for i, rec := range recs {
		if rec.Value == nil {
			return nil, fmt.Errorf("record %d of the batch has a null value, which append cannot write (post the batch with curl)", i)
		}
		ar := picomq.AppendRecord{Key: rec.Key, Body: rec.Value}
		for _, h := range rec.Headers {
			ar.Headers = append(ar.Headers, picomq.Header{Key: h.Key, Value: h.Value})
		}
		out[i] = ar
	}
	return out, nil
}
