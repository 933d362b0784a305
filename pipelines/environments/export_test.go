package environments

// ReadMaxDelay is how long a burst of pushes may delay a read at most (tests bound the reads
// of a burst by its length).
var ReadMaxDelay = &readMaxDelay
