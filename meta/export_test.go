package meta

// SetAllStreamsPageSize lets tests exercise AllStreams' paging without
// creating more than MaxListLimit streams.
func SetAllStreamsPageSize(r *Registry, n int) { r.pageSize = n }

// SetMaxTxnOps lets tests make create batches small.
func SetMaxTxnOps(r *Registry, n int) { r.maxTxnOps = n }

// SetIDBlockSize lets tests use up ID blocks after a few creates.
func SetIDBlockSize(r *Registry, n uint64) { r.idBlock = n }

// SetMaxCreateTxns lets tests have several create transactions in flight.
func SetMaxCreateTxns(r *Registry, n int) { r.maxCreateTxns = n }

// SetScanPaging makes the manifest and reservation listings read pages of
// n keys and call between after each page but the last.
func SetScanPaging(r *Registry, n int64, between func()) { r.scanPage, r.afterScanPage = n, between }
