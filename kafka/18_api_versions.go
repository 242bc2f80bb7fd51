package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleApiVersions never fails: a client that cannot learn our versions
// falls back to ancient message formats (librdkafka) or gives up. The
// client software name and version (v3+) are not checked.
//
// v3+ carries the cluster's features (KIP-584): PicoMQ offers
// transaction.version 2 (KIP-890 part 2: Produce v12 adds a partition to
// its transaction, EndTxn v5 bumps the epoch), and finalizes it once every
// live node serves it (clusterTxnVersion), which is what makes franz-go
// and the Java client use those versions. Until then (a rolling upgrade
// from a build without it) nothing is finalized and clients run
// transactions the way every build accepts; franz-go switches as soon as
// any broker reports the level, so every node must answer alike. The
// finalized epoch is a constant: it only ever goes from none (-1) to 1,
// and clients keep the highest epoch they saw. No other feature is listed: metadata.version and
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
		resp.FinalizedFeaturesEpoch = -1 // none finalized
		if s.clusterTxnVersion(ctx) >= 2 {
			resp.FinalizedFeaturesEpoch = finalizedFeaturesEpoch
			resp.FinalizedFeatures = finalizedFeatures
		}
	}
	return resp, nil
}

// TxnVersion is the highest transaction.version this build serves; a
// node publishes it in its membership record (metadata.Member).
const TxnVersion = 2

// clusterTxnVersion is the transaction.version every live node serves:
// this build's, lowered by each other member's record (0 from a build
// before the field). Kafka finalizes a feature only once every broker
// supports it, for the same reason: a client told level 2 by an upgraded
// node skips AddPartitionsToTxn, and an old leader refuses the batch.
// When the registry cannot be read the answer is 0: the older protocol is
// the one every node accepts.
func (s *Server) clusterTxnVersion(ctx context.Context) int {
	members, err := s.svc.Members(ctx)
	if err != nil {
		return 0
	}
	level, self := TxnVersion, s.svc.NodeID()
	for _, m := range members {
		if m.NodeID != self {
			level = min(level, m.TxnVersion)
		}
	}
	return level
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
