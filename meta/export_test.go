package meta

// SetAllStreamsPageSize lets tests exercise AllStreams' paging without
// creating more than MaxListLimit streams.
func SetAllStreamsPageSize(r *Registry, n int) { r.pageSize = n }
