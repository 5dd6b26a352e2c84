package controller

// PatchStatus is patchStatus, for the tests of package controller_test.
var PatchStatus = patchStatus
