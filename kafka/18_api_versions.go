package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleApiVersions never fails: a client that cannot learn our versions
// falls back to ancient message formats (librdkafka) or gives up. The
// client software name and version (v3+) are not checked.
//
// v3+ carries the cluster's features (KIP-584): PicoMQ offers and has
// finalized transaction.version 2 (KIP-890 part 2: Produce v12 adds a
// partition to its transaction, EndTxn v5 bumps the epoch), which is what
// makes franz-go and the Java client use those versions. Every node
// offers it, so the cluster finalizes it from the start: the finalized
// epoch is a constant. No other feature is listed: metadata.version and
// kraft.version describe a KRaft metadata log PicoMQ does not have, and
// group.version would only restate what the ConsumerGroupHeartbeat
// versions already say. A feature whose lowest level is 0 is left out of
// the supported list for requests below v4, as Kafka does (KAFKA-17492:
// older Java clients reject a range starting at 0); the finalized list is
// the same for every version.
func handleApiVersions(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ApiVersionsRequest)
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = apiVersionKeys()
	if req.Version >= 3 {
		for _, f := range supportedFeatures {
			if f.MinVersion == 0 && req.Version < 4 {
				continue
			}
			resp.SupportedFeatures = append(resp.SupportedFeatures, f)
		}
		resp.FinalizedFeaturesEpoch = finalizedFeaturesEpoch
		resp.FinalizedFeatures = finalizedFeatures
	}
	return resp, nil
}

// The features of ApiVersions v3+ (handleApiVersions).
var (
	supportedFeatures = []kmsg.ApiVersionsResponseSupportedFeature{
		{Name: "transaction.version", MinVersion: 0, MaxVersion: 2},
	}
	finalizedFeatures = []kmsg.ApiVersionsResponseFinalizedFeature{
		{Name: "transaction.version", MinVersionLevel: 2, MaxVersionLevel: 2},
	}
)

const finalizedFeaturesEpoch = 1
