package testenv

import "runtime"

// HeapInUse is the heap in use after a full collection (two: the first may leave finalized objects
// for the second), for tests that measure what a structure keeps.
func HeapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
