package kafka

import (
	"context"
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/group"
)

// handlerFunc answers one decoded request. A nil response with a nil error
// sends nothing back (acks=0 produce); an error closes the connection.
type handlerFunc func(s *Server, ctx context.Context, cc *connState, req kmsg.Request) (kmsg.Response, error)

// handler is one row of the table: the versions advertised in ApiVersions
// and accepted, and who answers.
type handler struct {
	min, max int16
	fn       handlerFunc
	group    bool // routed to the group coordinator
}

// handlers is the explicit table of every API key this server answers.
// ApiVersions is built from it, so a key is advertised exactly when it is
// here. Version ranges: docs/kafka.md (chosen from the versions real
// clients send, measured; topic-id-only versions are left out).
var handlers map[int16]handler

func init() {
	handlers = map[int16]handler{
		// Produce v0–v2 (magic 0/1 message sets) are not served, as in
		// Kafka 4.0 (KIP-896): PicoMQ stores magic 2 only.
		kmsg.Produce.Int16():                 {3, 12, handleProduce, false},
		kmsg.Fetch.Int16():                   {0, 12, handleFetch, false},
		kmsg.ListOffsets.Int16():             {0, 6, handleListOffsets, false},
		kmsg.Metadata.Int16():                {0, 12, handleMetadata, false},
		kmsg.SASLHandshake.Int16():           {0, 1, handleSASLHandshake, false},
		kmsg.ApiVersions.Int16():             {0, 4, handleApiVersions, false},
		kmsg.CreateTopics.Int16():            {0, 7, handleCreateTopics, false},
		kmsg.DeleteTopics.Int16():            {0, 6, handleDeleteTopics, false},
		kmsg.DeleteRecords.Int16():           {0, 2, handleDeleteRecords, false},
		kmsg.InitProducerID.Int16():          {0, 5, handleInitProducerID, false},
		kmsg.DescribeConfigs.Int16():         {0, 4, handleDescribeConfigs, false},
		kmsg.SASLAuthenticate.Int16():        {0, 2, handleSASLAuthenticate, false},
		kmsg.CreatePartitions.Int16():        {0, 3, handleCreatePartitions, false},
		kmsg.DescribeCluster.Int16():         {0, 1, handleDescribeCluster, false},
		kmsg.AddPartitionsToTxn.Int16():      {0, 5, handleAddPartitionsToTxn, false},
		kmsg.AddOffsetsToTxn.Int16():         {0, 3, handleAddOffsetsToTxn, false},
		kmsg.EndTxn.Int16():                  {0, 5, handleEndTxn, false},
		kmsg.WriteTxnMarkers.Int16():         {0, 1, handleWriteTxnMarkers, false},
		kmsg.DescribeProducers.Int16():       {0, 0, handleDescribeProducers, false},
		kmsg.DescribeTransactions.Int16():    {0, 0, handleDescribeTransactions, false},
		kmsg.ListTransactions.Int16():        {0, 1, handleListTransactions, false},
		kmsg.OffsetForLeaderEpoch.Int16():    {0, 4, handleOffsetForLeaderEpoch, false},
		kmsg.DescribeLogDirs.Int16():         {0, 4, handleDescribeLogDirs, false},
		kmsg.AlterConfigs.Int16():            {0, 2, handleAlterConfigs, false},
		kmsg.IncrementalAlterConfigs.Int16(): {0, 1, handleIncrementalAlterConfigs, false},
		// SCRAM credentials (50_, 51_)
		kmsg.DescribeUserSCRAMCredentials.Int16(): {0, 0, handleDescribeUserSCRAMCredentials, false},
		kmsg.AlterUserSCRAMCredentials.Int16():    {0, 0, handleAlterUserSCRAMCredentials, false},
		// Share groups (KIP-932, 76_ to 79_, 90_ to 92_): the versions
		// Kafka 4.2 clients send; v0 of the first four was early access.
		kmsg.ShareGroupHeartbeat.Int16():       {1, 1, handleShareGroupHeartbeat, false},
		kmsg.ShareGroupDescribe.Int16():        {1, 1, handleShareGroupDescribe, false},
		kmsg.ShareFetch.Int16():                {1, 2, handleShareFetch, false},
		kmsg.ShareAcknowledge.Int16():          {1, 2, handleShareAcknowledge, false},
		kmsg.DescribeShareGroupOffsets.Int16(): {0, 1, handleDescribeShareGroupOffsets, false},
		kmsg.AlterShareGroupOffsets.Int16():    {0, 0, handleAlterShareGroupOffsets, false},
		kmsg.DeleteShareGroupOffsets.Int16():   {0, 0, handleDeleteShareGroupOffsets, false},
	}
	// The consumer-group keys are the group coordinator's, with the
	// versions it implements.
	for key, v := range group.Versions() {
		handlers[key] = handler{min: v[0], max: v[1], group: true}
	}
}

// apiVersionKeys lists the table for ApiVersions, sorted by key.
func apiVersionKeys() []kmsg.ApiVersionsResponseApiKey {
	keys := make([]kmsg.ApiVersionsResponseApiKey, 0, len(handlers))
	for k, h := range handlers {
		keys = append(keys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: h.min, MaxVersion: h.max})
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ApiKey < keys[j].ApiKey })
	return keys
}
