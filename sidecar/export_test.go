package sidecar

// SetTestHook makes every handler call f at its hook points ("DoPut.batch"
// before each batch is written, "DoGet.batch" before each batch is sent,
// "DoAction" at the start), so a test can play a bug there: a panic, or a
// call that blocks. The returned func removes it.
func SetTestHook(f func(point string)) (restore func()) {
	testHook.Store(&f)
	return func() { testHook.Store(nil) }
}
