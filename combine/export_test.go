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
