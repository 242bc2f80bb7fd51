package picomq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strconv"

	picomq "github.com/PicoMQ/picomq/client/go"
)

// The examples run in `go test` against a real `picomq serve` on
// 127.0.0.1:4437, started by TestMain (harness_test.go).

// The package documentation's snippet, unchanged.
func Example() {
	ctx := context.Background()

	client, err := picomq.NewPico("http://127.0.0.1:4437") // or picomq.NewDurableStreams(url); constructors do no network I/O
	if err != nil {
		log.Fatal(err)
	}
	stream := client.Stream("/orders/1042")
	_, err = stream.Create(ctx, "application/json", 0)
	if err != nil {
		log.Fatal(err)
	}
	ack, err := stream.Append(ctx, picomq.AppendRecord{Body: []byte(`{"item":"widget"}`)}) // ack.Start
	if err != nil {
		log.Fatal(err)
	}
	page, err := stream.Read(ctx, client.Beginning(), picomq.ReadOptions{}) // page.Records[i].Position, .Body; page.Next
	if err != nil {
		log.Fatal(err)
	}

	fmt.Println("appended at", ack.Start)
	for _, rec := range page.Records {
		fmt.Println(rec.Position, string(rec.Body))
	}
	fmt.Println("next", page.Next)

	// Examples run again with -count; start from scratch each time.
	if err := stream.Delete(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// appended at 0
	// 0 {"item":"widget"}
	// next 1
}

// A producer batches records and appends each batch once, even when it has
// to retry after a lost response.
func ExampleProducer() {
	ctx := context.Background()
	client, err := picomq.NewPico("http://127.0.0.1:4437")
	if err != nil {
		log.Fatal(err)
	}
	stream := client.Stream("/examples/producer")
	defer stream.Delete(context.Background())
	if _, err := stream.Create(ctx, "text/plain", 0); err != nil {
		log.Fatal(err)
	}
	producer, err := stream.NewProducer(picomq.ProducerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	var acks []*picomq.PendingAck
	for i := range 1000 {
		a, err := producer.Send(ctx, picomq.AppendRecord{Body: []byte("line " + strconv.Itoa(i))})
		if err != nil {
			log.Fatal(err)
		}
		acks = append(acks, a)
	}
	last, err := producer.SendDurable(ctx, picomq.AppendRecord{Body: []byte("the end")})
	if err != nil {
		log.Fatal(err)
	}
	if err := producer.Close(ctx); err != nil {
		log.Fatal(err)
	}
	first, _ := acks[0].Result()
	fmt.Println("first at", first.Start, "last at", last.Start)
	// Output: first at 0 last at 1000
}

// Records iterates page by page; with Live it waits for new records once
// it has caught up.
func ExampleStream_Records() {
	ctx := context.Background()
	client, err := picomq.NewPico("http://127.0.0.1:4437")
	if err != nil {
		log.Fatal(err)
	}
	stream := client.Stream("/examples/records")
	defer stream.Delete(context.Background())
	if _, err := stream.Create(ctx, "text/plain", 0); err != nil {
		log.Fatal(err)
	}
	for _, s := range []string{"a", "b", "c"} {
		if _, err := stream.Append(ctx, picomq.AppendRecord{Body: []byte(s)}); err != nil {
			log.Fatal(err)
		}
	}
	it := stream.Records(client.Beginning(), picomq.RecordsOptions{Limit: 2})
	for it.Next(ctx) {
		rec := it.Record()
		fmt.Println(rec.Position, string(rec.Body))
	}
	if err := it.Err(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("resume at", it.Position())
	// Output:
	// 0 a
	// 1 b
	// 2 c
	// resume at 3
}

// Subscribe delivers records over server-sent events and reconnects by
// itself; cancel the context (or Close) to stop.
func ExampleStream_Subscribe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := picomq.NewPico("http://127.0.0.1:4437")
	if err != nil {
		log.Fatal(err)
	}
	stream := client.Stream("/examples/subscribe")
	defer stream.Delete(context.Background())
	if _, err := stream.Create(ctx, "application/json", 0); err != nil {
		log.Fatal(err)
	}
	sub, err := stream.Subscribe(ctx, client.Beginning(), picomq.SubscribeOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	go func() {
		for i := range 3 {
			body := fmt.Sprintf(`{"n":%d}`, i)
			if _, err := stream.Append(ctx, picomq.AppendRecord{Body: []byte(body)}); err != nil {
				log.Print(err)
				return
			}
		}
	}()
	seen := 0
	for ev := range sub.Events() {
		for _, rec := range ev.Records {
			fmt.Println(rec.Position, string(rec.Body))
			seen++
		}
		if seen == 3 {
			cancel()
		}
	}
	// Output:
	// 0 {"n":0}
	// 1 {"n":1}
	// 2 {"n":2}
}

// OnEvent takes each event on the subscription's own goroutine, as soon
// as it is decoded, with no hand-over through Events: the lowest
// append-to-delivery latency. Cancel the context to stop (the callback
// must not call Close).
func ExampleSubscribeOptions_onEvent() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := picomq.NewPico("http://127.0.0.1:4437")
	if err != nil {
		log.Fatal(err)
	}
	stream := client.Stream("/examples/onevent")
	defer stream.Delete(context.Background())
	if _, err := stream.Create(ctx, "application/json", 0); err != nil {
		log.Fatal(err)
	}
	seen := 0 // the callback's own: it runs on one goroutine
	sub, err := stream.Subscribe(ctx, client.Beginning(), picomq.SubscribeOptions{
		OnEvent: func(ev picomq.Event) {
			for _, rec := range ev.Records {
				fmt.Println(rec.Position, string(rec.Body))
				seen++
			}
			if seen == 3 {
				cancel()
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	for i := range 3 {
		// Not ctx: a record can reach the subscriber before its append's
		// answer reaches the appender, and the callback cancels ctx.
		body := fmt.Sprintf(`{"n":%d}`, i)
		if _, err := stream.Append(context.Background(), picomq.AppendRecord{Body: []byte(body)}); err != nil {
			log.Fatal(err)
		}
	}
	for range sub.Events() { // delivers nothing; closed when the subscription ends
	}
	// Output:
	// 0 {"n":0}
	// 1 {"n":1}
	// 2 {"n":2}
}

// The same code speaks Durable Streams; positions differ, and a record is a
// value (no keys or headers).
func ExampleNewDurableStreams() {
	ctx := context.Background()
	client, err := picomq.NewDurableStreams(dsURL) // a node started with --protocol durable-streams
	if err != nil {
		log.Fatal(err)
	}
	stream := client.Stream("/examples/ds")
	defer stream.Delete(context.Background())
	if _, err := stream.Create(ctx, "application/json", 0); err != nil {
		log.Fatal(err)
	}
	ack, err := stream.Append(ctx,
		picomq.AppendRecord{Body: []byte(`{"id":1}`)},
		picomq.AppendRecord{Body: []byte(`[1,2]`)}) // one record, not two
	if err != nil {
		log.Fatal(err)
	}
	page, err := stream.Read(ctx, client.Beginning(), picomq.ReadOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("beginning", client.Beginning(), "appended", ack.Count)
	for _, rec := range page.Records {
		fmt.Println(rec.Position, string(rec.Body))
	}
	_, err = client.List(ctx, picomq.ListOptions{})
	fmt.Println("list:", picomq.IsKind(err, picomq.KindUnsupported))
	// Output:
	// beginning -1 appended 2
	// 0000000000000000_0000000000000000 {"id":1}
	// 0000000000000000_0000000000000001 [1,2]
	// list: true
}

// Errors carry the status and the stable code; IsKind tests them.
func ExampleIsKind() {
	ctx := context.Background()
	client, err := picomq.NewPico("http://127.0.0.1:4437")
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.Stream("/examples/missing").Head(ctx)
	fmt.Println(picomq.IsKind(err, picomq.KindNotFound))

	_, err = client.Stream("/examples/missing").Read(ctx, "0", picomq.ReadOptions{})
	var ce *picomq.ClientError
	if errors.As(err, &ce) {
		fmt.Println(ce.Status, ce.Code)
	}
	// Output:
	// true
	// 404 stream_not_found
}
