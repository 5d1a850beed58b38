package combine

// HeldGroups is how many groups' worker manifests s holds in memory.
func HeldGroups(s *Stage) int {
	if s.overlap == nil {
		return 0
	}
	s.overlap.mu.Lock()
	defer s.overlap.mu.Unlock()
	return len(s.overlap.members)
}

// HandedCount is how many handed manifests s holds that no group of it
// has taken.
func HandedCount(s *Stage) int {
	if s.overlap == nil {
		return 0
	}
	s.overlap.mu.Lock()
	defer s.overlap.mu.Unlock()
	return len(s.overlap.handed)
}
