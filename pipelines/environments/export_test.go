package environments

// ReadQuiet and ReadMaxDelay pace the reads (reads.go); a test may set them before it starts
// a model, and put them back after.
var (
	ReadQuiet    = &readQuiet
	ReadMaxDelay = &readMaxDelay
)

// RebuildHook runs at the start of every rebuild while set; a test sets it before it starts a
// model, and puts it back after.
var RebuildHook = &rebuildHook
