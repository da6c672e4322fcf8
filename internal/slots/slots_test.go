package slots

import "testing"

// TestTake: a key takes slots up to its bound, then is refused with the
// number it holds; a release gives one back, once however often it is
// called; keys count apart; a negative bound is no limit; nothing is
// kept for a key that holds none.
func TestTake(t *testing.T) {
	var s Slots
	first, _ := s.Take("a", 2)
	second, _ := s.Take("a", 2)
	if first == nil || second == nil {
		t.Fatal("a key was refused below its bound")
	}
	if release, held := s.Take("a", 2); release != nil || held != 2 {
		t.Fatalf("a third slot of a bound of 2: release %v, held %d; want refused, 2", release != nil, held)
	}
	if release, _ := s.Take("b", 2); release == nil {
		t.Fatal("another key was refused for a's slots")
	} else {
		release()
	}
	first()
	first()
	third, _ := s.Take("a", 2)
	if third == nil {
		t.Fatal("a released slot was not given back")
	}
	if release, held := s.Take("a", 2); release != nil || held != 2 {
		t.Fatalf("a release called twice gave back two slots: held %d", held)
	}
	for range 3 {
		if release, _ := s.Take("c", -1); release == nil {
			t.Fatal("a negative bound refused")
		}
	}
	second()
	third()
	if _, ok := s.held["a"]; ok {
		t.Fatalf("a key holding no slot is kept: %v", s.held)
	}
}
