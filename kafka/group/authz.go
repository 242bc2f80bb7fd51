package group

import "context"

// Authorizer is what the connection's principal may do with group keys
// (docs/security.md, "Kafka consumer groups"). The frontend tags each
// request's context with one (WithAuthorizer) when tokens are on; without
// one everything is allowed.
//
// Group ids themselves are not a protected resource: the offsets a group
// holds for a topic partition are what matters, and reading or moving them
// needs read access to that partition's stream, like consuming it.
type Authorizer interface {
	// ReadPartition reports whether the principal may read partition p
	// of topic: OffsetCommit, OffsetFetch and OffsetDelete need it for
	// every partition they name.
	ReadPartition(ctx context.Context, topic string, p int32) bool
	// AdminStream reports whether the principal holds admin on the
	// stream name: DeleteGroups needs it on the group's offsets stream.
	AdminStream(name string) bool
}

type authzKey struct{}

// WithAuthorizer tags ctx with the principal's Authorizer.
func WithAuthorizer(ctx context.Context, a Authorizer) context.Context {
	return context.WithValue(ctx, authzKey{}, a)
}

// readPartition applies the context's Authorizer, if any.
func readPartition(ctx context.Context, topic string, p int32) bool {
	a, ok := ctx.Value(authzKey{}).(Authorizer)
	return !ok || a.ReadPartition(ctx, topic, p)
}

// adminStream applies the context's Authorizer, if any.
func adminStream(ctx context.Context, name string) bool {
	a, ok := ctx.Value(authzKey{}).(Authorizer)
	return !ok || a.AdminStream(name)
}
