package pgembed

// SetFreePort replaces the free-port picker for a test (f gets the real
// picker) and returns a function restoring it; it lets the external tests
// exercise the retry after a port was taken.
func SetFreePort(f func(pick func() (int, error)) (int, error)) (restore func()) {
	old := pickPort
	pickPort = func() (int, error) { return f(freePort) }
	return func() { pickPort = old }
}

// SetLibRoot replaces /usr/lib/postgresql for a test and returns a function
// restoring it.
func SetLibRoot(dir string) (restore func()) {
	old := libRoot
	libRoot = dir
	return func() { libRoot = old }
}

var BaseDir = baseDir
