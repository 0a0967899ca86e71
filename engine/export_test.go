package engine

// SetLocal is the SET LOCAL statement a scoped pool begins its
// transactions with for one setting, for a test.
var SetLocal = setLocal
