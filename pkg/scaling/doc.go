// Package scaling is the scaler's core: it finds interceptor replicas through the EndpointSlices of
// their admin Service, polls their per-app counts concurrently, folds them into immutable snapshots
// (concurrency, request rates, staleness), follows every replica's wake stream, and serves the
// result to KEDA as an externalscaler gRPC service.
//
// Data flows one way. The Collector's loop goroutine is the only writer: it owns the Aggregator,
// whose per-replica and per-app state is never shared, and publishes each Snapshot through State.
// Network I/O happens in per-replica goroutines that hold no lock; readers (the gRPC handlers) only
// load the current Snapshot pointer, so a hung interceptor can never block a metric read.
package scaling
