package e2e

import (
	"context"
	"math"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestDrainedNodeAnswersKafkaWhileAsked: a node stopped with SIGTERM in a
// cluster drains and then keeps answering Kafka while clients are still
// asking it (node.lingerForKafka), so a producer that was just told its
// partition moved can refresh its metadata there instead of reading EOF
// and waiting out a retry back-off (1.2-1.9 s pauses in the rolling
// drill). The linger is bounded: the node exits within about 2 s of the
// drain however busy its clients keep it.
func TestDrainedNodeAnswersKafkaWhileAsked(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startCluster(t, 2, clusterOpts{Kafka: true})
	a := c.nodes[0]
	// Seed 0 is node-a's listener: requests go there and nowhere else.
	cl := kafkaClient(t, kgo.SeedBrokers(a.KafkaAddr), kgo.RequestRetries(0))
	seedA := cl.Broker(math.MinInt32)
	ask := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := seedA.Request(ctx, kmsg.NewPtrMetadataRequest())
		return err
	}
	if err := ask(); err != nil {
		t.Fatalf("metadata from node-a before its stop: %v", err)
	}

	var mu sync.Mutex
	var lastAnswered time.Time
	stopAsking := make(chan struct{})
	asking := make(chan struct{})
	go func() {
		defer close(asking)
		for {
			select {
			case <-stopAsking:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if ask() == nil {
				mu.Lock()
				lastAnswered = time.Now()
				mu.Unlock()
			}
		}
	}()
	sigterm := time.Now()
	if err := a.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Exited:
	case <-time.After(30 * time.Second):
		t.Fatal("node-a did not exit within 30 s of SIGTERM")
	}
	exited := time.Since(sigterm)
	close(stopAsking)
	<-asking
	mu.Lock()
	answeredFor := max(lastAnswered.Sub(sigterm), 0) // 0: never after the SIGTERM
	mu.Unlock()
	t.Logf("node-a answered Kafka for %v after SIGTERM and exited after %v", answeredFor.Round(time.Millisecond), exited.Round(time.Millisecond))
	if a.ExitErr != nil {
		t.Fatalf("node-a exited uncleanly: %v", a.ExitErr)
	}
	// Asked every 100 ms, it answers until the linger's bound (2 s
	// after the drain); without the linger it stopped at the drain's end,
	// tens of milliseconds after the SIGTERM.
	if answeredFor < time.Second {
		t.Errorf("node-a answered Kafka for only %v after SIGTERM, want about 2 s while a client keeps asking", answeredFor)
	}
	// The drain has nothing to move here; the linger is at most 2 s.
	if exited > 10*time.Second {
		t.Errorf("node-a took %v to exit; the linger is bounded by 2 s", exited)
	}
}
