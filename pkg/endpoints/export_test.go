package endpoints

// HeapInUse is heapInUse, for the tests of package endpoints_test.
var HeapInUse = heapInUse
